package patch

import (
	"strings"

	"github.com/nsys-cortex/cortex/internal/tools/textedit"
)

const bom = "\uFEFF"

// line is one line of a file being patched, with its own line ending so that
// lines a patch does not touch are written back byte for byte.
type line struct {
	text string
	eol  string // "\n", "\r\n", or "" for a last line without one or a new line
}

// file is a text file split into lines.
type file struct {
	bom     bool
	lines   []line
	eol     string // the dominant line ending, given to new lines
	finalNL bool   // the last line ends with a line ending (or the file is empty)
}

func parseFile(data []byte) *file {
	s, hasBOM := strings.CutPrefix(string(data), bom)
	f := &file{bom: hasBOM, eol: "\n", finalNL: true}
	crlf, lf := 0, 0
	for s != "" {
		text, rest, found := strings.Cut(s, "\n")
		l := line{text: text}
		if found {
			l.eol = "\n"
			if t, ok := strings.CutSuffix(text, "\r"); ok {
				l.text, l.eol = t, "\r\n"
				crlf++
			} else {
				lf++
			}
		} else {
			f.finalNL = false
		}
		f.lines = append(f.lines, l)
		s = rest
	}
	if crlf > lf {
		f.eol = "\r\n"
	}
	return f
}

func (f *file) bytes() []byte {
	var b strings.Builder
	if f.bom {
		b.WriteString(bom)
	}
	for i, l := range f.lines {
		b.WriteString(l.text)
		if i < len(f.lines)-1 || f.finalNL {
			b.WriteString(cmpOr(l.eol, f.eol))
		}
	}
	return []byte(b.String())
}

func (f *file) texts() []string {
	t := make([]string, len(f.lines))
	for i, l := range f.lines {
		t[i] = l.text
	}
	return t
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Matching levels, from strict to loose, as in Codex's seek_sequence.
const (
	exact      = iota
	rstrip     // trailing whitespace ignored
	trim       // leading and trailing whitespace ignored
	punctuated // also typographic punctuation and spaces folded to ASCII
	levels
)

func normalize(level int, s string) string {
	switch level {
	case rstrip:
		return strings.TrimRight(s, " \t\r\f\v")
	case trim:
		return strings.TrimSpace(s)
	case punctuated:
		return strings.TrimSpace(textedit.FoldPunct(s))
	}
	return s
}

// matcher finds sequences of lines in a file, computing each looser form of
// the file's lines only when a search needs it.
type matcher struct {
	forms [levels][]string
}

func newMatcher(lines []string) *matcher {
	m := &matcher{}
	m.forms[exact] = lines
	return m
}

func (m *matcher) form(level int) []string {
	if m.forms[level] == nil {
		src := m.forms[exact]
		f := make([]string, len(src))
		for i, s := range src {
			f[i] = normalize(level, s)
		}
		m.forms[level] = f
	}
	return m.forms[level]
}

// seek returns the index of the first run of lines at or after start that
// equals pat at the strictest level where one exists, or -1. With eof, a run
// ending at the last line is preferred at every level.
func (m *matcher) seek(pat []string, start int, eof bool) int {
	n := len(m.forms[exact])
	if len(pat) == 0 {
		return min(start, n)
	}
	if start+len(pat) > n {
		return -1
	}
	var want [levels][]string
	for lvl := range levels {
		want[lvl] = make([]string, len(pat))
		for i, s := range pat {
			want[lvl][i] = normalize(lvl, s)
		}
	}
	if eof {
		at := n - len(pat)
		for lvl := range levels {
			if equalAt(m.form(lvl), want[lvl], at) {
				return at
			}
		}
	}
	for lvl := range levels {
		lines := m.form(lvl)
		for at := start; at+len(pat) <= n; at++ {
			if equalAt(lines, want[lvl], at) {
				return at
			}
		}
	}
	return -1
}

func equalAt(lines, pat []string, at int) bool {
	for i, s := range pat {
		if lines[at+i] != s {
			return false
		}
	}
	return true
}
