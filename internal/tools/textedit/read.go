package textedit

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Defaults for the zero fields of ReadOptions.
const (
	DefaultLimit        = 2000
	DefaultMaxLineChars = 2000
	DefaultMaxChars     = 50000
)

// ReadOptions selects and bounds what Format shows.
type ReadOptions struct {
	Offset       int // 1-based first line to show; 0 or 1 start at the first line
	Limit        int // most lines to show; 0 means DefaultLimit
	MaxLineChars int // longer lines are cut; 0 means DefaultMaxLineChars
	MaxChars     int // cap on the rendered lines, cut at a line boundary; 0 means DefaultMaxChars
}

// ReadResult is a rendered slice of a file.
type ReadResult struct {
	Text       string // numbered lines, "\n"-separated, no final newline
	FirstLine  int    // 1-based number of the first line shown; 0 for an empty file
	LastLine   int    // 1-based number of the last line shown; 0 for an empty file
	TotalLines int    // lines in the whole file
	Truncated  bool   // lines after LastLine exist and were not shown
}

// Format renders content cat -n style: each line as its number right-aligned
// in six columns, a tab, and the line without its line ending. A UTF-8 byte
// order mark is not shown, CRLF shows as a plain line break, and invalid UTF-8
// shows as U+FFFD. Lines longer than MaxLineChars characters are cut with a
// note of how many characters were left out. When lines remain after the last
// one shown (because of Limit or MaxChars), a final line says how many and
// which offset continues. An empty file renders as "(empty file)". An offset
// past the last line is an error that names the file's line count.
func Format(content []byte, o ReadOptions) (*ReadResult, error) {
	if o.Offset < 0 || o.Limit < 0 || o.MaxLineChars < 0 || o.MaxChars < 0 {
		return nil, fmt.Errorf("read: offset, limit and size caps must not be negative (offset=%d, limit=%d)", o.Offset, o.Limit)
	}
	limit := cmpOr(o.Limit, DefaultLimit)
	maxLine := cmpOr(o.MaxLineChars, DefaultMaxLineChars)
	maxChars := cmpOr(o.MaxChars, DefaultMaxChars)
	first := max(o.Offset, 1)

	body := bytes.TrimPrefix(content, []byte(bom))
	total := bytes.Count(body, []byte{'\n'})
	if len(body) > 0 && body[len(body)-1] != '\n' {
		total++
	}
	if total == 0 {
		if first > 1 {
			return nil, fmt.Errorf("read: offset %d is past the end of the file: it is empty", o.Offset)
		}
		return &ReadResult{Text: "(empty file)"}, nil
	}
	if first > total {
		return nil, fmt.Errorf("read: offset %d is past the end of the file: it has %d lines", o.Offset, total)
	}
	rest := body
	for range first - 1 {
		rest = rest[bytes.IndexByte(rest, '\n')+1:]
	}

	var b strings.Builder
	b.Grow(min(len(rest)+len(rest)/8, maxChars*4) + 64)
	used, last, capped := 0, first-1, false
	for n := first; n <= total && n < first+limit; n++ {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		}
		text := lineText(line, maxLine)
		chars := 8 + utf8.RuneCount(text) // number column, tab, newline
		if used+chars > maxChars {
			if n > first {
				capped = true
				break
			}
			text = []byte(cutRunes(string(text), max(maxChars-8-32, 1))) // one line must show
		}
		if n > first {
			b.WriteByte('\n')
		}
		writeNumber(&b, n)
		b.Write(text)
		used += chars
		last = n
	}
	r := &ReadResult{FirstLine: first, LastLine: last, TotalLines: total, Truncated: last < total}
	if r.Truncated {
		more := plural(total-last, "more line")
		if capped {
			fmt.Fprintf(&b, "\n[… output capped at %d characters; %s; continue with offset=%d]", maxChars, more, last+1)
		} else {
			fmt.Fprintf(&b, "\n[… %s; continue with offset=%d]", more, last+1)
		}
	}
	r.Text = b.String()
	return r, nil
}

// lineText returns line as shown: no "\r", valid UTF-8, at most max
// characters plus a note of what was cut. It copies only what it changes.
func lineText(line []byte, max int) []byte {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	valid := utf8.Valid(line)
	if valid && len(line) <= max {
		return line
	}
	text := string(line)
	if !valid {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return []byte(cutRunes(text, max))
}

// cutRunes keeps the first max characters of s and notes how many were cut.
func cutRunes(s string, max int) string {
	i, kept := 0, 0
	for i < len(s) && kept < max {
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
		kept++
	}
	if i == len(s) {
		return s
	}
	return s[:i] + "… [" + plural(utf8.RuneCountInString(s[i:]), "more character") + "]"
}

func writeNumber(b *strings.Builder, n int) {
	var buf [24]byte
	num := strconv.AppendInt(buf[:0], int64(n), 10)
	for range 6 - len(num) {
		b.WriteByte(' ')
	}
	b.Write(num)
	b.WriteByte('\t')
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// sniffLen is how much of a file IsBinary and DescribeBinary look at.
const sniffLen = 8 << 10

// IsBinary reports whether content looks binary rather than text: a NUL byte
// in its first 8 KiB, or more than 30% of those bytes being invalid UTF-8 or
// control characters other than tab, LF, CR, FF and ESC. Latin-1 and other
// 8-bit text with a few non-UTF-8 bytes counts as text.
func IsBinary(content []byte) bool {
	sample := content[:min(len(content), sniffLen)]
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	bad := 0
	for i := 0; i < len(sample); {
		r, n := utf8.DecodeRune(sample[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			// A rune cut by the sample's end is not evidence.
			if len(content) > len(sample) && len(sample)-i < utf8.UTFMax && !utf8.FullRune(sample[i:]) {
				i = len(sample)
				continue
			}
			bad++
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' && r != 0x1b, r == 0x7f:
			bad++
		}
		i += n
	}
	return bad*10 > len(sample)*3
}

// DescribeBinary returns the note a model gets instead of a binary file's
// bytes: its path, a guessed media type and its size.
func DescribeBinary(path string, content []byte) string {
	kind, _, _ := strings.Cut(http.DetectContentType(content[:min(len(content), 512)]), ";")
	msg := fmt.Sprintf("binary file (%s, %s): not shown; use bash with xxd/file if you need its bytes", kind, humanSize(len(content)))
	if path != "" {
		msg = path + ": " + msg
	}
	return msg
}

func humanSize(n int) string {
	const unit = 1024
	if n < unit {
		return plural(n, "byte")
	}
	f, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if f < unit {
			break
		}
		f, suffix = f/unit, s
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + suffix
}
