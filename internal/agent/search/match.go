package search

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// lineMatcher finds the lines that match a pattern. Running a Go regexp on
// every line is slow, so it first looks for a literal every match must hold
// (with bytes.Index, which is vectorised), and runs the regexp only on the
// lines where that literal occurs; when the pattern is just the literal,
// not even there.
type lineMatcher struct {
	re    *regexp.Regexp
	lit   []byte // required literal; nil when the pattern has none
	fold  bool   // lit is lower-case ASCII, compared without regard to case
	exact bool   // a line holding lit is a match
}

func newLineMatcher(pattern string, literal, ignoreCase bool) (*lineMatcher, error) {
	expr := pattern
	if literal {
		expr = regexp.QuoteMeta(pattern)
	}
	if ignoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "search: pattern %q is not a valid RE2 regular expression: %v", pattern, err)
	}
	m := &lineMatcher{re: re}
	parsed, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return m, nil // compiled above, so this does not happen; search without a literal
	}
	lit, fold, exact := requiredLiteral(parsed.Simplify())
	if fold {
		// Only letters whose every case is ASCII can be found with an
		// ASCII comparison ((?i)k also matches the Kelvin sign).
		lit, exact = longestASCIIFoldRun(lit, exact)
	}
	if len(lit) == 0 {
		return m, nil
	}
	for _, r := range lit {
		if r == '\n' || r == '\r' {
			return m, nil // lines hold neither; leave it to the regexp
		}
	}
	m.lit = []byte(string(lit))
	m.fold, m.exact = fold, exact
	if fold {
		m.lit = bytes.ToLower(m.lit)
	}
	return m, nil
}

// requiredLiteral returns a literal string that every match of re contains
// (the longest it finds cheaply), whether it is compared case-insensitively,
// and whether matching it is all re does.
func requiredLiteral(re *syntax.Regexp) (lit []rune, fold, exact bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return re.Rune, re.Flags&syntax.FoldCase != 0, true
	case syntax.OpCapture:
		return requiredLiteral(re.Sub[0])
	case syntax.OpPlus:
		lit, fold, _ = requiredLiteral(re.Sub[0])
		return lit, fold, false
	case syntax.OpRepeat:
		if re.Min >= 1 {
			lit, fold, _ = requiredLiteral(re.Sub[0])
			return lit, fold, false
		}
	case syntax.OpConcat:
		// Adjacent literals join ("a(b)c"); the longest run wins.
		var run []rune
		var runFold bool
		best, bestFold := []rune(nil), false
		allExact := true
		flush := func() {
			if len(run) > len(best) {
				best, bestFold = run, runFold
			}
			run = nil
		}
		for _, sub := range re.Sub {
			l, f, e := requiredLiteral(sub)
			switch {
			case e && (len(run) == 0 || f == runFold):
				run, runFold = append(run, l...), f
			case e:
				flush()
				run, runFold = append([]rune(nil), l...), f
				allExact = false
			default:
				flush()
				if len(l) > len(best) {
					best, bestFold = l, f
				}
				allExact = false
			}
		}
		flush()
		return best, bestFold, allExact && len(best) > 0
	}
	return nil, false, false
}

// longestASCIIFoldRun returns the longest run of lit whose runes and all
// their case variants are ASCII.
func longestASCIIFoldRun(lit []rune, exact bool) ([]rune, bool) {
	start, bs, be := 0, 0, 0
	for i := 0; i <= len(lit); i++ {
		if i < len(lit) && asciiFold(lit[i]) {
			continue
		}
		if i-start > be-bs {
			bs, be = start, i
		}
		start = i + 1
	}
	return lit[bs:be], exact && bs == 0 && be == len(lit)
}

