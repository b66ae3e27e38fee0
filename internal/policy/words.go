package policy

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// maxBraceWords caps the words one brace expansion may produce; a larger
// expansion makes the word dynamic instead of allocating without bound.
const maxBraceWords = 256

var (
	parsers      = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}
	posixParsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX)) }}
)

func parseScript(src string) (*syntax.File, error) { return parseAs(src, false) }

// parseAs parses src as bash, or as a POSIX shell (dash, busybox sh).
func parseAs(src string, posix bool) (*syntax.File, error) {
	pool := &parsers
	if posix {
		pool = &posixParsers
	}
	p := pool.Get().(*syntax.Parser)
	defer pool.Put(p)
	return p.Parse(strings.NewReader(src), "")
}

// word is one shell word reduced to what the command will see, as far as it
// can be known from the text.
type word struct {
	// val is the static value; for a dynamic word it is the text with each
	// expansion written as a placeholder ("$HOME", "$(id -u)").
	val string
	// dyn is true when the word has an expansion whose value is only known
	// when the command runs.
	dyn bool
	// pat is val as a path.Match pattern, where quoted and escaped
	// characters are literal. Only rule words use it.
	pat string
	// quoted is true when any part of the word was quoted or escaped.
	quoted bool
	// prefix is the static text the word starts with, before the first
	// part only known at run time (an expansion, or a glob character the
	// shell expands to file names). It tells whether the word can be an
	// option: "./$f" cannot, "$f" and "-$x" can.
	prefix string
	// split is true when an unquoted expansion may split the word into
	// several, or none: each of them can be anything.
	split bool
	// glob is true when unquoted glob characters make the shell replace the
	// word with the file names it matches, any number of them.
	glob bool
	// out is, for a word that is one command or process substitution, what
	// it prints when its text shows it ($(echo rm), <(printf x)).
	out *string
	// segs are the word's runs of text, for folding what is known of its
	// expansions (see fold).
	segs []seg
}

// multi reports whether the word may become several words, or none.
func (w word) multi() bool { return w.split || w.glob }

// runtime reports whether the value is only known when the command runs.
func (w word) runtime() bool { return w.dyn || w.glob }

// optionLike reports whether the word may be an option when the command
// reads it: its known start begins with "-" or is empty, or splitting may
// make a later piece of it one.
func (w word) optionLike() bool {
	if !w.runtime() {
		return len(w.val) > 1 && w.val[0] == '-'
	}
	return w.split || w.prefix == "" || w.prefix[0] == '-'
}

// seg is a run of a word's text.
type seg struct {
	s     string
	lit   bool // quoted or escaped: glob characters in it are literal
	dyn   bool // an expansion: s is its placeholder
	split bool // an unquoted expansion, which the shell splits into words
	glob  bool // an extended glob: @(...), +(...)
	// out is what a command or process substitution prints, when its
	// text shows it.
	out *string
	// param names the variable of $x, ${x}, ${x:-w}, ${x[@]}; deflt is
	// the static w of ${x:-w} and ${x:=w}; elems marks ${x[@]}, ${x[*]}.
	param string
	deflt *string
	elems bool
	proc  bool // a process substitution: it expands to a file name, not to out
}

func reduceWord(w *syntax.Word, src string) word {
	segs := segments(w.Parts, src, false, nil)
	var val, pat, probe strings.Builder
	out := word{}
	for _, s := range segs {
		val.WriteString(s.s)
		switch {
		case s.proc:
			pat.WriteString(escapeGlob(s.s))
			probe.WriteString("/dev/fd/\x00") // what <(...) expands to: never an option
		case s.dyn:
			pat.WriteString(escapeGlob(s.s))
			probe.WriteByte(0)
		case s.glob:
			pat.WriteString(s.s)
			probe.WriteByte('*')
		case s.lit:
			pat.WriteString(escapeGlob(s.s))
			probe.WriteString(escapeGlob(s.s))
		default:
			pat.WriteString(s.s)
			probe.WriteString(s.s)
		}
		out.dyn = out.dyn || s.dyn
		out.quoted = out.quoted || s.lit
		out.split = out.split || s.split
	}
	out.val, out.pat = val.String(), pat.String()
	out.prefix, out.glob = staticPrefix(probe.String())
	if len(segs) == 1 {
		out.out = segs[0].out
	}
	out.segs = segs
	return out
}

