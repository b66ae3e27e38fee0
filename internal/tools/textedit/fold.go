package textedit

import (
	"strings"
	"unicode/utf8"
)

// foldRune maps typographic punctuation and unusual spaces to the ASCII
// character a model most likely meant; other runes map to themselves. Every
// rune maps to exactly one rune, so a match in folded text always starts and
// ends on a rune boundary of the original.
func foldRune(r rune) rune {
	switch r {
	case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212', '\uFE58', '\uFE63', '\uFF0D':
		return '-'
	case '\u2018', '\u2019', '\u201A', '\u201B', '\u2032', '\uFF07':
		return '\''
	case '\u201C', '\u201D', '\u201E', '\u201F', '\u2033', '\uFF02':
		return '"'
	case '\u00A0', '\u2000', '\u2001', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006',
		'\u2007', '\u2008', '\u2009', '\u200A', '\u202F', '\u205F', '\u3000':
		return ' '
	}
	return r
}

// FoldPunct returns s with typographic quotes and apostrophes, dashes and
// minus signs, and non-breaking or other Unicode spaces replaced by their
// ASCII counterparts (’ → ', “ → ", — → -, NBSP → space). ASCII input is
// returned unchanged without copying.
func FoldPunct(s string) string {
	if isASCII(s) {
		return s
	}
	return strings.Map(foldRune, s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// foldMap folds s like FoldPunct and also returns, for every byte offset i of
// the folded text (and for len(folded)), the offset in s it came from, or -1
// where i is not the start of a rune. A match [a, b) in the folded text
// covers s[at[a]:at[b]] when both are non-negative.
func foldMap(s string) (string, []int) {
	var b strings.Builder
	b.Grow(len(s))
	at := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteByte(s[i])
			at = append(at, i)
			i++
			continue
		}
		f := foldRune(r)
		if f == r {
			b.WriteString(s[i : i+n])
			at = append(at, i)
			for range n - 1 {
				at = append(at, -1)
			}
		} else {
			b.WriteRune(f)
			at = append(at, i)
			for range utf8.RuneLen(f) - 1 {
				at = append(at, -1)
			}
		}
		i += n
	}
	at = append(at, len(s))
	return b.String(), at
}
