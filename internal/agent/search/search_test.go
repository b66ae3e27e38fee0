package search

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// searchTree makes a file system confined to a fresh root holding files
// (path → content; a content starting "->" makes a symlink to the rest).
func searchTree(t *testing.T, files map[string]string) (FS, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for p, content := range files {
		full := filepath.Join(root, p)
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		if target, ok := strings.CutPrefix(content, "->"); ok {
			must(t, os.Symlink(target, full))
			continue
		}
		must(t, os.WriteFile(full, []byte(content), 0o644))
	}
	must(t, os.MkdirAll(root, 0o755))
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return rootFS{r: r, root: root}, root
}

// rootFS is the confined file system of the tests, as the agent's jail
// is: paths are the host's, the working directory is the root, a path out
// of it is refused, and os.Root keeps every open beneath it (symlinks
// included).
type rootFS struct {
	r    *os.Root
	root string
}

func (f rootFS) name(p string) (name, abs string, err error) {
	abs = p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(f.root, p)
	}
	abs = filepath.Clean(abs)
	rel, err := filepath.Rel(f.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", abs, protocol.Errorf(protocol.CodePathEscape, "%s is outside the root", p)
	}
	return rel, abs, nil
}

func (f rootFS) OpenFile(p string, flag int, perm fs.FileMode) (*os.File, string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return nil, abs, err
	}
	file, err := f.r.OpenFile(name, flag, perm)
	return file, abs, rootError(abs, err)
}

func (f rootFS) Stat(p string, follow bool) (fs.FileInfo, string, error) {
	name, abs, err := f.name(p)
	if err != nil {
		return nil, abs, err
	}
	stat := f.r.Lstat
	if follow {
		stat = f.r.Stat
	}
	st, err := stat(name)
	return st, abs, rootError(abs, err)
}

// rootError maps os.Root's errors onto the codes the agent's jail gives.
func rootError(abs string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return protocol.Errorf(protocol.CodeNotFound, "%s: no such file or directory", abs)
	case strings.Contains(err.Error(), "escapes from parent"):
		return protocol.Errorf(protocol.CodePathEscape, "%s leads outside the root", abs)
	}
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func runSearch(t *testing.T, fsys FS, args protocol.SearchArgs) *protocol.SearchResult {
	t.Helper()
	res, err := Run(context.Background(), fsys, &args)
	if err != nil {
		t.Fatalf("search %+v: %v", args, err)
	}
	return res
}

// lines renders matches as "path:line:text" (":" for matches, "-" for context).
func lines(res *protocol.SearchResult) []string {
	var out []string
	for _, m := range res.Matches {
		sep := ":"
		if m.Context {
			sep = "-"
		}
		out = append(out, fmt.Sprintf("%s%s%d%s%s", m.Path, sep, m.Line, sep, m.Text))
	}
	return out
}

func counts(res *protocol.SearchResult) []string {
	var out []string
	for _, c := range res.Counts {
		out = append(out, fmt.Sprintf("%s=%d", c.Path, c.Count))
	}
	return out
}

func wantStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

var sourceTree = map[string]string{
	"main.go":            "package main\n\nfunc main() {\n\tSearch()\n}\n",
	"a.txt":              "alpha\nbeta\n",
	"a/b.go":             "package a\n// search here\nfunc Search() {}\n",
	"a/z.py":             "def search():\n    pass\n",
	"docs/guide.md":      "# Guide\nUse Search to search.\n",
	"vendor/dep/dep.go":  "package dep\nfunc Search() {}\n",
	"src/lib/x.ts":       "export const search = 1;\n",
	"src/lib/y.tsx":      "export const Search = 2;\n",
	"src/lib/deep/z.go":  "package deep // Search\n",
	"a.b/file.txt":       "Search in a dotted dir\n",
	"crlf.txt":           "Search\r\nnothing\r\n",
	"empty.txt":          "",
	"noeol.txt":          "last line Search",
	"meta.txt":           "call a.b(c) here\nor axb(c) there\n",
	"unicode.txt":        "Straße\nKELVIN \u212a\n",
	"sub/.hidden.go":     "package sub // Search\n",
	".hiddendir/x.go":    "package x // Search\n",
	"bin.dat":            "Search\x00binary\n",
	".git/config":        "Search\n",
	"z/.git":             "gitdir: Search\n",
	"linkdir":            "->a",
	"linkfile.go":        "->main.go",
	"outside.txt":        "->../secret.txt",
	"absolute-link.txt":  "->/etc/passwd",
	"loop/self":          "->..",
	"long.txt":           strings.Repeat("é", 30) + "Search" + strings.Repeat("x", 100) + "\n",
	"count.txt":          "Search Search\nno\nSearch\n",
	"mixed/UPPER.txt":    "SEARCH\n",
	"mixed/lower.txt":    "search\n",
	"mixed/Capital.txt":  "Search\n",
	"mixed/nomatch.txt":  "sear ch\n",
	"docs/sub/readme.md": "nothing\n",
}

