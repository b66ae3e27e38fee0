package tools

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

type grepIn struct {
	Pattern    string   `json:"pattern" jsonschema:"regular expression (RE2 syntax) to search for"`
	Path       string   `json:"path,omitempty" jsonschema:"file or directory to search (default: the workdir)"`
	Glob       []string `json:"glob,omitempty" jsonschema:"only files matching these globs (**/*.go; a leading ! excludes)"`
	Type       string   `json:"type,omitempty" jsonschema:"only files of this type: go, py, js, ts, rust, c, cpp, java, md, json, yaml, sh, ..."`
	IgnoreCase bool     `json:"ignore_case,omitempty" jsonschema:"case-insensitive match"`
	Literal    bool     `json:"literal,omitempty" jsonschema:"pattern is a fixed string, not a regular expression"`
	OutputMode string   `json:"output_mode,omitempty" jsonschema:"content (matching lines, default), files_with_matches, or count"`
	Context    int      `json:"context,omitempty" jsonschema:"lines of context around each match (content mode)"`
	HeadLimit  int      `json:"head_limit,omitempty" jsonschema:"most results to return (default 200)"`
	Hidden     bool     `json:"hidden,omitempty" jsonschema:"also search dot files (.gitignore'd files are skipped unless no_ignore)"`
	NoIgnore   bool     `json:"no_ignore,omitempty" jsonschema:"do not honour .gitignore"`
}

var grepTool = define("grep", GroupFSRead, Annotations{ReadOnly: true, Idempotent: true},
	"Search file contents in the neuron with a regular expression (ripgrep-like: skips .git, binary files and what .gitignore ignores). Modes: content (path:line:text), files_with_matches, count.",
	func(s *jsonschema.Schema) {
		enum(s, "output_mode", "content", "files_with_matches", "count")
		bounds(s, "context", 0, 20)
		bounds(s, "head_limit", 0, 10000)
	},
	func(in *grepIn) *subject { return &subject{Reads: []string{orDot(in.Path)}} },
	func(ctx context.Context, c *call, in *grepIn) (*Result, error) {
		mode := map[string]string{"": "content", "content": "content", "files_with_matches": "files", "count": "count"}[in.OutputMode]
		args := &protocol.SearchArgs{
			Path: c.path(orDot(in.Path)), Pattern: in.Pattern, Mode: mode, Glob: in.Glob, Type: in.Type,
			IgnoreCase: in.IgnoreCase, Literal: in.Literal, Context: in.Context,
			MaxResults: orInt(in.HeadLimit, 200), Hidden: in.Hidden, NoIgnore: in.NoIgnore,
			MaxFileBytes: c.res.MaxFileBytes,
		}
		r, err := c.search(ctx, args)
		if err != nil {
			return nil, err
		}
		withheld := c.withholdUnreadable(ctx, args.Path, r)
		var b strings.Builder
		switch mode {
		case "content":
			for _, m := range r.Matches {
				sep := ":"
				if m.Context {
					sep = "-"
				}
				fmt.Fprintf(&b, "%s%s%d%s%s\n", m.Path, sep, m.Line, sep, m.Text)
			}
		case "files":
			for _, f := range r.Files {
				fmt.Fprintf(&b, "%s\n", f)
			}
		case "count":
			for _, n := range r.Counts {
				fmt.Fprintf(&b, "%s:%d\n", n.Path, n.Count)
			}
		}
		if withheld > 0 {
			fmt.Fprintf(&b, "[%d file%s with matches withheld: the policy denies reading them]\n", withheld, plural(withheld))
		}
		if b.Len() == 0 {
			return textf("no matches for %q in %s (%d files searched)", in.Pattern, args.Path, r.FilesScanned), nil
		}
		if r.Truncated {
			fmt.Fprintf(&b, "[results cut at %d: narrow the search (path, glob, type) or raise head_limit]\n", args.MaxResults)
		}
		return text(strings.TrimSuffix(b.String(), "\n")), nil
	})

