package policy

import (
	"math/bits"
	"strings"
)

// This file reads a path that a command word may name as a pattern over
// paths, element by element, and decides whether it may name a path a
// rule's pattern matches. A word names more than one path when it has
// glob characters the shell expands (/proc/1/env*, ~/.s[s]h) or parts only
// known at run time (/proc/$$/environ): the path rules must hold for every
// path it may name, so a word counts as a path a rule matches when the two
// patterns have a path in common.

// charSet is a set of bytes.
type charSet [4]uint64

func (s *charSet) add(c byte)  { s[c>>6] |= 1 << (c & 63) }
func (s *charSet) del(c byte)  { s[c>>6] &^= 1 << (c & 63) }
func (s *charSet) empty() bool { return bits.OnesCount64(s[0]|s[1]|s[2]|s[3]) == 0 }

// nameChars are the bytes a path element may hold: all but '/' and NUL.
var nameChars = func() charSet {
	var s charSet
	for c := 1; c < 256; c++ {
		if c != '/' {
			s.add(byte(c))
		}
	}
	return s
}()

// atom is one piece of a path element's pattern.
type atom struct {
	star bool    // any run of characters
	set  charSet // the characters it (or, for star, each of them) may be
}

// elem is one path element's pattern.
type elem struct {
	atoms []atom
	// any is "**": any number of whole elements, none included.
	any bool
	// noDot marks a shell glob, which does not match a name starting
	// with "." unless its own first character is a literal ".".
	noDot bool
}

func litElem(s string) elem {
	e := elem{atoms: make([]atom, len(s))}
	for i := 0; i < len(s); i++ {
		e.atoms[i].set.add(s[i])
	}
	return e
}