// staticPrefix reads a word's pattern in which each expansion is a NUL: it
// returns the literal text before the first expansion or glob character,
// and whether the word has unquoted glob characters.
func staticPrefix(probe string) (prefix string, glob bool) {
	var b strings.Builder
	cut := -1
	for i := 0; i < len(probe); i++ {
		c := probe[i]
		switch {
		case c == '\\' && i+1 < len(probe):
			i++
			if cut < 0 {
				b.WriteByte(probe[i])
			}
			continue
		case c == '*' || c == '?' || c == '[' && strings.Contains(probe[i+1:], "]"):
			glob = true
			if cut < 0 {
				cut = i
			}
		case c == 0:
			if cut < 0 {
				cut = i
			}
		}
		if cut < 0 {
			b.WriteByte(c)
		}
	}
	return b.String(), glob
}

// reduceWords reduces a command's words, performing brace expansion, which
// turns one word into several ("{rm,-rf,/}" is three words).
func reduceWords(ws []*syntax.Word, src string) []word {
	out := make([]word, 0, len(ws))
	for _, w := range ws {
		cp := *w
		if !syntax.SplitBraces(&cp) {
			out = append(out, reduceWord(w, src))
			continue
		}
		var expanded []word
		tooMany := false
		for bw, err := range expand.BracesSeq(nil, &cp) {
			if err != nil || len(expanded) == maxBraceWords {
				tooMany = true
				break
			}
			expanded = append(expanded, reduceWord(bw, src))
		}
		if tooMany {
			out = append(out, word{val: nodeSource(w, src), dyn: true, split: true})
			continue
		}
		out = append(out, expanded...)
	}
	return out
}

func segments(parts []syntax.WordPart, src string, inDbl bool, out []seg) []seg {
	for _, part := range parts {
		switch p := part.(type) {
		case *syntax.Lit:
			out = literalSegments(p.Value, inDbl, out)
		case *syntax.SglQuoted:
			v := p.Value
			if p.Dollar {
				v = ansiC(v)
			}
			out = append(out, seg{s: v, lit: true})
		case *syntax.DblQuoted:
			out = segments(p.Parts, src, true, out)
		case *syntax.ParamExp:
			sg := seg{s: paramPlaceholder(p, src), dyn: true, split: !inDbl}
			sg.param, sg.deflt, sg.elems = paramFold(p, src)
			out = append(out, sg)
		case *syntax.CmdSubst:
			o := substOutput(p.Stmts, src)
			if o != nil {
				t := strings.TrimRight(*o, "\n") // as $( ) does
				o = &t
			}
			out = append(out, seg{s: nodeSource(p, src), dyn: true, split: !inDbl, out: o})
		case *syntax.ProcSubst:
			out = append(out, seg{s: nodeSource(p, src), dyn: true, out: substOutput(p.Stmts, src), proc: true})
		case *syntax.ArithmExp:
			out = append(out, seg{s: nodeSource(p, src), dyn: true})
		case *syntax.ExtGlob:
			out = append(out, seg{s: p.Op.String() + p.Pattern.Value + ")", glob: true})
		default: // BraceExp is expanded before; anything new is unknown text.
			out = append(out, seg{s: nodeSource(p, src), dyn: true, split: true})
		}
	}
	return out
}

// substOutput is what the statements of a substitution print, when every
// one of them shows it.
func substOutput(sts []*syntax.Stmt, src string) *string {
	var b strings.Builder
	for _, st := range sts {
		o, ok := staticOutput(st, src)
		if !ok {
			return nil
		}
		b.WriteString(o)
	}
	s := b.String()
	return &s
}

