package textedit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Edit is one exact string replacement.
type Edit struct {
	OldString  string // text to find; must occur exactly once unless ReplaceAll
	NewString  string // text to put in its place
	ReplaceAll bool   // replace every occurrence instead of requiring one
}

// ErrorKind classifies why an edit could not be applied.
type ErrorKind int

const (
	// NoEdits: Apply was given no edits.
	NoEdits ErrorKind = iota + 1
	// EmptyOld: an edit's OldString is empty.
	EmptyOld
	// Identical: an edit's OldString and NewString are the same.
	Identical
	// NotFound: OldString does not occur in the content.
	NotFound
	// Ambiguous: OldString occurs more than once and ReplaceAll is false.
	Ambiguous
)

func (k ErrorKind) String() string {
	switch k {
	case NoEdits:
		return "no edits"
	case EmptyOld:
		return "empty old_string"
	case Identical:
		return "identical strings"
	case NotFound:
		return "not found"
	case Ambiguous:
		return "ambiguous"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is the error Apply returns; its message is meant for the model that
// wrote the edits.
type Error struct {
	Kind  ErrorKind
	Edit  int    // 1-based index of the failing edit; 0 when Apply was given one edit
	Edits int    // number of edits given to Apply
	Count int    // occurrences of OldString, for Ambiguous
	Hint  string // for NotFound: the text that nearly matched, or what to do instead
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Edit > 0 {
		fmt.Fprintf(&b, "edit %d: ", e.Edit)
	}
	switch e.Kind {
	case NoEdits:
		b.WriteString("no edits given")
	case EmptyOld:
		b.WriteString("old_string is empty; give the exact text to replace (to write a whole file, use write)")
	case Identical:
		b.WriteString("old_string and new_string are identical; nothing to change")
	case NotFound:
		b.WriteString("old_string not found in the file")
	case Ambiguous:
		fmt.Fprintf(&b, "old_string found %d times — add surrounding context to make it unique, or set replace_all to change every occurrence", e.Count)
	default:
		b.WriteString(e.Kind.String())
	}
	if e.Hint != "" {
		b.WriteString(". ")
		b.WriteString(e.Hint)
	}
	if e.Edits > 1 {
		fmt.Fprintf(&b, "\n(none of the %d edits was applied)", e.Edits)
	}
	return b.String()
}

// KindOf returns the ErrorKind of an *Error in err's chain, or 0.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

const bom = "\uFEFF"

// Apply applies edits in order to content, all or nothing: each edit sees the
// result of the ones before it, and if any fails, content is left as it was
// and the error (an *Error) names the edit. It returns the new content and the
// number of replacements made.
//
// The file's dominant line ending is kept: in a CRLF file the model's "\n"
// in OldString and NewString means "\r\n". A UTF-8 byte order mark is
// ignored while matching and kept. When OldString is not found exactly but
// matches once after folding typographic quotes, dashes and Unicode spaces to
// ASCII (see FoldPunct), the matching span of the file is replaced. A match
// that needs whitespace to be ignored is not applied; the error shows the
// text that would have matched.
func Apply(content []byte, edits []Edit) ([]byte, int, error) {
	if len(edits) == 0 {
		return nil, 0, &Error{Kind: NoEdits}
	}
	if len(edits) == 1 {
		if out, ok := applyOneExact(content, edits[0]); ok {
			return out, 1, nil
		}
	}
	s, hasBOM := strings.CutPrefix(string(content), bom)
	eol := dominantEOL(s)
	total := 0
	for i, e := range edits {
		fail := func(err *Error) ([]byte, int, error) {
			if len(edits) > 1 {
				err.Edit = i + 1
			}
			err.Edits = len(edits)
			return nil, 0, err
		}
		if e.OldString == "" {
			return fail(&Error{Kind: EmptyOld})
		}
		old, repl := withEOL(e.OldString, eol), withEOL(e.NewString, eol)
		if old == repl {
			return fail(&Error{Kind: Identical})
		}
		next, n, err := replace(s, old, repl, e.ReplaceAll)
		if err == nil && n == 0 && strings.Contains(old, "\n") {
			// A mixed file: the span may use the minority line ending.
			other := otherEOL(eol)
			next, n, err = replace(s, withEOL(e.OldString, other), withEOL(e.NewString, other), e.ReplaceAll)
		}
		if err == nil && n == 0 {
			next, n, err = replaceFolded(s, old, repl, e.ReplaceAll)
		}
		if err != nil {
			return fail(err)
		}
		if n == 0 {
			return fail(&Error{Kind: NotFound, Hint: notFoundHint(s, old)})
		}
		s, total = next, total+n
	}
	if hasBOM {
		s = bom + s
	}
	return []byte(s), total, nil
}

// applyOneExact is Apply's common case done on bytes with one copy of the
// file: one edit whose old text occurs exactly once as written. Anything
// else (no match, several, folding, errors) is left to the general path.
func applyOneExact(content []byte, e Edit) ([]byte, bool) {
	if e.OldString == "" || e.ReplaceAll {
		return nil, false
	}
	body := bytes.TrimPrefix(content, []byte(bom))
	old, repl := e.OldString, e.NewString
	if strings.Contains(old, "\n") || strings.Contains(repl, "\n") {
		// Only line breaks in the edit depend on the file's line ending.
		eol := "\n"
		if crlf := bytes.Count(body, []byte("\r\n")); crlf > bytes.Count(body, []byte("\n"))-crlf {
			eol = "\r\n"
		}
		old, repl = withEOL(old, eol), withEOL(repl, eol)
	}
	if old == repl {
		return nil, false
	}
	i := bytes.Index(content, []byte(old))
	if i < 0 || bytes.Contains(content[i+len(old):], []byte(old)) || i < len(content)-len(body) {
		return nil, false
	}
	out := make([]byte, 0, len(content)-len(old)+len(repl))
	out = append(out, content[:i]...)
	out = append(out, repl...)
	return append(out, content[i+len(old):]...), true
}

// replace replaces old in s; n is 0 when old does not occur. The common
// case — one occurrence — costs one pass over s.
func replace(s, old, repl string, all bool) (string, int, *Error) {
	i := strings.Index(s, old)
	if i < 0 {
		return s, 0, nil
	}
	rest := s[i+len(old):]
	if !strings.Contains(rest, old) {
		return s[:i] + repl + rest, 1, nil
	}
	n := 1 + strings.Count(rest, old)
	if !all {
		return s, 0, &Error{Kind: Ambiguous, Count: n}
	}
	return strings.ReplaceAll(s, old, repl), n, nil
}

// replaceFolded replaces the spans of s that equal old once both are folded
// with FoldPunct; n is 0 when there is none.
func replaceFolded(s, old, repl string, all bool) (string, int, *Error) {
	fold := FoldPunct(old)
	if isASCII(s) && fold == old {
		return s, 0, nil // folding changes neither side, so it cannot match
	}
	fs, at := foldMap(s)
	var spans [][2]int
	for from := 0; ; {
		i := strings.Index(fs[from:], fold)
		if i < 0 {
			break
		}
		a, b := from+i, from+i+len(fold)
		if at[a] >= 0 && at[b] >= 0 {
			spans = append(spans, [2]int{at[a], at[b]})
			from = b
		} else {
			from = a + 1
		}
	}
	switch {
	case len(spans) == 0:
		return s, 0, nil
	case len(spans) > 1 && !all:
		return s, 0, &Error{Kind: Ambiguous, Count: len(spans),
			Hint: "(it matched only after folding typographic quotes and dashes to ASCII)"}
	}
	var b strings.Builder
	b.Grow(len(s) + len(spans)*(len(repl)-len(old)))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp[0]])
		b.WriteString(repl)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String(), len(spans), nil
}

// dominantEOL returns "\r\n" when CRLF line endings outnumber lone LFs in s,
// else "\n".
func dominantEOL(s string) string {
	crlf := strings.Count(s, "\r\n")
	if crlf > strings.Count(s, "\n")-crlf {
		return "\r\n"
	}
	return "\n"
}

func otherEOL(eol string) string {
	if eol == "\n" {
		return "\r\n"
	}
	return "\n"
}

// withEOL rewrites every line ending in s, CRLF or LF, as eol.
func withEOL(s, eol string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	if eol == "\n" {
		return s
	}
	return strings.ReplaceAll(s, "\n", eol)
}
