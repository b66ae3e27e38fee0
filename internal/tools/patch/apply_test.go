package patch

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"strings"
	"testing"
)

func patchOf(lines ...string) string {
	return "*** Begin Patch\n" + strings.Join(lines, "\n") + "\n*** End Patch\n"
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		patch   string
		want    map[string]string // files after; nil when Apply must fail
		summary string
		errHas  []string
	}{
		{
			name:    "add",
			files:   map[string]string{},
			patch:   patchOf("*** Add File: dir/new.txt", "+hello", "+world"),
			want:    map[string]string{"dir/new.txt": "hello\nworld\n"},
			summary: "A dir/new.txt",
		},
		{
			name:    "delete",
			files:   map[string]string{"old.txt": "x\n", "keep": "k"},
			patch:   patchOf("*** Delete File: old.txt"),
			want:    map[string]string{"keep": "k"},
			summary: "D old.txt",
		},
		{
			name:    "update",
			files:   map[string]string{"f.py": "def f():\n    return 1\n\nprint(f())\n"},
			patch:   patchOf("*** Update File: f.py", "@@", " def f():", "-    return 1", "+    return 2"),
			want:    map[string]string{"f.py": "def f():\n    return 2\n\nprint(f())\n"},
			summary: "M f.py",
		},
		{
			name:    "move and update",
			files:   map[string]string{"a.txt": "1\n2\n3\n"},
			patch:   patchOf("*** Update File: a.txt", "*** Move to: sub/b.txt", " 1", "-2", "+two"),
			want:    map[string]string{"sub/b.txt": "1\ntwo\n3\n"},
			summary: "R a.txt -> sub/b.txt",
		},
		{
			name:    "pure rename",
			files:   map[string]string{"a": "x"},
			patch:   patchOf("*** Update File: a", "*** Move to: b"),
			want:    map[string]string{"b": "x"},
			summary: "R a -> b",
		},
		{
			name:    "move to itself is an update",
			files:   map[string]string{"a": "x\n"},
			patch:   patchOf("*** Update File: a", "*** Move to: ./a", "-x", "+y"),
			want:    map[string]string{"a": "y\n"},
			summary: "M a",
		},
		{
			name:  "multiple hunks in order",
			files: map[string]string{"f": "a\nb\nc\nd\ne\nf\ng\n"},
			patch: patchOf("*** Update File: f", "@@", " a", "-b", "+B", "@@", " e", "-f", "+F"),
			want:  map[string]string{"f": "a\nB\nc\nd\ne\nF\ng\n"},
		},
		{
			name:  "@@ headers pick the right occurrence",
			files: map[string]string{"f.py": "class A:\n    def f(self):\n        pass\nclass B:\n    def f(self):\n        pass\n"},
			patch: patchOf("*** Update File: f.py", "@@ class B:", "@@     def f(self):", "-        pass", "+        return 1"),
			want:  map[string]string{"f.py": "class A:\n    def f(self):\n        pass\nclass B:\n    def f(self):\n        return 1\n"},
		},
		{
			name:  "@@ header repeated as the first context line",
			files: map[string]string{"f": "x\nfunc g() {\n\treturn\n}\n"},
			patch: patchOf("*** Update File: f", "@@ func g() {", " func g() {", "-\treturn", "+\treturn 1"),
			want:  map[string]string{"f": "x\nfunc g() {\n\treturn 1\n}\n"},
		},
		{
			name:  "pure addition after an @@ header",
			files: map[string]string{"f": "import a\n\nbody\n"},
			patch: patchOf("*** Update File: f", "@@ import a", "+import b"),
			want:  map[string]string{"f": "import a\nimport b\n\nbody\n"},
		},
		{
			name:  "pure addition at end of file",
			files: map[string]string{"f": "a\nb\n"},
			patch: patchOf("*** Update File: f", "@@", "+c", "*** End of File"),
			want:  map[string]string{"f": "a\nb\nc\n"},
		},
		{
			name:  "EOF hunk prefers the end",
			files: map[string]string{"f": "x\ny\nmid\nx\ny\n"},
			patch: patchOf("*** Update File: f", " x", "-y", "+z", "*** End of File"),
			want:  map[string]string{"f": "x\ny\nmid\nx\nz\n"},
		},
		{
			name:  "EOF hunk not at the end falls back to the cursor",
			files: map[string]string{"f": "x\ny\nmid\n"},
			patch: patchOf("*** Update File: f", " x", "-y", "+z", "*** End of File"),
			want:  map[string]string{"f": "x\nz\nmid\n"},
		},
		{
			name:  "match ignoring trailing whitespace; context lines keep the file's text",
			files: map[string]string{"f": "a  \nb\t\nc\n"},
			patch: patchOf("*** Update File: f", " a", "-b", "+B"),
			want:  map[string]string{"f": "a  \nB\nc\n"},
		},
		{
			name:  "match ignoring leading whitespace",
			files: map[string]string{"f": "\tif x {\n\t\ty()\n\t}\n"},
			patch: patchOf("*** Update File: f", "    if x {", "-        y()", "+\t\tz()", "     }"),
			want:  map[string]string{"f": "\tif x {\n\t\tz()\n\t}\n"},
		},
		{
			name:  "match with punctuation folded; added lines verbatim",
			files: map[string]string{"f": "say(\u201chi\u201d)\u00a0\u2014 ok\n\u2018next\u2019\n"},
			patch: patchOf("*** Update File: f", `-say("hi") - ok`, `+say("bye") - ok`, " 'next'"),
			want:  map[string]string{"f": "say(\"bye\") - ok\n\u2018next\u2019\n"},
		},
		{
			name:  "exact match wins over an earlier loose one",
			files: map[string]string{"f": "x \ny\nx\ny\n"},
			patch: patchOf("*** Update File: f", " x", "-y", "+Y"),
			want:  map[string]string{"f": "x \ny\nx\nY\n"},
		},
		{
			name:  "CRLF file stays CRLF",
			files: map[string]string{"f": "a\r\nb\r\nc\r\n"},
			patch: patchOf("*** Update File: f", " a", "-b", "+B1", "+B2"),
			want:  map[string]string{"f": "a\r\nB1\r\nB2\r\nc\r\n"},
		},
		{
			name:  "CRLF file without a final newline, appended to",
			files: map[string]string{"f": "a\r\nb"},
			patch: patchOf("*** Update File: f", " b", "+c", "*** End of File"),
			want:  map[string]string{"f": "a\r\nb\r\nc"},
		},
		{
			name:  "no final newline kept",
			files: map[string]string{"f": "a\nb"},
			patch: patchOf("*** Update File: f", "-b", "+c"),
			want:  map[string]string{"f": "a\nc"},
		},
		{
			name:  "BOM kept",
			files: map[string]string{"f": "\uFEFFfirst\nsecond\n"},
			patch: patchOf("*** Update File: f", "-first", "+1st"),
			want:  map[string]string{"f": "\uFEFF1st\nsecond\n"},
		},
		{
			name:  "mixed endings: untouched lines keep theirs",
			files: map[string]string{"f": "a\r\nb\nc\r\nd\r\n"},
			patch: patchOf("*** Update File: f", "-d", "+D"),
			want:  map[string]string{"f": "a\r\nb\nc\r\nD\r\n"},
		},
		{
			name:  "trailing blank line in a hunk is forgiven",
			files: map[string]string{"f": "a\nb\n"},
			patch: patchOf("*** Update File: f", "-b", "+c", ""),
			want:  map[string]string{"f": "a\nc\n"},
		},
		{
			name:  "delete everything",
			files: map[string]string{"f": "a\nb\n"},
			patch: patchOf("*** Update File: f", "-a", "-b"),
			want:  map[string]string{"f": ""},
		},
		{
			name:  "update an empty file",
			files: map[string]string{"f": ""},
			patch: patchOf("*** Update File: f", "@@", "+x"),
			want:  map[string]string{"f": "x\n"},
		},
		{
			name:    "several files",
			files:   map[string]string{"m": "1\n", "d": "x"},
			patch:   patchOf("*** Add File: a", "+new", "*** Update File: m", "-1", "+2", "*** Delete File: d"),
			want:    map[string]string{"a": "new\n", "m": "2\n"},
			summary: "A a\nM m\nD d",
		},
		{
			name:   "add over an existing file",
			files:  map[string]string{"a": "x"},
			patch:  patchOf("*** Add File: a", "+y"),
			errHas: []string{"a: cannot add", "already exists"},
		},
		{
			name:   "delete a missing file",
			files:  map[string]string{},
			patch:  patchOf("*** Delete File: gone"),
			errHas: []string{"gone: cannot delete", "does not exist"},
		},
		{
			name:   "update a missing file",
			files:  map[string]string{},
			patch:  patchOf("*** Update File: gone", "-x"),
			errHas: []string{"gone: cannot update", "Add File"},
		},
		{
			name:   "move onto an existing file",
			files:  map[string]string{"a": "x\n", "b": "y\n"},
			patch:  patchOf("*** Update File: a", "*** Move to: b", "-x", "+z"),
			errHas: []string{"cannot move", "already exists"},
		},
		{
			name:   "same path twice",
			files:  map[string]string{"a": "x\n"},
			patch:  patchOf("*** Update File: a", "-x", "+y", "*** Update File: ./a", "-y", "+z"),
			errHas: []string{"more than one section", "lines 2 and 5"},
		},
		{
			name:   "hunk not found: names file, hunk and shows context",
			files:  map[string]string{"f.go": "package f\n\nfunc A() int {\n\treturn 1\n}\n"},
			patch:  patchOf("*** Update File: f.go", "@@", " func A() int {", "-\treturn 2", "+\treturn 3"),
			errHas: []string{"f.go: hunk 1 (patch line 3)", "could not find these lines", "    func A() int {\n    \treturn 2", "most similar lines in the file are 3-4"},
		},
		{
			name:   "@@ header not found",
			files:  map[string]string{"f": "a\nb\n"},
			patch:  patchOf("*** Update File: f", "@@ a", "-b", "+c", "@@ zzz", "-a", "+x"),
			errHas: []string{"f: hunk 2 (patch line 6)", "could not find the '@@' line \"zzz\" after line 2"},
		},
		{
			name:   "hunks must be in file order",
			files:  map[string]string{"f": "a\nb\nc\n"},
			patch:  patchOf("*** Update File: f", "@@", "-c", "+C", "@@", "-a", "+A"),
			errHas: []string{"hunk 2", "after line 3"},
		},
		{
			name:   "second file fails: nothing written",
			files:  map[string]string{"one": "1\n", "two": "2\n"},
			patch:  patchOf("*** Update File: one", "-1", "+uno", "*** Update File: two", "-nope", "+dos"),
			errHas: []string{"two: hunk 1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse(tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			fsys := newMemFS(tc.files)
			before := fsys.snapshot()
			changes, err := Apply(context.Background(), fsys, p)
			after := fsys.snapshot()
			if tc.want == nil {
				if err == nil {
					t.Fatalf("Apply succeeded; files:\n%s", dump(after))
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error lacks %q:\n%v", s, err)
					}
				}
				if fsys.writes+fsys.removes != 0 || !maps.Equal(before, after) {
					t.Errorf("a failed plan touched files:\n%s", dump(after))
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\nfiles:\n%s", err, dump(before))
			}
			if !maps.Equal(after, tc.want) {
				t.Errorf("files:\n%s\nwant:\n%s", dump(after), dump(tc.want))
			}
			if tc.summary != "" && Summary(changes) != tc.summary {
				t.Errorf("summary %q, want %q", Summary(changes), tc.summary)
			}
		})
	}
}

