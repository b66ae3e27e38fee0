package patch

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		want []FileOp
	}{
		{
			name: "add",
			text: "*** Begin Patch\n*** Add File: a/new.txt\n+one\n+two\n*** End Patch\n",
			want: []FileOp{{Op: Add, Path: "a/new.txt", Content: "one\ntwo\n", Line: 2}},
		},
		{
			name: "add empty file",
			text: "*** Begin Patch\n*** Add File: empty\n*** End Patch",
			want: []FileOp{{Op: Add, Path: "empty", Line: 2}},
		},
		{
			name: "add with a blank line that lost its plus",
			text: "*** Begin Patch\n*** Add File: f\n+a\n\n+b\n\n*** End Patch",
			want: []FileOp{{Op: Add, Path: "f", Content: "a\n\nb\n", Line: 2}},
		},
		{
			name: "delete",
			text: "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch",
			want: []FileOp{{Op: Delete, Path: "old.txt", Line: 2}},
		},
		{
			name: "update without @@",
			text: "*** Begin Patch\n*** Update File: f.py\n a\n-b\n+c\n*** End Patch",
			want: []FileOp{{Op: Update, Path: "f.py", Line: 2, Hunks: []Hunk{{Old: []string{"a", "b"}, New: []string{"a", "c"}, Line: 3}}}},
		},
		{
			name: "update with move, headers and EOF",
			text: strings.Join([]string{
				"*** Begin Patch",
				"*** Update File: f.py",
				"*** Move to: g.py",
				"@@ class A:",
				"@@     def f(self):",
				"-        pass",
				"+        return 1",
				"@@",
				" x",
				"+y",
				"*** End of File",
				"*** End Patch",
			}, "\n"),
			want: []FileOp{{Op: Update, Path: "f.py", MoveTo: "g.py", Line: 2, Hunks: []Hunk{
				{Context: []string{"class A:", "    def f(self):"}, Old: []string{"        pass"}, New: []string{"        return 1"}, Line: 4},
				{Old: []string{"x"}, New: []string{"x", "y"}, EOF: true, Line: 8},
			}}},
		},
		{
			name: "missing space on an empty context line",
			text: "*** Begin Patch\n*** Update File: f\n a\n\n-b\n*** End Patch",
			want: []FileOp{{Op: Update, Path: "f", Line: 2, Hunks: []Hunk{{Old: []string{"a", "", "b"}, New: []string{"a", ""}, Line: 3}}}},
		},
		{
			name: "heredoc wrapper, CRLF, whitespace around markers",
			text: "\napply_patch <<'EOF'\r\n  *** Begin Patch  \r\n\r\n*** Delete File:   x  \r\n\r\n *** End Patch\r\nEOF\r\n\n",
			want: []FileOp{{Op: Delete, Path: "x", Line: 5}},
		},
		{
			name: "bare heredoc",
			text: "<<EOF\n*** Begin Patch\n*** Delete File: x\n*** End Patch\nEOF",
			want: []FileOp{{Op: Delete, Path: "x", Line: 3}},
		},
		{
			name: "unified diff headers",
			text: "*** Begin Patch\n*** Update File: f\n@@ -1,2 +1,2 @@\n-a\n+b\n@@ -9 +9 @@ func g() {\n-c\n+d\n*** End Patch",
			want: []FileOp{{Op: Update, Path: "f", Line: 2, Hunks: []Hunk{
				{Old: []string{"a"}, New: []string{"b"}, Line: 3},
				{Context: []string{"func g() {"}, Old: []string{"c"}, New: []string{"d"}, Line: 6},
			}}},
		},
		{
			name: "marker-like text in a context line",
			text: "*** Begin Patch\n*** Update File: f\n *** not a marker\n @@ nor a header\n-x\n*** End Patch",
			want: []FileOp{{Op: Update, Path: "f", Line: 2, Hunks: []Hunk{{Old: []string{"*** not a marker", "@@ nor a header", "x"}, New: []string{"*** not a marker", "@@ nor a header"}, Line: 3}}}},
		},
		{
			name: "several sections",
			text: "*** Begin Patch\n*** Add File: a\n+1\n\n*** Update File: b\n@@\n-2\n+3\n\n*** Delete File: c\n*** End Patch",
			want: []FileOp{
				{Op: Add, Path: "a", Content: "1\n", Line: 2},
				{Op: Update, Path: "b", Line: 5, Hunks: []Hunk{{Old: []string{"2", ""}, New: []string{"3", ""}, Line: 6}}},
				{Op: Delete, Path: "c", Line: 10},
			},
		},
		{
			name: "pure rename",
			text: "*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch",
			want: []FileOp{{Op: Update, Path: "a", MoveTo: "b", Line: 2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range p.Ops {
				for i := range op.Hunks {
					if len(op.Hunks[i].echo) != len(op.Hunks[i].New) {
						t.Errorf("hunk %d: echo %v for %d new lines", i, op.Hunks[i].echo, len(op.Hunks[i].New))
					}
					op.Hunks[i].echo = nil
				}
			}
			if !reflect.DeepEqual(p.Ops, tc.want) {
				t.Errorf("got\n%#v\nwant\n%#v", p.Ops, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		line int
		has  string
	}{
		{"empty", "", 1, "empty"},
		{"no begin", "*** Update File: f\n*** End Patch", 1, "*** Begin Patch"},
		{"no end", "*** Begin Patch\n*** Delete File: f\n", 2, "cut off"},
		{"text after end", "*** Begin Patch\n*** Delete File: f\n*** End Patch\ntrailing words", 4, "after"},
		{"no sections", "*** Begin Patch\n*** End Patch", 2, "changes no files"},
		{"bad section", "*** Begin Patch\n*** Modify File: f\n*** End Patch", 2, "*** Update File: PATH"},
		{"stray line", "*** Begin Patch\n*** Delete File: f\nhello\n*** End Patch", 3, "got \"hello\""},
		{"empty path", "*** Begin Patch\n*** Add File:   \n*** End Patch", 2, "needs a path"},
		{"empty move", "*** Begin Patch\n*** Update File: a\n*** Move to:\n-x\n*** End Patch", 3, "needs a path"},
		{"update without hunks", "*** Begin Patch\n*** Update File: a\n*** End Patch", 2, "no hunks"},
		{"header without lines", "*** Begin Patch\n*** Update File: a\n@@ x\n*** End Patch", 3, "no lines"},
		{"bad hunk line", "*** Begin Patch\n*** Update File: a\n@@\n x\n\tbad\n*** End Patch", 5, "starting with ' '"},
		{"EOF without lines", "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch", 3, "must follow"},
		{"hunk after EOF without @@", "*** Begin Patch\n*** Update File: a\n x\n*** End of File\n y\n*** End Patch", 5, "'@@'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse(tc.text)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("got %#v, %v; want a ParseError", p, err)
			}
			if pe.Line != tc.line || !strings.Contains(err.Error(), tc.has) {
				t.Errorf("got %q (line %d); want line %d and %q", err, pe.Line, tc.line, tc.has)
			}
		})
	}
}

func TestOp(t *testing.T) {
	t.Parallel()
	for _, o := range []Op{Add, Delete, Update} {
		if got, err := ParseOp(o.String()); err != nil || got != o {
			t.Errorf("ParseOp(%q) = %v, %v", o.String(), got, err)
		}
	}
	if _, err := ParseOp("move"); err == nil {
		t.Error("ParseOp(move) succeeded")
	}
}
