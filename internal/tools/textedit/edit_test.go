package textedit

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		edits   []Edit
		want    string
		wantN   int
		kind    ErrorKind // 0: success
		errHas  []string  // substrings of the error message
	}{
		{
			name:    "unique",
			content: "alpha\nbeta\ngamma\n",
			edits:   []Edit{{OldString: "beta", NewString: "BETA"}},
			want:    "alpha\nBETA\ngamma\n", wantN: 1,
		},
		{
			name:    "multi-line",
			content: "a\nb\nc\nd\n",
			edits:   []Edit{{OldString: "b\nc\n", NewString: "x\n"}},
			want:    "a\nx\nd\n", wantN: 1,
		},
		{
			name:    "multiple without replace_all",
			content: "x = 1\nx = 1\nx = 1\n",
			edits:   []Edit{{OldString: "x = 1", NewString: "x = 2"}},
			kind:    Ambiguous,
			errHas:  []string{"found 3 times", "replace_all"},
		},
		{
			name:    "replace_all",
			content: "x = 1\ny\nx = 1\n",
			edits:   []Edit{{OldString: "x = 1", NewString: "x = 2", ReplaceAll: true}},
			want:    "x = 2\ny\nx = 2\n", wantN: 2,
		},
		{
			name:    "replace_all with one occurrence",
			content: "x = 1\n",
			edits:   []Edit{{OldString: "x", NewString: "y", ReplaceAll: true}},
			want:    "y = 1\n", wantN: 1,
		},
		{
			name:    "missing",
			content: "func main() {\n\tfmt.Println(\"hello\")\n}\n",
			edits:   []Edit{{OldString: "fmt.Println(\"goodbye\")", NewString: "x"}},
			kind:    NotFound,
			errHas:  []string{"not found", "line 2", "fmt.Println(\"hello\")", "similar"},
		},
		{
			name:    "missing, nothing close",
			content: "one\ntwo\n",
			edits:   []Edit{{OldString: "zzzzzzzzzzzz qqqqqqq", NewString: "x"}},
			kind:    NotFound,
			errHas:  []string{"not found", "read the file again"},
		},
		{
			name:    "empty old",
			content: "a\n",
			edits:   []Edit{{OldString: "", NewString: "x"}},
			kind:    EmptyOld,
			errHas:  []string{"old_string is empty"},
		},
		{
			name:    "identical",
			content: "a\n",
			edits:   []Edit{{OldString: "a", NewString: "a"}},
			kind:    Identical,
			errHas:  []string{"identical"},
		},
		{
			name:   "no edits",
			kind:   NoEdits,
			errHas: []string{"no edits"},
		},
		{
			name:    "sequential edits see earlier ones",
			content: "a\nb\n",
			edits:   []Edit{{OldString: "a", NewString: "c"}, {OldString: "c\nb", NewString: "d"}},
			want:    "d\n", wantN: 2,
		},
		{
			name:    "second edit fails: named, nothing applied",
			content: "a\nb\n",
			edits:   []Edit{{OldString: "a", NewString: "c"}, {OldString: "zzz", NewString: "d"}},
			kind:    NotFound,
			errHas:  []string{"edit 2:", "none of the 2 edits was applied"},
		},
		{
			name:    "second edit made ambiguous by the first",
			content: "a\nb\n",
			edits:   []Edit{{OldString: "a", NewString: "b"}, {OldString: "b", NewString: "c"}},
			kind:    Ambiguous,
			errHas:  []string{"edit 2:", "found 2 times"},
		},
		{
			name:    "no trailing newline kept",
			content: "a\nb",
			edits:   []Edit{{OldString: "b", NewString: "c\nd"}},
			want:    "a\nc\nd", wantN: 1,
		},
		{
			name:    "curly quotes in file, straight in old_string",
			content: "msg := \u201cdon\u2019t panic\u201d \u2014 ok\n",
			edits:   []Edit{{OldString: `"don't panic" - ok`, NewString: `"relax"`}},
			want:    "msg := \"relax\"\n", wantN: 1,
		},
		{
			name:    "straight quotes in file, curly in old_string",
			content: "say('hi')\n",
			edits:   []Edit{{OldString: "say(\u2018hi\u2019)", NewString: "say('bye')"}},
			want:    "say('bye')\n", wantN: 1,
		},
		{
			name:    "folded match ambiguous",
			content: "\u2018a\u2019 \u2018a\u2019\n",
			edits:   []Edit{{OldString: "'a'", NewString: "b"}},
			kind:    Ambiguous,
			errHas:  []string{"found 2 times", "quotes"},
		},
		{
			name:    "trailing whitespace only: not applied, hinted",
			content: "if x {   \n\treturn\n}\n",
			edits:   []Edit{{OldString: "if x {\n\treturn\n}", NewString: "y"}},
			kind:    NotFound,
			errHas:  []string{"lines 1-3", "whitespace", "nothing was changed", "if x {   \n\treturn\n}"},
		},
		{
			name:    "indentation differs: hinted with exact text",
			content: "func f() {\n\tif ok {\n\t\tdo()\n\t}\n}\n",
			edits:   []Edit{{OldString: "    if ok {\n        do()\n    }", NewString: "x"}},
			kind:    NotFound,
			errHas:  []string{"lines 2-4", "\tif ok {\n\t\tdo()\n\t}", "including indentation"},
		},
		{
			name:    "whitespace and quotes differ: hint says both",
			content: "s = \u201cx\u201d  \n",
			edits:   []Edit{{OldString: "s = \"x\"\n", NewString: "y"}},
			kind:    NotFound,
			errHas:  []string{"line 1", "quotes"},
		},
		{
			name:    "mixed file: span with the minority ending",
			content: "a\nb\nc\r\nd\r\ne\n",
			edits:   []Edit{{OldString: "c\nd", NewString: "x\ny"}},
			want:    "a\nb\nx\r\ny\r\ne\n", wantN: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, n, err := Apply([]byte(tc.content), tc.edits)
			if tc.kind != 0 {
				if err == nil {
					t.Fatalf("Apply succeeded with %q; want %v error", got, tc.kind)
				}
				if k := KindOf(err); k != tc.kind {
					t.Errorf("kind = %v, want %v (%v)", k, tc.kind, err)
				}
				if got != nil || n != 0 {
					t.Errorf("failed Apply returned %q, %d", got, n)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error lacks %q:\n%v", s, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want || n != tc.wantN {
				t.Errorf("got %q, %d; want %q, %d", got, n, tc.want, tc.wantN)
			}
		})
	}
}