func TestPlanWritesNothing(t *testing.T) {
	t.Parallel()
	fsys := newMemFS(map[string]string{"a": "1\n", "d": "x"})
	p, err := Parse(patchOf("*** Add File: n", "+new", "*** Update File: a", "*** Move to: b", "-1", "+2", "*** Delete File: d"))
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Plan(context.Background(), fsys, p)
	if err != nil {
		t.Fatal(err)
	}
	if fsys.writes+fsys.removes != 0 {
		t.Errorf("Plan wrote %d and removed %d", fsys.writes, fsys.removes)
	}
	want := []Change{
		{Op: Add, Path: "n", New: []byte("new\n")},
		{Op: Update, Path: "a", MoveTo: "b", Old: []byte("1\n"), New: []byte("2\n")},
		{Op: Delete, Path: "d", Old: []byte("x")},
	}
	if len(changes) != len(want) {
		t.Fatalf("got %d changes", len(changes))
	}
	for i := range want {
		g, w := changes[i], want[i]
		if g.Op != w.Op || g.Path != w.Path || g.MoveTo != w.MoveTo || string(g.Old) != string(w.Old) || string(g.New) != string(w.New) ||
			(g.Old == nil) != (w.Old == nil) || (g.New == nil) != (w.New == nil) {
			t.Errorf("change %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestPlanErrorsWrapFS(t *testing.T) {
	t.Parallel()
	p, _ := Parse(patchOf("*** Delete File: gone"))
	_, err := Plan(context.Background(), newMemFS(nil), p)
	var pe *Error
	if !errors.As(err, &pe) || pe.Path != "gone" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %#v", err)
	}
	p, _ = Parse(patchOf("*** Add File: a"))
	if _, err = Plan(context.Background(), newMemFS(map[string]string{"a": ""}), p); !errors.Is(err, fs.ErrExist) {
		t.Errorf("got %v, want fs.ErrExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err = Plan(ctx, newMemFS(map[string]string{"a": ""}), p); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v", err)
	}
}

// TestApplyRollback fails each write and removal of a patch in turn and
// checks that every file is back byte for byte.
func TestApplyRollback(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"upd.txt":  "a\r\nb\r\n",
		"del.txt":  "\uFEFFgone soon",
		"mv.txt":   "move me\n",
		"keep.txt": "untouched",
	}
	text := patchOf(
		"*** Add File: new/added.txt", "+fresh",
		"*** Update File: upd.txt", "-b", "+B",
		"*** Delete File: del.txt",
		"*** Update File: mv.txt", "*** Move to: moved/mv.txt", "-move me", "+moved",
		"*** Add File: last.txt", "+end",
	)
	p, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	const writes, removes = 4, 2 // added, upd, moved, last; del, mv
	for n := 1; n <= writes+removes; n++ {
		fsys := newMemFS(files)
		if n <= writes {
			fsys.failWrite = n
		} else {
			fsys.failRemove = n - writes
		}
		_, err := Apply(context.Background(), fsys, p)
		if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "put back") {
			t.Errorf("failure %d: got %v", n, err)
		}
		if got := fsys.snapshot(); !maps.Equal(got, files) {
			t.Errorf("failure %d: files not restored:\n%s", n, dump(got))
		}
	}
	// And with no failure every change lands.
	fsys := newMemFS(files)
	changes, err := Apply(context.Background(), fsys, p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"new/added.txt": "fresh\n", "upd.txt": "a\r\nB\r\n", "moved/mv.txt": "moved\n", "keep.txt": "untouched", "last.txt": "end\n"}
	if got := fsys.snapshot(); !maps.Equal(got, want) {
		t.Errorf("files:\n%s", dump(got))
	}
	if s := Summary(changes); s != "A new/added.txt\nM upd.txt\nD del.txt\nR mv.txt -> moved/mv.txt\nA last.txt" {
		t.Errorf("summary %q", s)
	}
}