func TestSearchModes(t *testing.T) {
	a, root := searchTree(t, sourceTree)
	must(t, os.WriteFile(filepath.Join(filepath.Dir(root), "secret.txt"), []byte("Search secret\n"), 0o644))

	t.Run("content", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "Search", MaxLineChars: 20})
		wantStrings(t, "matches", lines(res), []string{
			"a/b.go:3:func Search() {}",
			"a.b/file.txt:1:Search in a dotted d…",
			"count.txt:1:Search Search",
			"count.txt:3:Search",
			"crlf.txt:1:Search",
			"docs/guide.md:2:Use Search to search…",
			"linkfile.go:4:\tSearch()",
			"long.txt:1:" + strings.Repeat("é", 20) + "…",
			"main.go:4:\tSearch()",
			"mixed/Capital.txt:1:Search",
			"noeol.txt:1:last line Search",
			"src/lib/deep/z.go:1:package deep // Sear…",
			"src/lib/y.tsx:1:export const Search …",
			"vendor/dep/dep.go:2:func Search() {}",
		})
		if res.SkippedBinary != 1 || res.Truncated {
			t.Errorf("skipped %d binary, truncated %v", res.SkippedBinary, res.Truncated)
		}
		if res.FilesScanned < 20 {
			t.Errorf("scanned only %d files", res.FilesScanned)
		}
	})
	t.Run("files", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "Search", Mode: protocol.SearchModeFiles, IgnoreCase: true})
		wantStrings(t, "files", res.Files, []string{"a/b.go", "a/z.py", "a.b/file.txt", "count.txt", "crlf.txt", "docs/guide.md",
			"linkfile.go", "long.txt", "main.go", "mixed/Capital.txt", "mixed/UPPER.txt", "mixed/lower.txt", "noeol.txt",
			"src/lib/deep/z.go", "src/lib/x.ts", "src/lib/y.tsx", "vendor/dep/dep.go"})
	})
	t.Run("count", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: "mixed", Pattern: "search", Mode: protocol.SearchModeCount, IgnoreCase: true})
		wantStrings(t, "counts", counts(res), []string{"Capital.txt=1", "UPPER.txt=1", "lower.txt=1"})
		res = runSearch(t, a, protocol.SearchArgs{Path: "count.txt", Pattern: "Search", Mode: protocol.SearchModeCount})
		wantStrings(t, "counts of a file", counts(res), []string{"count.txt=2"})
	})
	t.Run("find", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: ".", Mode: protocol.SearchModeFind, Glob: []string{"*.go"}})
		got := slices.Clone(res.Files)
		slices.Sort(got)
		wantStrings(t, "find *.go", got, []string{"a/b.go", "linkfile.go", "main.go", "src/lib/deep/z.go", "vendor/dep/dep.go"})
	})
	t.Run("single file", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: "a/b.go", Pattern: "Search|search"})
		wantStrings(t, "matches", lines(res), []string{"a/b.go:2:// search here", "a/b.go:3:func Search() {}"})
		res = runSearch(t, a, protocol.SearchArgs{Path: root + "/a/b.go", Pattern: "package", Mode: protocol.SearchModeFiles})
		wantStrings(t, "files", res.Files, []string{root + "/a/b.go"})
	})
	t.Run("subdirectory root", func(t *testing.T) {
		res := runSearch(t, a, protocol.SearchArgs{Path: "src/lib", Pattern: "(?i)search", Mode: protocol.SearchModeFiles})
		wantStrings(t, "files", res.Files, []string{"deep/z.go", "x.ts", "y.tsx"})
	})
}

