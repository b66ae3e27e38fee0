package search

import (
	"bufio"
	"bytes"
	"path"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// A glob is a slash-separated pattern matched a path component at a time:
// "**" spans any number of components (at least one when it ends the
// pattern, as git's trailing "/**" does), other components are path.Match
// patterns ("*", "?", "[a-z]", "\" escapes).
type glob struct {
	segs []segment
	// base: the pattern had no "/", so it matches the base name at any depth.
	base bool
}

// segment is one component of a glob, with fast paths for the common shapes.
type segment struct {
	pat  string
	kind int
	lit  string // segLiteral: the name; segSuffix: what it ends with
}

const (
	segMatch   = iota // path.Match
	segLiteral        // no metacharacters
	segSuffix         // "*" followed by a literal ("*.go")
	segAny            // "*"
	segDeep           // "**"
)

func compileGlob(p string) (glob, error) {
	p = strings.TrimSuffix(p, "/")
	g := glob{base: !strings.Contains(p, "/")}
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return g, protocol.Errorf(protocol.CodeBadRequest, "empty glob")
	}
	for _, s := range strings.Split(p, "/") {
		if s == "" {
			continue // "a//b" is "a/b"
		}
		if _, err := path.Match(s, ""); err != nil {
			return g, protocol.Errorf(protocol.CodeBadRequest, "glob %q: malformed component %q", p, s)
		}
		seg := segment{pat: s, kind: segMatch}
		switch {
		case s == "**":
			seg.kind = segDeep
		case s == "*":
			seg.kind = segAny
		case !strings.ContainsAny(s, `*?[\`):
			seg.kind, seg.lit = segLiteral, s
		case s[0] == '*' && !strings.ContainsAny(s[1:], `*?[\`):
			seg.kind, seg.lit = segSuffix, s[1:]
		}
		g.segs = append(g.segs, seg)
	}
	return g, nil
}

func (s *segment) match(name string) bool {
	switch s.kind {
	case segLiteral:
		return name == s.lit
	case segSuffix:
		return strings.HasSuffix(name, s.lit)
	case segAny:
		return true
	}
	ok, _ := path.Match(s.pat, name) // checked when compiled
	return ok
}

// match reports whether the glob matches rel (a path relative to the
// glob's base, without a leading "/") whose last component is name.
func (g *glob) match(rel, name string) bool {
	if g.base && len(g.segs) == 1 {
		return g.segs[0].match(name)
	}
	return matchSegs(g.segs, rel)
}

// matchSegs matches segs against every component of p.
func matchSegs(segs []segment, p string) bool {
	for len(segs) > 0 {
		if segs[0].kind == segDeep {
			rest := segs[1:]
			for len(rest) > 0 && rest[0].kind == segDeep {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return p != "" // a trailing "**": everything inside
			}
			for {
				if matchSegs(rest, p) {
					return true
				}
				i := strings.IndexByte(p, '/')
				if i < 0 {
					return false
				}
				p = p[i+1:]
			}
		}
		head, rest, more := strings.Cut(p, "/")
		if p == "" || !segs[0].match(head) {
			return false
		}
		segs, p = segs[1:], rest
		if !more {
			return len(segs) == 0
		}
	}
	return p == ""
}

// expandBraces expands "{a,b}" alternatives ("*.{ts,tsx}"), nested ones
// too, into plain globs.
func expandBraces(p string) ([]string, error) {
	const maxExpansions = 256
	open := -1
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				continue
			}
			if depth--; depth > 0 {
				continue
			}
			var alts []string
			start, d := open+1, 0
			for j := open + 1; j < i; j++ {
				switch p[j] {
				case '\\':
					j++
				case '{':
					d++
				case '}':
					d--
				case ',':
					if d == 0 {
						alts = append(alts, p[start:j])
						start = j + 1
					}
				}
			}
			alts = append(alts, p[start:i])
			var out []string
			for _, alt := range alts {
				more, err := expandBraces(p[:open] + alt + p[i+1:])
				if err != nil {
					return nil, err
				}
				if out = append(out, more...); len(out) > maxExpansions {
					return nil, protocol.Errorf(protocol.CodeBadRequest, "glob %q expands to more than %d patterns", p, maxExpansions)
				}
			}
			return out, nil
		}
	}
	if depth > 0 {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "glob %q: unclosed '{'", p)
	}
	return []string{p}, nil
}

// filterGlob is one of SearchArgs.Glob, brace-expanded.
type filterGlob struct {
	glob
	exclude bool
}

// globFilter applies SearchArgs.Glob and Type: the last glob that matches
// a path decides; with no include glob, a file no glob matches is kept.
type globFilter struct {
	globs    []filterGlob
	includes bool
	types    []glob // base-name globs of the type; nil means any file
}

func newGlobFilter(globs []string, typ string) (*globFilter, error) {
	f := &globFilter{}
	for _, g := range globs {
		exclude := strings.HasPrefix(g, "!")
		pats, err := expandBraces(strings.TrimPrefix(g, "!"))
		if err != nil {
			return nil, err
		}
		for _, p := range pats {
			cg, err := compileGlob(p)
			if err != nil {
				return nil, err
			}
			f.globs = append(f.globs, filterGlob{glob: cg, exclude: exclude})
			f.includes = f.includes || !exclude
		}
	}
	if typ != "" {
		for _, p := range protocol.SearchTypes[typ] {
			cg, err := compileGlob(p)
			if err != nil {
				return nil, err
			}
			f.types = append(f.types, cg)
		}
	}
	return f, nil
}

// last returns the index of the last glob that matches, or -1.
func (f *globFilter) last(rel, name string) int {
	for i := len(f.globs) - 1; i >= 0; i-- {
		if f.globs[i].match(rel, name) {
			return i
		}
	}
	return -1
}

// enter reports whether the walk goes into the directory rel: only an
// exclude glob keeps it out.
func (f *globFilter) enter(rel, name string) bool {
	i := f.last(rel, name)
	return i < 0 || !f.globs[i].exclude
}

// keep reports whether the file rel is searched.
func (f *globFilter) keep(rel, name string) bool {
	if f.types != nil {
		ok := false
		for i := range f.types {
			if f.types[i].match(name, name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	i := f.last(rel, name)
	if i < 0 {
		return !f.includes
	}
	return !f.globs[i].exclude
}

// ignoreFile holds the rules of one .gitignore. The supported subset: blank
// lines and "#" comments, "\#" and "\!" escapes, "!" negation, a trailing
// "/" for directories only, a "/" at the start or in the middle anchoring
// the pattern to the file's directory (otherwise it matches the base name
// at any depth below), and "*", "?", "[...]" and "**" as git has them.
// Not supported: trailing spaces escaped with "\", .git/info/exclude,
// core.excludesFile, .ignore files, and .gitignore files above the
// searched root.
type ignoreFile struct {
	base   string // directory of the .gitignore relative to the search root, "" for the root
	rules  []ignoreRule
	parent *ignoreFile
}

type ignoreRule struct {
	glob
	negate, dirOnly bool
}

// parseIgnore parses a .gitignore; a malformed line is skipped, as git does.
func parseIgnore(data []byte, base string, parent *ignoreFile) *ignoreFile {
	f := &ignoreFile{base: base, parent: parent}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || line[0] == '#' {
			continue
		}
		var r ignoreRule
		if line[0] == '!' {
			r.negate, line = true, line[1:]
		} else if strings.HasPrefix(line, `\#`) || strings.HasPrefix(line, `\!`) {
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimRight(line, "/")
		}
		g, err := compileGlob(line)
		if err != nil {
			continue
		}
		r.glob = g
		f.rules = append(f.rules, r)
	}
	if len(f.rules) == 0 {
		return parent
	}
	return f
}

// ignored reports whether the .gitignore files from f up to the root ignore
// rel (relative to the search root, last component name). The deepest file
// decides first, and in a file the last matching rule.
func (f *ignoreFile) ignored(rel, name string, dir bool) bool {
	for ; f != nil; f = f.parent {
		sub := rel
		if f.base != "" {
			sub = rel[len(f.base)+1:]
		}
		for i := len(f.rules) - 1; i >= 0; i-- {
			r := &f.rules[i]
			if r.dirOnly && !dir {
				continue
			}
			if r.match(sub, name) {
				return !r.negate
			}
		}
	}
	return false
}