// cancelFS cancels a context on its Nth write, as a caller giving up mid-patch would.
type cancelFS struct {
	*memFS
	cancel func()
	at     int
}

func (c *cancelFS) WriteFile(ctx context.Context, name string, data []byte) error {
	if c.writes+1 == c.at {
		c.cancel()
	}
	return c.memFS.WriteFile(ctx, name, data)
}

func TestApplyCancelledRollsBack(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a": "1\n", "b": "2\n"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fsys := &cancelFS{memFS: newMemFS(files), cancel: cancel, at: 2}
	p, _ := Parse(patchOf("*** Update File: a", "-1", "+one", "*** Update File: b", "-2", "+two"))
	_, err := Apply(ctx, fsys, p)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
	if got := fsys.snapshot(); !maps.Equal(got, files) {
		t.Errorf("files not restored:\n%s", dump(got))
	}
}

func TestApplyRollbackFailureReported(t *testing.T) {
	t.Parallel()
	files := map[string]string{"a": "1\n", "b": "2\n"}
	fsys := newMemFS(files)
	fsys.failWrite = 2 // b's write fails; then...
	p, _ := Parse(patchOf("*** Update File: a", "-1", "+one", "*** Update File: b", "-2", "+two"))
	fsys.failRemove = 0
	// ...make the rollback of b (write 3) succeed but a's (write 4) fail
	// by failing writes 2 and 4: memFS fails one write, so wrap it.
	ffs := &failSet{memFS: fsys, fail: map[int]bool{2: true, 4: true}}
	_, err := Apply(context.Background(), ffs, p)
	if err == nil || !strings.Contains(err.Error(), "partly applied") {
		t.Errorf("got %v", err)
	}
}