func TestSearchFilters(t *testing.T) {
	a, _ := searchTree(t, sourceTree)
	files := func(args protocol.SearchArgs) []string {
		t.Helper()
		args.Mode = protocol.SearchModeFiles
		if args.Pattern == "" {
			args.Pattern = "."
		}
		args.Path = "."
		return runSearch(t, a, args).Files
	}
	for _, tc := range []struct {
		name string
		args protocol.SearchArgs
		want []string
	}{
		{"doublestar", protocol.SearchArgs{Glob: []string{"**/*.go"}}, []string{"a/b.go", "linkfile.go", "main.go", "src/lib/deep/z.go", "vendor/dep/dep.go"}},
		{"basename anywhere", protocol.SearchArgs{Glob: []string{"*.md"}}, []string{"docs/guide.md", "docs/sub/readme.md"}},
		{"exclude dir", protocol.SearchArgs{Glob: []string{"*.go", "!vendor"}}, []string{"a/b.go", "linkfile.go", "main.go", "src/lib/deep/z.go"}},
		{"exclude only", protocol.SearchArgs{Glob: []string{"!*.txt", "!src/**", "!mixed"}}, []string{"a/b.go", "a/z.py", "docs/guide.md", "docs/sub/readme.md", "linkfile.go", "main.go", "vendor/dep/dep.go"}},
		{"under a directory", protocol.SearchArgs{Glob: []string{"src/**"}}, []string{"src/lib/deep/z.go", "src/lib/x.ts", "src/lib/y.tsx"}},
		{"anchored path", protocol.SearchArgs{Glob: []string{"src/*/x.ts", "docs/*.md"}}, []string{"docs/guide.md", "src/lib/x.ts"}},
		{"braces", protocol.SearchArgs{Glob: []string{"**/*.{ts,tsx}"}}, []string{"src/lib/x.ts", "src/lib/y.tsx"}},
		{"last glob wins", protocol.SearchArgs{Glob: []string{"!**/*.go", "src/**/*.go"}}, []string{"src/lib/deep/z.go"}},
		{"type", protocol.SearchArgs{Type: "ts"}, []string{"src/lib/x.ts", "src/lib/y.tsx"}},
		{"type and glob", protocol.SearchArgs{Type: "go", Glob: []string{"!vendor/**"}}, []string{"a/b.go", "linkfile.go", "main.go", "src/lib/deep/z.go"}},
		{"hidden", protocol.SearchArgs{Hidden: true, Glob: []string{"*.go"}}, []string{".hiddendir/x.go", "a/b.go", "linkfile.go", "main.go", "src/lib/deep/z.go", "sub/.hidden.go", "vendor/dep/dep.go"}},
		{"hidden never .git", protocol.SearchArgs{Hidden: true, Glob: []string{"config", "z/**"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStrings(t, "files", files(tc.args), tc.want)
		})
	}
	_, err := Run(context.Background(), a, &protocol.SearchArgs{Path: ".", Pattern: "x", Type: "cobol"})
	if !protocol.HasCode(err, protocol.CodeBadRequest) || !strings.Contains(err.Error(), "go, ") {
		t.Errorf("unknown type: %v", err)
	}
	for _, g := range []string{"[a", "{a,b", "!"} {
		if _, err := Run(context.Background(), a, &protocol.SearchArgs{Path: ".", Pattern: "x", Glob: []string{g}}); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Errorf("glob %q: %v", g, err)
		}
	}
}

func TestSearchPatterns(t *testing.T) {
	a, _ := searchTree(t, sourceTree)
	for _, tc := range []struct {
		name string
		args protocol.SearchArgs
		want []string
	}{
		{"literal with metacharacters", protocol.SearchArgs{Path: "meta.txt", Pattern: "a.b(c)", Literal: true}, []string{"meta.txt:1:call a.b(c) here"}},
		{"the same as a regexp", protocol.SearchArgs{Path: "meta.txt", Pattern: "a.b"}, []string{"meta.txt:1:call a.b(c) here", "meta.txt:2:or axb(c) there"}},
		{"ignore case", protocol.SearchArgs{Path: "mixed", Pattern: "search", IgnoreCase: true}, []string{"Capital.txt:1:Search", "UPPER.txt:1:SEARCH", "lower.txt:1:search"}},
		{"ignore case literal", protocol.SearchArgs{Path: "meta.txt", Pattern: "A.B(C)", Literal: true, IgnoreCase: true}, []string{"meta.txt:1:call a.b(c) here"}},
		{"unicode folding", protocol.SearchArgs{Path: "unicode.txt", Pattern: "kelvin k", IgnoreCase: true}, []string{"unicode.txt:2:KELVIN \u212a"}},
		{"non-ascii literal", protocol.SearchArgs{Path: "unicode.txt", Pattern: "aße"}, []string{"unicode.txt:1:Straße"}},
		{"anchors per line", protocol.SearchArgs{Path: "crlf.txt", Pattern: "^nothing$"}, []string{"crlf.txt:2:nothing"}},
		{"no literal", protocol.SearchArgs{Path: "mixed", Pattern: `^[A-Z]+$`}, []string{"UPPER.txt:1:SEARCH"}},
		{"empty lines", protocol.SearchArgs{Path: "main.go", Pattern: `^$`}, []string{"main.go:2:"}},
		{"empty file", protocol.SearchArgs{Path: "empty.txt", Pattern: `^`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStrings(t, "matches", lines(runSearch(t, a, tc.args)), tc.want)
		})
	}
	if _, err := Run(context.Background(), a, &protocol.SearchArgs{Path: ".", Pattern: "a("}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("bad regexp: %v", err)
	}
}