// literalSegments removes the shell's backslash escapes from a literal.
// Outside double quotes a backslash makes any character literal; inside,
// only $ ` " \ and newline.
func literalSegments(v string, inDbl bool, out []seg) []seg {
	if !strings.Contains(v, `\`) {
		return append(out, seg{s: v, lit: inDbl})
	}
	var plain strings.Builder
	flush := func() {
		if plain.Len() > 0 {
			out = append(out, seg{s: plain.String(), lit: inDbl})
			plain.Reset()
		}
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i+1 == len(v) {
			plain.WriteByte(c)
			continue
		}
		next := v[i+1]
		switch {
		case next == '\n':
			i++ // line continuation
		case !inDbl || strings.IndexByte("$`\"\\", next) >= 0:
			flush()
			_, size := utf8.DecodeRuneInString(v[i+1:])
			out = append(out, seg{s: v[i+1 : i+1+size], lit: true})
			i += size
		default:
			plain.WriteByte(c)
		}
	}
	flush()
	return out
}

// paramFold returns what fold needs to know of a parameter expansion: the
// variable it reads ("" when it does more than read one), a static
// default, and whether it is all elements of an array.
func paramFold(p *syntax.ParamExp, src string) (name string, deflt *string, elems bool) {
	if p.Param == nil || p.Excl || p.Length || p.Slice != nil || p.Repl != nil || p.Names != 0 ||
		p.Width || p.Flags != nil || p.NestedParam != nil || len(p.Modifiers) > 0 {
		return "", nil, false
	}
	if p.Index != nil {
		if !allElements(p.Index) {
			return "", nil, false
		}
		elems = true
	}
	if p.Exp != nil {
		switch p.Exp.Op {
		case syntax.DefaultUnset, syntax.DefaultUnsetOrNull, syntax.AssignUnset, syntax.AssignUnsetOrNull:
		default:
			return "", nil, false
		}
		if p.Exp.Word != nil {
			w := reduceWord(p.Exp.Word, src)
			if w.runtime() {
				return "", nil, false
			}
			deflt = &w.val
		} else {
			empty := ""
			deflt = &empty
		}
	}
	if p.Param.Value == "@" || p.Param.Value == "*" {
		elems = true // the positional parameters
	}
	return p.Param.Value, deflt, elems
}

func paramPlaceholder(p *syntax.ParamExp, src string) string {
	if p.Param != nil && p.Exp == nil && p.Slice == nil && p.Repl == nil && p.Index == nil &&
		!p.Length && !p.Excl && !p.Width && p.NestedParam == nil && p.Flags == nil &&
		len(p.Modifiers) == 0 && p.Names == 0 {
		return "$" + p.Param.Value
	}
	return nodeSource(p, src)
}

// nodeSource returns the text of n in src, or its printed form when its
// positions do not point into src.
func nodeSource(n syntax.Node, src string) string {
	start, end := n.Pos(), n.End()
	if start.IsValid() && end.IsValid() {
		s, e := int(start.Offset()), int(end.Offset())
		if s >= 0 && s <= e && e <= len(src) {
			return src[s:e]
		}
	}
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, n); err != nil {
		return "?"
	}
	return b.String()
}

func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ansiC decodes the body of a $'...' string.
func ansiC(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e', 'E':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\', '\'', '"', '?':
			b.WriteByte(c)
		case 'c':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i] & 0x1f)
			}
		case 'x', 'u', 'U':
			max := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			j := i + 1
			for j < len(s) && j-i-1 < max && isHex(s[j]) {
				j++
			}
			if j == i+1 {
				b.WriteByte('\\')
				b.WriteByte(c)
				continue
			}
			n, _ := strconv.ParseUint(s[i+1:j], 16, 32) // digits checked above
			if c == 'x' {
				b.WriteByte(byte(n))
			} else {
				b.WriteRune(rune(n))
			}
			i = j - 1
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j-i < 3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 16) // digits checked above
			b.WriteByte(byte(n))
			i = j - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// shellQuote quotes s so that the shell reads it back as one word.
func shellQuote(s string) string {
	q, err := syntax.Quote(s, syntax.LangBash)
	if err != nil {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return q
}