type findIn struct {
	Pattern string `json:"pattern" jsonschema:"glob of file paths to find, relative to path (**/*.go, src/**/test_*.py, *.md)"`
	Path    string `json:"path,omitempty" jsonschema:"directory to search (default: the workdir)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"most paths to return (default 200)"`
	Hidden  bool   `json:"hidden,omitempty" jsonschema:"include dot files"`
}

var findTool = define("find", GroupFSRead, Annotations{ReadOnly: true, Idempotent: true},
	"Find files in the neuron by glob pattern (** crosses directories), newest first. Skips .git and what .gitignore ignores.",
	func(s *jsonschema.Schema) { bounds(s, "limit", 0, 10000) },
	func(in *findIn) *subject { return &subject{Reads: []string{orDot(in.Path)}} },
	func(ctx context.Context, c *call, in *findIn) (*Result, error) {
		args := &protocol.SearchArgs{Path: c.path(orDot(in.Path)), Mode: "find", Glob: []string{in.Pattern},
			MaxResults: orInt(in.Limit, 200), Hidden: in.Hidden}
		r, err := c.search(ctx, args)
		if err != nil {
			return nil, err
		}
		if len(r.Files) == 0 {
			return textf("no files match %q in %s", in.Pattern, args.Path), nil
		}
		out := strings.Join(r.Files, "\n")
		if r.Truncated {
			out += fmt.Sprintf("\n[cut at %d paths: narrow the pattern or raise limit]", args.MaxResults)
		}
		return text(out), nil
	})

// withholdUnreadable drops from r the files the policy would not let read
// read: the search judged only its root, and a file under it may be denied
// itself, or be a symlink to a denied file. Each distinct file is resolved
// in the neuron and judged as read would judge it. It returns how many
// files were withheld.
func (c *call) withholdUnreadable(ctx context.Context, root string, r *protocol.SearchResult) int {
	isFile := false
	if cl, err := c.channel(ctx); err == nil {
		if st, err := cl.Stat(ctx, root); err == nil && st.Type != protocol.TypeDir {
			isFile = true
		}
	}
	verdict := map[string]bool{}
	var home string
	if h, _, err := c.kit.dirs(ctx, c); err == nil {
		home = h
	}
	ok := func(rel string) bool {
		if v, seen := verdict[rel]; seen {
			return v
		}
		p := rel
		if !isFile && !path.IsAbs(rel) {
			p = path.Join(root, rel)
		}
		abs, err := c.resolve(ctx, p)
		if err != nil {
			verdict[rel] = false // a path that does not resolve is not shown
			return false
		}
		d := c.kit.policy.Check(&policy.Request{Tool: c.tool.Name, Group: string(c.tool.Group),
			Paths: []policy.PathAccess{{Path: abs, Access: policy.Read}}, Workspace: c.kit.workdirKnown(), Home: home})
		verdict[rel] = d.Effect == policy.Allow
		return verdict[rel]
	}
	withheld := map[string]bool{}
	r.Matches = keepReadable(r.Matches, func(m protocol.SearchMatch) string { return m.Path }, ok, withheld)
	r.Files = keepReadable(r.Files, func(f string) string { return f }, ok, withheld)
	r.Counts = keepReadable(r.Counts, func(n protocol.SearchCount) string { return n.Path }, ok, withheld)
	return len(withheld)
}

// keepReadable filters results in place by the verdict on their path,
// adding the paths it drops to withheld.
func keepReadable[T any](in []T, pathOf func(T) string, ok func(string) bool, withheld map[string]bool) []T {
	out := in[:0]
	for _, x := range in {
		if p := pathOf(x); ok(p) {
			out = append(out, x)
		} else {
			withheld[p] = true
		}
	}
	return out
}

func (c *call) search(ctx context.Context, args *protocol.SearchArgs) (*protocol.SearchResult, error) {
	cl, err := c.channel(ctx)
	if err != nil {
		return nil, err
	}
	return cl.Search(ctx, args)
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