// The literal pre-filter finds exactly the lines a plain regexp finds.
func TestLineMatcherAgreesWithRegexp(t *testing.T) {
	text := "foo bar\nFOO BAR\nfoobar\nxfooy\nbar foo baz\n\nKelvin \u212a\nſtraße STRASSE\nabcabc\nfoo\r\nend"
	for _, p := range []string{"foo", "(?i)foo", "fo+", "foo|bar", "f(o)o", "(?i)kelvin", "(?i)k", "(?i)s", "^foo", "foo$", `\bfoo\b`,
		"a(?i)bc", "(abc){2}", "[fb]oo", "x?foo", "(?i)straße", "", "^$", "o b", `\w+ \w+`, "bar|baz", "(?i:F)oo"} {
		m, err := newLineMatcher(p, false, false)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(p)
		var want, got []string
		for _, line := range strings.Split(text, "\n") {
			if re.MatchString(strings.TrimSuffix(line, "\r")) {
				want = append(want, line)
			}
		}
		data := []byte(text)
		for pos := 0; ; {
			s, e, ok := m.next(data, pos)
			if !ok {
				break
			}
			got = append(got, string(data[s:e]))
			pos = e + 1
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q (literal %q fold %v exact %v):\n got  %q\n want %q", p, m.lit, m.fold, m.exact, got, want)
		}
	}
}

func TestSearchContext(t *testing.T) {
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "line %d", i)
		if i == 3 || i == 5 || i == 12 || i == 20 {
			b.WriteString(" hit")
		}
		b.WriteString("\n")
	}
	a, _ := searchTree(t, map[string]string{"f.txt": b.String(), "g.txt": "hit\nx\n"})
	res := runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "hit", Context: 2})
	wantStrings(t, "context", lines(res), []string{
		"f.txt-1-line 1", "f.txt-2-line 2", "f.txt:3:line 3 hit", "f.txt-4-line 4", "f.txt:5:line 5 hit", "f.txt-6-line 6", "f.txt-7-line 7",
		"f.txt-10-line 10", "f.txt-11-line 11", "f.txt:12:line 12 hit", "f.txt-13-line 13", "f.txt-14-line 14",
		"f.txt-18-line 18", "f.txt-19-line 19", "f.txt:20:line 20 hit",
		"g.txt:1:hit", "g.txt-2-x",
	})
	// Cut at the limit: the last match keeps its context after, the one
	// left out does not bring its context before.
	res = runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "hit", Context: 1, MaxResults: 3})
	wantStrings(t, "context at the limit", lines(res), []string{
		"f.txt-2-line 2", "f.txt:3:line 3 hit", "f.txt-4-line 4", "f.txt:5:line 5 hit", "f.txt-6-line 6",
		"f.txt-11-line 11", "f.txt:12:line 12 hit", "f.txt-13-line 13",
	})
	if !res.Truncated {
		t.Error("not truncated")
	}
}