func asciiFold(r rune) bool {
	if r >= utf8.RuneSelf {
		return false
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// next returns the bounds [start, end) of the first matching line that
// starts at or after pos (end excludes the newline).
func (m *lineMatcher) next(data []byte, pos int) (start, end int, ok bool) {
	if len(data) == 0 {
		return 0, 0, false // no lines at all
	}
	for pos <= len(data) {
		if m.lit == nil {
			start = pos
			end = lineEnd(data, pos)
		} else {
			i := m.index(data[pos:])
			if i < 0 {
				return 0, 0, false
			}
			i += pos
			start = bytes.LastIndexByte(data[:i], '\n') + 1
			end = lineEnd(data, i)
			if m.exact {
				return start, end, true
			}
		}
		if m.re.Match(trimCR(data[start:end])) {
			return start, end, true
		}
		pos = end + 1
		if m.lit == nil && pos >= len(data) {
			break // the last line was just tried; no empty line follows the final newline
		}
	}
	return 0, 0, false
}

func (m *lineMatcher) index(data []byte) int {
	if !m.fold {
		return bytes.Index(data, m.lit)
	}
	return indexFoldASCII(data, m.lit)
}

// indexFoldASCII finds lower (lower-case ASCII) in data regardless of case.
func indexFoldASCII(data, lower []byte) int {
	c, n := lower[0], len(lower)
	u := c
	if 'a' <= c && c <= 'z' {
		u = c - 'a' + 'A'
	}
	// The next offsets of each case of the first byte, found lazily:
	// -2 not yet looked for, -1 none left.
	nl, nu := -2, -2
	if u == c {
		nu = -1
	}
	for off := 0; off+n <= len(data); {
		if nl != -1 && nl < off {
			nl = indexByteFrom(data, off, c)
		}
		if nu != -1 && nu < off {
			nu = indexByteFrom(data, off, u)
		}
		i := nl
		if i < 0 || (nu >= 0 && nu < i) {
			i = nu
		}
		if i < 0 || i+n > len(data) {
			return -1
		}
		if equalFoldASCII(data[i+1:i+n], lower[1:]) {
			return i
		}
		off = i + 1
	}
	return -1
}

func indexByteFrom(data []byte, off int, c byte) int {
	if i := bytes.IndexByte(data[off:], c); i >= 0 {
		return off + i
	}
	return -1
}

func equalFoldASCII(s, lower []byte) bool {
	for i, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func lineEnd(data []byte, pos int) int {
	if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
		return pos + i
	}
	return len(data)
}

func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}

// fileScan is what one file yields.
type fileScan struct {
	matches []protocol.SearchMatch
	count   int  // matching lines (count mode); matches found (content mode)
	any     bool // at least one match
}

// scanner turns a file's bytes into results for one mode.
type scanner struct {
	m         *lineMatcher
	mode      string
	context   int
	limit     int // matching lines wanted from one file at most
	lineChars int
}

func (s *scanner) scan(data []byte, path string, out *fileScan) {
	switch s.mode {
	case protocol.SearchModeFiles:
		_, _, out.any = s.m.next(data, 0)
	case protocol.SearchModeCount:
		for pos := 0; ; {
			_, end, ok := s.m.next(data, pos)
			if !ok {
				break
			}
			out.count++
			pos = end + 1
		}
		out.any = out.count > 0
	default:
		s.content(data, path, out)
	}
}

// content collects matching lines with their context. A cursor (line
// number and offset of the first line not yet emitted) only moves forward;
// before-context is found by looking back from a match, bounded by it.
func (s *scanner) content(data []byte, path string, out *fileScan) {
	curLine, curPos := 1, 0 // first line not yet emitted or passed
	lastMatch := -1 << 30   // line of the previous match
	for pos := 0; out.count < s.limit; {
		start, end, ok := s.m.next(data, pos)
		if !ok {
			break
		}
		line := curLine + bytes.Count(data[curPos:start], nl)
		// After-context of the previous match.
		for curLine < line && curLine <= lastMatch+s.context {
			e := lineEnd(data, curPos)
			s.emit(out, path, curLine, data[curPos:e], true)
			curLine, curPos = curLine+1, e+1
		}
		// Before-context of this one.
		if from := max(curLine, line-s.context); from < line {
			p := start
			for k := from; k < line; k++ {
				p = bytes.LastIndexByte(data[:p-1], '\n') + 1
			}
			for k := from; k < line; k++ {
				e := lineEnd(data, p)
				s.emit(out, path, k, data[p:e], true)
				p = e + 1
			}
		}
		s.emit(out, path, line, data[start:end], false)
		out.count++
		lastMatch = line
		curLine, curPos = line+1, end+1
		pos = end + 1
	}
	for k := 0; out.count > 0 && k < s.context && curPos < len(data); k++ {
		e := lineEnd(data, curPos)
		s.emit(out, path, curLine, data[curPos:e], true)
		curLine, curPos = curLine+1, e+1
	}
	out.any = out.count > 0
}

var nl = []byte{'\n'}

func (s *scanner) emit(out *fileScan, path string, line int, text []byte, context bool) {
	out.matches = append(out.matches, protocol.SearchMatch{Path: path, Line: line, Text: cutLine(trimCR(text), s.lineChars), Context: context})
}

// cutLine returns text as a string of at most chars runes, ending in "…" when cut.
func cutLine(text []byte, chars int) string {
	if len(text) <= chars {
		return string(text)
	}
	n, i := 0, 0
	for i < len(text) && n < chars {
		_, size := utf8.DecodeRune(text[i:])
		i += size
		n++
	}
	if i == len(text) {
		return string(text)
	}
	return string(text[:i]) + "…"
}