func TestApplyErrorIndex(t *testing.T) {
	t.Parallel()
	_, _, err := Apply([]byte("a\n"), []Edit{{OldString: "zzz", NewString: "b"}})
	var e *Error
	if !errors.As(err, &e) || e.Edit != 0 || strings.HasPrefix(err.Error(), "edit") {
		t.Errorf("single edit: error %#v should carry no index: %v", e, err)
	}
	_, _, err = Apply([]byte("a\n"), []Edit{{OldString: "a", NewString: "b"}, {OldString: "b", NewString: "b"}})
	if !errors.As(err, &e) || e.Edit != 2 || e.Kind != Identical {
		t.Errorf("got %#v", e)
	}
}

func TestApplyKeepsInputUntouched(t *testing.T) {
	t.Parallel()
	in := []byte("a\nb\n")
	orig := bytes.Clone(in)
	if _, _, err := Apply(in, []Edit{{OldString: "a", NewString: "x"}, {OldString: "nope", NewString: "y"}}); err == nil {
		t.Fatal("want error")
	}
	if _, _, err := Apply(in, []Edit{{OldString: "a", NewString: "xyz"}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Errorf("content modified: %q", in)
	}
}

func TestApplyCRLF(t *testing.T) {
	t.Parallel()
	content := "one\r\ntwo\r\nthree\r\n"
	tests := []struct {
		old, new, want string
	}{
		{"two\n", "2\n2b\n", "one\r\n2\r\n2b\r\nthree\r\n"},
		{"one\ntwo", "x", "x\r\nthree\r\n"},
		{"one\r\ntwo", "x\r\ny", "x\r\ny\r\nthree\r\n"}, // model already wrote CRLF
		{"three\r\n", "3\n4\n", "one\r\ntwo\r\n3\r\n4\r\n"},
	}
	for _, tc := range tests {
		got, _, err := Apply([]byte(content), []Edit{{OldString: tc.old, NewString: tc.new}})
		if err != nil {
			t.Errorf("%q: %v", tc.old, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%q → %q: got %q, want %q", tc.old, tc.new, got, tc.want)
		}
		if lone := strings.Count(string(got), "\n") - strings.Count(string(got), "\r\n"); lone != 0 {
			t.Errorf("%q: %d lone LFs in %q", tc.old, lone, got)
		}
	}
}

func TestApplyLFFileGetsNoCR(t *testing.T) {
	t.Parallel()
	got, _, err := Apply([]byte("a\nb\n"), []Edit{{OldString: "a\r\n", NewString: "x\r\ny\r\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "x\ny\nb\n" {
		t.Errorf("got %q", got)
	}
}

func TestApplyBOM(t *testing.T) {
	t.Parallel()
	got, _, err := Apply([]byte("\uFEFFfirst\nsecond"), []Edit{{OldString: "first", NewString: "1st"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "\uFEFF1st\nsecond" {
		t.Errorf("got %q", got)
	}
	// With CRLF too, and an edit at the very start.
	got, _, err = Apply([]byte("\uFEFFa\r\nb\r\n"), []Edit{{OldString: "a\nb", NewString: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "\uFEFFc\r\n" {
		t.Errorf("got %q", got)
	}
}

func TestFoldPunct(t *testing.T) {
	t.Parallel()
	in := "\u201cit\u2019s\u201d \u2014 a\u00a0b \u2212 c"
	if got, want := FoldPunct(in), `"it's" - a b - c`; got != want {
		t.Errorf("FoldPunct = %q, want %q", got, want)
	}
	if s := "plain ascii"; FoldPunct(s) != s {
		t.Error("ascii changed")
	}
}

func TestMostSimilar(t *testing.T) {
	t.Parallel()
	lines := []string{"package main", "", "func add(a, b int) int {", "\treturn a + b", "}", "func sub(a, b int) int {", "\treturn a - b", "}"}
	start, score := MostSimilar(lines, []string{"func sub(a, b int) int {", "    return a - b"})
	if start != 5 || score < 0.8 {
		t.Errorf("got %d, %.2f; want 5, > 0.8", start, score)
	}
	if start, _ := MostSimilar(nil, []string{"x"}); start != -1 {
		t.Errorf("empty lines: %d", start)
	}
	if start, _ := MostSimilar(lines[:1], lines); start != 0 {
		t.Errorf("want longer than lines: %d", start)
	}
}