// literal reports whether the element is one fixed name, and returns it.
func (e elem) literal() (string, bool) {
	if e.any {
		return "", false
	}
	var b strings.Builder
	for _, a := range e.atoms {
		if a.star {
			return "", false
		}
		c, ok := a.set.single()
		if !ok {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

func (s *charSet) single() (byte, bool) {
	n := 0
	var found byte
	for i, w := range s {
		n += bits.OnesCount64(w)
		if w != 0 {
			found = byte(i*64 + bits.TrailingZeros64(w))
		}
	}
	return found, n == 1
}

// pathPat is a pattern over paths.
type pathPat struct {
	elems []elem
	// rel marks a path relative to a directory the request does not name:
	// it is not checked.
	rel bool
}

// literal returns the path when the pattern names one path only.
func (p pathPat) literal() (string, bool) {
	if p.rel {
		return "", false
	}
	names := make([]string, len(p.elems))
	for i, e := range p.elems {
		s, ok := e.literal()
		if !ok {
			return "", false
		}
		names[i] = s
	}
	return "/" + strings.Join(names, "/"), true
}

// key tells patterns apart.
func (p pathPat) key() string {
	if p.rel {
		return "rel:" + p.String()
	}
	return p.String()
}

// String writes the pattern for a decision's subject.
func (p pathPat) String() string {
	var b strings.Builder
	if !p.rel {
		b.WriteByte('/')
	}
	for i, e := range p.elems {
		if i > 0 {
			b.WriteByte('/')
		}
		if e.any {
			b.WriteString("**")
			continue
		}
		for _, a := range e.atoms {
			switch c, ok := a.set.single(); {
			case a.star:
				b.WriteByte('*')
			case ok:
				if strings.IndexByte(`*?[\`, c) >= 0 {
					b.WriteByte('\\')
				}
				b.WriteByte(c)
			default:
				b.WriteByte('?')
			}
		}
	}
	return b.String()
}

// clean drops "." and empty elements and applies "..": to a fixed name
// it goes up one; after a glob or "**" the directory is not known, so what
// came before becomes "**".
func (p pathPat) clean() pathPat {
	out := pathPat{rel: p.rel}
	for _, e := range p.elems {
		name, lit := e.literal()
		switch {
		case lit && (name == "" || name == "."):
			continue
		case lit && name == "..":
			n := len(out.elems)
			if n == 0 {
				if out.rel {
					out.elems = append(out.elems, elem{any: true}) // above an unknown start
				}
				continue
			}
			if _, ok := out.elems[n-1].literal(); ok {
				out.elems = out.elems[:n-1]
				continue
			}
			out.elems = []elem{{any: true}}
			continue
		}
		out.elems = append(out.elems, e)
	}
	return out
}

// canonical rewrites /dev/fd, a link to /proc/self/fd, so that ".."
// after it goes where the kernel goes (/dev/fd/.. is /proc/self) and the
// descriptor rules see it. /dev/fd/0, 1 and 2, the command's own standard
// streams, stay as they are.
func (p pathPat) canonical() pathPat {
	if p.rel || len(p.elems) < 2 {
		return p
	}
	if a, _ := p.elems[0].literal(); a != "dev" {
		return p
	}
	if b, _ := p.elems[1].literal(); b != "fd" {
		return p
	}
	if len(p.elems) == 3 {
		if n, ok := p.elems[2].literal(); ok && (n == "0" || n == "1" || n == "2") {
			return p
		}
	}
	if len(p.elems) == 2 {
		return p
	}
	elems := []elem{litElem("proc"), litElem("self"), litElem("fd")}
	return pathPat{elems: append(elems, p.elems[2:]...)}
}

// parseGlobPattern reads a doublestar or path.Match pattern over absolute
// paths ("/proc/**/environ", "/dev/[shv]d*"), after brace expansion.
func parseGlobPattern(pattern string) pathPat {
	var p pathPat
	for _, part := range splitPattern(strings.TrimPrefix(pattern, "/")) {
		if part == "**" {
			p.elems = append(p.elems, elem{any: true})
			continue
		}
		p.elems = append(p.elems, parseGlobElem(part, false))
	}
	return p.clean()
}

// splitPattern splits a pattern at the slashes outside brackets.
func splitPattern(s string) []string {
	var out []string
	start, inClass := 0, false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '[':
			inClass = inClass || strings.IndexByte(s[i+1:], ']') >= 0
		case ']':
			inClass = false
		case '/':
			if !inClass {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// parseGlobElem reads one element of a glob: *, ?, [...] (with ! or ^ and
// ranges; a [:class:] counts as any character), \ escapes, and NUL for a
// part only known at run time, which is any text. shell marks a shell
// glob, whose wildcards do not match a leading "."; a run-time part is
// read the same way, as the name of an entry, not a dot-name of its own
// (cat ~/$d/x is out of reach as cat "$f" is; d=.ssh in the text is read).
func parseGlobElem(s string, shell bool) elem {
	var e elem
	wild, firstLit := false, false
	for i := 0; i < len(s); i++ {
		var a atom
		switch c := s[i]; {
		case c == dynMark[0]: // a part only known at run time
			a = atom{star: true, set: nameChars}
			wild = true
		case c == numberMark[0]: // one that is a number ($$, $PPID)
			a = atom{star: true, set: digits}
			wild = true
		case c == '\\' && i+1 < len(s):
			i++
			a.set.add(s[i])
			firstLit = firstLit || i == 1
		case c == '*':
			for i+1 < len(s) && s[i+1] == '*' {
				i++
			}
			a = atom{star: true, set: nameChars}
			wild = true
		case c == '?':
			a.set = nameChars
			wild = true
		case c == '[':
			set, n, ok := parseClass(s[i:])
			if !ok {
				a.set.add('[')
				break
			}
			a.set, i, wild = set, i+n-1, true
		default:
			a.set.add(c)
			firstLit = firstLit || i == 0
		}
		e.atoms = append(e.atoms, a)
	}
	if shell && wild {
		c, _ := e.atoms[0].set.single()
		e.noDot = !firstLit || c != '.' // [.]ssh does not match .ssh either
	}
	return e
}

// digits are the characters of a number.
var digits = func() charSet {
	var s charSet
	for c := '0'; c <= '9'; c++ {
		s.add(byte(c))
	}
	return s
}()

// parseClass reads a bracket expression at the start of s and returns the
// characters it matches and its length.
func parseClass(s string) (set charSet, n int, ok bool) {
	i := 1
	neg := i < len(s) && (s[i] == '!' || s[i] == '^')
	if neg {
		i++
	}
	first := true
	for i < len(s) {
		c := s[i]
		switch {
		case c == ']' && !first:
			if neg {
				for k := range set {
					set[k] = ^set[k]
				}
			}
			for k := range set {
				set[k] &= nameChars[k]
			}
			return set, i + 1, true
		case c == '[' && i+1 < len(s) && (s[i+1] == ':' || s[i+1] == '=' || s[i+1] == '.'):
			end := strings.Index(s[i+2:], string(s[i+1])+"]")
			if end < 0 {
				return set, 0, false
			}
			set = nameChars // a character class: any character, conservatively
			i += end + 4
		case c == '\\' && i+1 < len(s):
			i++
			set.add(s[i])
			i++
		case i+2 < len(s) && s[i+1] == '-' && s[i+2] != ']':
			lo, hi := c, s[i+2]
			if lo == '\\' || hi == '\\' {
				hi = lo
			}
			for x := int(lo); x <= int(hi); x++ {
				set.add(byte(x))
			}
			i += 3
		default:
			set.add(c)
			i++
		}
		first = false
	}
	return set, 0, false
}

// expandBraces returns the patterns a {a,b} pattern stands for (at most
// 64; a pattern with more is returned as it is, which names less).
func expandBraces(p string) []string {
	out := []string{p}
	for round := 0; round < 8; round++ {
		var next []string
		changed := false
		for _, s := range out {
			open, close := braceSpan(s)
			if open < 0 {
				next = append(next, s)
				continue
			}
			changed = true
			for _, alt := range splitAlternatives(s[open+1 : close]) {
				next = append(next, s[:open]+alt+s[close+1:])
			}
		}
		if !changed || len(next) > 64 {
			return out
		}
		out = next
	}
	return out
}

// braceSpan finds the first outermost {...} that holds a comma.
func braceSpan(s string) (open, close int) {
	depth, start := 0, -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				start = i
			}
			depth++
		case '}':
			if depth > 0 {
				depth--
				if depth == 0 && strings.Contains(s[start:i], ",") {
					return start, i
				}
			}
		}
	}
	return -1, -1
}

func splitAlternatives(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// meets reports whether a word's pattern and a rule's pattern have a path
// in common.
func (p pathPat) meets(rule pathPat) bool {
	a, b := p.elems, rule.elems
	type key struct{ i, j int }
	memo := map[key]bool{}
	var f func(i, j int) bool
	f = func(i, j int) bool {
		k := key{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		memo[k] = false // a cycle cannot succeed
		var ok bool
		switch {
		case i == len(a) && j == len(b):
			ok = true
		case i < len(a) && a[i].any:
			ok = f(i+1, j) || j < len(b) && f(i, j+1)
		case j < len(b) && b[j].any:
			ok = f(i, j+1) || i < len(a) && f(i+1, j)
		case i == len(a) || j == len(b):
			ok = false
		default:
			ok = elemsMeet(a[i], b[j]) && f(i+1, j+1)
		}
		memo[k] = ok
		return ok
	}
	return f(0, 0)
}

// elemsMeet reports whether two element patterns match a name in common.
func elemsMeet(x, y elem) bool {
	type state struct {
		i, j    int
		started bool
	}
	seen := map[state]bool{}
	var visit func(s state) bool
	visit = func(s state) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		if s.i == len(x.atoms) && s.j == len(y.atoms) {
			return true
		}
		if s.i < len(x.atoms) && x.atoms[s.i].star && visit(state{s.i + 1, s.j, s.started}) {
			return true
		}
		if s.j < len(y.atoms) && y.atoms[s.j].star && visit(state{s.i, s.j + 1, s.started}) {
			return true
		}
		if s.i == len(x.atoms) || s.j == len(y.atoms) {
			return false
		}
		xa, ya := x.atoms[s.i], y.atoms[s.j]
		common := xa.set
		for k := range common {
			common[k] &= ya.set[k]
		}
		if !s.started && (x.noDot || y.noDot) {
			common.del('.')
		}
		if common.empty() {
			return false
		}
		ni, nj := s.i+1, s.j+1
		if xa.star {
			ni = s.i
		}
		if ya.star {
			nj = s.j
		}
		return visit(state{ni, nj, true})
	}
	return visit(state{})
}