func TestSearchGitignore(t *testing.T) {
	a, _ := searchTree(t, map[string]string{
		".gitignore":           "# build output\n\n*.log\n/build\nnode_modules/\n!keep.log\ncache/\n\\#literal\n",
		"a.log":                "x\n",
		"keep.log":             "x\n",
		"build/out.txt":        "x\n",
		"sub/build/out.txt":    "x\n", // "/build" is anchored to the root
		"node_modules/m.js":    "x\n",
		"sub/node_modules/n":   "x\n",
		"x/cache":              "x\n", // a file: "cache/" names directories only
		"#literal":             "x\n",
		"src/.gitignore":       "gen/\n*.tmp\n!important.tmp\n/local.txt\nlib/*.o\n",
		"src/a.tmp":            "x\n",
		"src/important.tmp":    "x\n",
		"src/gen/g.go":         "x\n",
		"src/local.txt":        "x\n",
		"src/deeper/local.txt": "x\n",
		"src/lib/a.o":          "x\n",
		"src/lib/sub/b.o":      "x\n",
		"src/main.go":          "x\n",
		"other/a.tmp":          "x\n", // src's rules stay in src
	})
	files := func(noIgnore bool) []string {
		return runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "x", Mode: protocol.SearchModeFiles, NoIgnore: noIgnore}).Files
	}
	wantStrings(t, "honoured", files(false), []string{"keep.log", "other/a.tmp", "src/deeper/local.txt", "src/important.tmp",
		"src/lib/sub/b.o", "src/main.go", "sub/build/out.txt", "x/cache"})
	if got := files(true); len(got) != 17 {
		t.Errorf("noIgnore: %d files %q", len(got), got)
	}
}

func TestSearchSymlinksAndJail(t *testing.T) {
	a, root := searchTree(t, sourceTree)
	must(t, os.WriteFile(filepath.Join(filepath.Dir(root), "secret.txt"), []byte("Search secret\n"), 0o644))
	res := runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "Search|secret", Mode: protocol.SearchModeFiles, NoIgnore: true})
	for _, f := range res.Files {
		if strings.HasPrefix(f, "linkdir/") || strings.HasPrefix(f, "loop/") || f == "outside.txt" || f == "absolute-link.txt" {
			t.Errorf("followed a symlink: %s", f)
		}
	}
	if !slices.Contains(res.Files, "linkfile.go") {
		t.Errorf("a symlink to a file inside the root is searched: %q", res.Files)
	}
	for _, p := range []string{"..", "../secret.txt", "/etc", "outside.txt", "a/../../secret.txt"} {
		_, err := Run(context.Background(), a, &protocol.SearchArgs{Path: p, Pattern: "x"})
		if !protocol.HasCode(err, protocol.CodePathEscape) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := Run(context.Background(), a, &protocol.SearchArgs{Path: "nope", Pattern: "x"}); !protocol.HasCode(err, protocol.CodeNotFound) {
		t.Errorf("missing root: %v", err)
	}
	// A symlinked root inside the jail is searched.
	res = runSearch(t, a, protocol.SearchArgs{Path: "linkdir", Pattern: "Search", Mode: protocol.SearchModeFiles})
	wantStrings(t, "through a linked root", res.Files, []string{"b.go"})
}

func TestSearchLimits(t *testing.T) {
	files := map[string]string{}
	for i := range 30 {
		files[fmt.Sprintf("d%d/f%02d.txt", i%3, i)] = "hit\nhit\nmiss\n"
	}
	files["big.txt"] = strings.Repeat("hit\n", 1000)
	a, _ := searchTree(t, files)
	ctx := context.Background()
	for _, tc := range []struct {
		args      protocol.SearchArgs
		n         int
		truncated bool
	}{
		{protocol.SearchArgs{Pattern: "hit", MaxResults: 5}, 5, true},
		{protocol.SearchArgs{Pattern: "hit", MaxResults: 1060}, 1060, false},
		{protocol.SearchArgs{Pattern: "hit", MaxResults: 1059}, 1059, true},
		{protocol.SearchArgs{Pattern: "hit"}, protocol.DefaultSearchResults, true},
		{protocol.SearchArgs{Pattern: "hit", Mode: protocol.SearchModeFiles, MaxResults: 31}, 31, false},
		{protocol.SearchArgs{Pattern: "hit", Mode: protocol.SearchModeFiles, MaxResults: 30}, 30, true},
		{protocol.SearchArgs{Pattern: "hit", Mode: protocol.SearchModeCount, MaxResults: 2}, 2, true},
		{protocol.SearchArgs{Mode: protocol.SearchModeFind, MaxResults: 7}, 7, true},
		{protocol.SearchArgs{Pattern: "hit", MaxFileBytes: 100, Mode: protocol.SearchModeFiles}, 30, false},
	} {
		tc.args.Path = "."
		res, err := Run(ctx, a, &tc.args)
		if err != nil {
			t.Fatal(err)
		}
		n := len(res.Matches) + len(res.Files) + len(res.Counts)
		if n != tc.n || res.Truncated != tc.truncated {
			t.Errorf("%+v: %d results, truncated %v; want %d, %v", tc.args, n, res.Truncated, tc.n, tc.truncated)
		}
	}
	// The first results in path order, whatever the parallelism.
	res := runSearch(t, a, protocol.SearchArgs{Path: ".", Pattern: "hit", MaxResults: 3, Mode: protocol.SearchModeFiles})
	wantStrings(t, "first files", res.Files, []string{"big.txt", "d0/f00.txt", "d0/f03.txt"})
	// A result that would not fit in a frame is cut short, not refused.
	big := map[string]string{}
	for i := range 40 {
		big[fmt.Sprintf("f%02d", i)] = strings.Repeat(strings.Repeat("<", 400)+"\n", 250)
	}
	a2, _ := searchTree(t, big)
	res = runSearch(t, a2, protocol.SearchArgs{Path: ".", Pattern: "<", MaxResults: protocol.MaxSearchResults})
	if !res.Truncated || len(res.Matches) == 0 || len(res.Matches) >= protocol.MaxSearchResults {
		t.Errorf("huge result: %d matches, truncated %v", len(res.Matches), res.Truncated)
	}
}