// failSet fails the writes whose 1-based numbers are in fail.
type failSet struct {
	*memFS
	fail map[int]bool
	n    int
}

func (f *failSet) WriteFile(ctx context.Context, name string, data []byte) error {
	f.n++
	if f.fail[f.n] {
		return errInjected
	}
	return f.memFS.WriteFile(ctx, name, data)
}

func TestSummary(t *testing.T) {
	t.Parallel()
	got := Summary([]Change{{Op: Add, Path: "a"}, {Op: Update, Path: "m"}, {Op: Delete, Path: "d"}, {Op: Update, Path: "o", MoveTo: "n"}})
	if want := "A a\nM m\nD d\nR o -> n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if Summary(nil) != "" {
		t.Error("empty summary")
	}
}

func TestContextLinesKeepFileText(t *testing.T) {
	t.Parallel()
	// The hunk matches only with punctuation folded. The context line keeps
	// the file's curly quotes; the '-'/'+' pair with the same text is a
	// requested change and gets the patch's straight quotes.
	files := map[string]string{"f": "\u201ckeep\u201d\n\u201cfix\u201d\n"}
	p, err := Parse(patchOf("*** Update File: f", ` "keep"`, `-"fix"`, `+"fix"`))
	if err != nil {
		t.Fatal(err)
	}
	fsys := newMemFS(files)
	if _, err := Apply(context.Background(), fsys, p); err != nil {
		t.Fatal(err)
	}
	if got, want := fsys.snapshot()["f"], "\u201ckeep\u201d\n\"fix\"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCommonLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		old, new []string
		want     map[int]int
	}{
		{[]string{"a", "b", "c"}, []string{"a", "x", "c"}, map[int]int{0: 0, 2: 2}},
		{[]string{"a", "b", "c", "d"}, []string{"b", "d"}, map[int]int{1: 0, 3: 1}},
		{[]string{"x"}, []string{"y"}, map[int]int{}},
		{nil, []string{"y"}, map[int]int{}},
		{[]string{"a", "a"}, []string{"a"}, map[int]int{0: 0}},
	}
	for _, tc := range tests {
		if got := commonLines(tc.old, tc.new); !maps.Equal(got, tc.want) {
			t.Errorf("commonLines(%q, %q) = %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}
}

func TestHandBuiltHunk(t *testing.T) {
	t.Parallel()
	// A Hunk made without Parse has no record of its context lines; they
	// are found by diffing Old and New, and still keep the file's text.
	p := &Patch{Ops: []FileOp{{Op: Update, Path: "f", Hunks: []Hunk{{Old: []string{"a", "b"}, New: []string{"a", "c"}}}}}}
	fsys := newMemFS(map[string]string{"f": "a  \nb\n"})
	if _, err := Apply(context.Background(), fsys, p); err != nil {
		t.Fatal(err)
	}
	if got := fsys.snapshot()["f"]; got != "a  \nc\n" {
		t.Errorf("got %q", got)
	}
	if _, err := Apply(context.Background(), fsys, &Patch{}); err == nil {
		t.Error("empty patch applied")
	}
	if _, err := Apply(context.Background(), fsys, &Patch{Ops: []FileOp{{Op: Delete}}}); err == nil || !strings.Contains(err.Error(), "empty path") {
		t.Errorf("empty path: %v", err)
	}
}
