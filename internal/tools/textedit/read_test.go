package textedit

import (
	"fmt"
	"strings"
	"testing"
)

// numbered returns the lines first..last of a file whose line n is "line n",
// as Format renders them.
func numbered(first, last int) string {
	var b []string
	for n := first; n <= last; n++ {
		b = append(b, fmt.Sprintf("%6d\tline %d", n, n))
	}
	return strings.Join(b, "\n")
}

func lines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		opts    ReadOptions
		want    string
		first   int
		last    int
		total   int
		trunc   bool
	}{
		{"numbering", lines(3), ReadOptions{}, numbered(1, 3), 1, 3, 3, false},
		{"no trailing newline", "line 1\nline 2", ReadOptions{}, numbered(1, 2), 1, 2, 2, false},
		{"offset 1", lines(3), ReadOptions{Offset: 1}, numbered(1, 3), 1, 3, 3, false},
		{"offset and limit", lines(10), ReadOptions{Offset: 4, Limit: 3}, numbered(4, 6) + "\n[… 4 more lines; continue with offset=7]", 4, 6, 10, true},
		{"one more line", lines(3), ReadOptions{Limit: 2}, numbered(1, 2) + "\n[… 1 more line; continue with offset=3]", 1, 2, 3, true},
		{"last line", lines(3), ReadOptions{Offset: 3}, numbered(3, 3), 3, 3, 3, false},
		{"default limit", lines(2005), ReadOptions{}, numbered(1, 2000) + "\n[… 5 more lines; continue with offset=2001]", 1, 2000, 2005, true},
		{"crlf", "line 1\r\nline 2\r\n", ReadOptions{}, numbered(1, 2), 1, 2, 2, false},
		{"bom", "\uFEFFline 1\nline 2\n", ReadOptions{}, numbered(1, 2), 1, 2, 2, false},
		{"empty", "", ReadOptions{}, "(empty file)", 0, 0, 0, false},
		{"bom only", "\uFEFF", ReadOptions{}, "(empty file)", 0, 0, 0, false},
		{"blank lines", "\n\n", ReadOptions{}, "     1\t\n     2\t", 1, 2, 2, false},
		{"long line", "abcdefghij\nxy\n", ReadOptions{MaxLineChars: 4}, "     1\tabcd… [6 more characters]\n     2\txy", 1, 2, 2, false},
		{"long line counts runes", "ééééé\n", ReadOptions{MaxLineChars: 4}, "     1\téééé… [1 more character]", 1, 1, 1, false},
		{"max chars cut at a line boundary", lines(10), ReadOptions{MaxChars: 3 * 15}, numbered(1, 3) + "\n[… output capped at 45 characters; 7 more lines; continue with offset=4]", 1, 3, 10, true},
		{"max chars shows one line at least", "0123456789012345678901234567890123456789012345678901234567890123456789\n", ReadOptions{MaxChars: 50}, "     1\t0123456789… [60 more characters]", 1, 1, 1, false},
		{"invalid utf-8", "a\xffb\n", ReadOptions{}, "     1\ta\uFFFDb", 1, 1, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := Format([]byte(tc.content), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.Text != tc.want {
				t.Errorf("text:\n%q\nwant:\n%q", r.Text, tc.want)
			}
			if r.FirstLine != tc.first || r.LastLine != tc.last || r.TotalLines != tc.total || r.Truncated != tc.trunc {
				t.Errorf("got first=%d last=%d total=%d truncated=%v; want %d %d %d %v",
					r.FirstLine, r.LastLine, r.TotalLines, r.Truncated, tc.first, tc.last, tc.total, tc.trunc)
			}
		})
	}
}

func TestFormatWideNumbers(t *testing.T) {
	t.Parallel()
	content := strings.Repeat("x\n", 999999) + "line 1000000\nline 1000001\n"
	r, err := Format([]byte(content), ReadOptions{Offset: 1000000, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "1000000\tline 1000000\n1000001\tline 1000001"; r.Text != want {
		t.Errorf("got %q, want %q", r.Text, want)
	}
}

func TestFormatErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		content string
		opts    ReadOptions
		has     string
	}{
		{lines(3), ReadOptions{Offset: 4}, "it has 3 lines"},
		{"", ReadOptions{Offset: 2}, "empty"},
		{lines(3), ReadOptions{Offset: -1}, "negative"},
		{lines(3), ReadOptions{Limit: -1}, "negative"},
	}
	for _, tc := range tests {
		_, err := Format([]byte(tc.content), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.has) {
			t.Errorf("Format(%+v) error %v, want one containing %q", tc.opts, err, tc.has)
		}
	}
}

func TestIsBinary(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")
	tests := []struct {
		name string
		data []byte
		want bool
	}{
		{"empty", nil, false},
		{"png header", png, true},
		{"nul", []byte("hello\x00world"), true},
		{"utf-8 text", []byte("héllo wörld — ✓ 日本語\n\tindented\r\n\x1b[31mred\x1b[0m\f"), false},
		{"latin-1 text", []byte("Caf\xe9 cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade\n"), false},
		{"mostly invalid", []byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9abc"), true},
		{"control characters", []byte("\x01\x02\x03\x04\x05abcdef"), true},
		{"utf-8 cut at the sample edge", append([]byte(strings.Repeat("a", sniffLen-1)), "é…"...), false},
		{"nul after the sample", append([]byte(strings.Repeat("a", sniffLen)), 0), false},
	}
	for _, tc := range tests {
		if got := IsBinary(tc.data); got != tc.want {
			t.Errorf("%s: IsBinary = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDescribeBinary(t *testing.T) {
	t.Parallel()
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 12595)...)
	got := DescribeBinary("img/logo.png", png)
	want := "img/logo.png: binary file (image/png, 12.3 KiB): not shown; use bash with xxd/file if you need its bytes"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := DescribeBinary("", []byte{0, 1, 2}); !strings.HasPrefix(got, "binary file (application/octet-stream, 3 bytes)") {
		t.Errorf("got %q", got)
	}
	if got := humanSize(3 << 20); got != "3.0 MiB" {
		t.Errorf("humanSize = %q", got)
	}
}