func TestSearchFindNewestFirst(t *testing.T) {
	a, root := searchTree(t, map[string]string{"old.go": "", "new.go": "", "mid/x.go": "", "mid/y.go": "", "z.txt": ""})
	t0 := time.Now().Add(-time.Hour)
	for p, age := range map[string]time.Duration{"old.go": 30, "new.go": 1, "mid/x.go": 10, "mid/y.go": 10} {
		mt := t0.Add(-age * time.Minute)
		must(t, os.Chtimes(filepath.Join(root, p), mt, mt))
	}
	res := runSearch(t, a, protocol.SearchArgs{Path: ".", Mode: protocol.SearchModeFind, Glob: []string{"**/*.go"}})
	wantStrings(t, "find", res.Files, []string{"new.go", "mid/x.go", "mid/y.go", "old.go"})
	if _, err := Run(context.Background(), a, &protocol.SearchArgs{Path: ".", Mode: protocol.SearchModeFind, Pattern: "x"}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("find with a pattern: %v", err)
	}
}

func TestSearchCancellation(t *testing.T) {
	files := map[string]string{}
	for i := range 2000 {
		files[fmt.Sprintf("d%02d/f%04d.txt", i%50, i)] = strings.Repeat("some text without the word\n", 50)
	}
	a, _ := searchTree(t, files)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, a, &protocol.SearchArgs{Path: ".", Pattern: "needle"})
	if !protocol.HasCode(err, protocol.CodeTimeout) {
		t.Fatalf("cancelled search: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err = Run(ctx, a, &protocol.SearchArgs{Path: ".", Pattern: `\bneedle|\bhaystack`})
	if !protocol.HasCode(err, protocol.CodeTimeout) {
		t.Fatalf("timed out search: %v", err)
	}
}

// cancellingFS counts the files a search opens through it (its root, and
// every file it reaches by a symlink) and cancels the search at the
// cancelAt-th.
type cancellingFS struct {
	FS
	mu       sync.Mutex
	opens    int
	cancelAt int
	cancel   func()
}

func (f *cancellingFS) OpenFile(p string, flag int, perm fs.FileMode) (*os.File, string, error) {
	f.mu.Lock()
	if f.opens++; f.opens == f.cancelAt {
		f.cancel()
	}
	f.mu.Unlock()
	return f.FS.OpenFile(p, flag, perm)
}

// A search cancelled midway stops there: it does not read the rest of the
// tree (a timing bound would say "promptly"; the count of files it opened
// says it without a clock).
func TestSearchStopsWhereCancelled(t *testing.T) {
	files := map[string]string{}
	const n = 2000
	for i := range n {
		// Links (opened through the FS, so counted) walked before their targets.
		files[fmt.Sprintf("a/d%02d/l%04d.txt", i%50, i)] = fmt.Sprintf("->../../z/f%04d.txt", i)
		files[fmt.Sprintf("z/f%04d.txt", i)] = strings.Repeat("some text without the word\n", 50)
	}
	a, _ := searchTree(t, files)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfs := &cancellingFS{FS: a, cancelAt: 10, cancel: cancel}
	_, err := Run(ctx, cfs, &protocol.SearchArgs{Path: ".", Pattern: "needle"})
	if !protocol.HasCode(err, protocol.CodeTimeout) {
		t.Fatalf("a search cancelled midway: %v", err)
	}
	if cfs.opens >= n/2 {
		t.Errorf("the search went on after it was cancelled: it opened %d of its %d linked files", cfs.opens, n)
	}
}
