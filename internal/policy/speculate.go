package policy

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file reads what text may run later, for the deny rules (see
// checker.maybe). Standard and trusted allow commands whose words come at
// run time, so without it `$(echo rm) -rf /`, `x=rm; $x -rf /`,
// `x='rm -rf /'; eval "$x"` and `x='a[$(rm -rf /)]'; echo $((x))` would pass
// their catastrophic denies:
//
//   - fold: a word whose expansions the text shows ($(echo rm), $x after
//     x=rm, ${x:-rm}, "${x[@]}" after x=(rm -rf /)) is read with those
//     values, and the command it makes is checked;
//   - quoted text that holds a command substitution ('a[$(cmd)]',
//     "\$(cmd)", a quoted here-document) is text bash may run later
//     (arithmetic, ${x@P}, eval, a file it is written to): the commands in
//     it are checked;
//   - a command name with glob characters (/bin/r?) is checked as each
//     denied name it may match.

const (
	maxVarValues = 8  // values kept per variable, and per folded word
	maxFoldings  = 16 // commands one folding makes
	maxQuoted    = 8  // substitutions read from one word
)

// vars are the static values the text assigns to each variable: x=rm,
// x=(rm -rf /), for x in a b.
type vars struct {
	scalars map[string][]string
	arrays  map[string][][]string
}

func (v *vars) addScalar(name, val string) {
	if v.scalars == nil {
		v.scalars = map[string][]string{}
	}
	if len(v.scalars[name]) < maxVarValues {
		v.scalars[name] = append(v.scalars[name], val)
	}
}

func (v *vars) addArray(name string, elems []string) {
	if v.arrays == nil {
		v.arrays = map[string][][]string{}
	}
	if len(v.arrays[name]) < maxVarValues {
		v.arrays[name] = append(v.arrays[name], elems)
	}
	if len(elems) > 0 {
		v.addScalar(name, elems[0]) // $x is the first element
	}
}

// collectVars records the static assignments under root. Where and in
// which order they happen does not matter: every value is a candidate.
// The positional parameters ($@, $1) are the words of `set -- ...` and
// the arguments of calls to the functions the text defines.
func (ck *checker) collectVars(root syntax.Node, src string) {
	funcs := map[string]bool{}
	syntax.Walk(root, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok && fd.Name != nil {
			funcs[fd.Name.Value] = true
		}
		return true
	})
	syntax.Walk(root, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) == 0 {
				return true
			}
			if first := reduceWords(n.Args[:1], src); len(first) != 1 || first[0].runtime() || first[0].val != "set" && !funcs[first[0].val] {
				return true
			}
			if ws := reduceWords(n.Args, src); len(ws) > 0 && !ws[0].runtime() {
				switch {
				case ws[0].val == "set" && len(ws) > 1 && !ws[1].runtime() && (ws[1].val == "--" || ws[1].val[0] != '-' && ws[1].val[0] != '+'):
					if ws[1].val == "--" {
						ws = ws[1:]
					}
					ck.positional(ws[1:])
				case funcs[ws[0].val]:
					ck.positional(ws[1:])
				}
			}
		case *syntax.Assign:
			if n.Name == nil || n.Naked || n.Index != nil {
				return true
			}
			if n.Array != nil {
				var elems []string
				for _, e := range n.Array.Elems {
					if e.Value == nil || e.Index != nil {
						return true
					}
					w := reduceWord(e.Value, src)
					if w.runtime() {
						return true
					}
					elems = append(elems, w.val)
				}
				ck.vars.addArray(n.Name.Value, elems)
			} else if n.Value != nil {
				w := reduceWord(n.Value, src)
				if !w.runtime() {
					ck.vars.addScalar(n.Name.Value, w.val)
				} else if texts, _, ok := ck.foldTexts(w); ok {
					for _, t := range texts { // b=$a after a=/
						ck.vars.addScalar(n.Name.Value, t)
					}
				}
			}
		case *syntax.WordIter:
			if n.Name == nil {
				return true
			}
			for _, w := range reduceWords(n.Items, src) {
				if !w.runtime() {
					ck.vars.addScalar(n.Name.Value, w.val)
				}
			}
		}
		return true
	})
}

// positional records static words as the positional parameters.
func (ck *checker) positional(ws []word) {
	var vals []string
	for _, w := range ws {
		if w.dyn {
			return
		}
		vals = append(vals, w.val) // a glob as its text: /* stays /*
	}
	ck.vars.addArray("@", vals)
	ck.vars.addArray("*", vals)
	for i, v := range vals {
		if i < 9 {
			ck.vars.addScalar(string(rune('1'+i)), v)
		}
	}
}

// foldTexts returns the values a run-time word may have, as far as the text
// shows: each of its expansions replaced by what it prints or holds. ok is
// false when an expansion is not known; split is true when a folded part
// was unquoted, so the shell splits the value into words.
func (ck *checker) foldTexts(w word) (texts []string, split, ok bool) {
	if !w.dyn || len(w.segs) == 0 {
		return nil, false, false
	}
	texts = []string{""}
	for _, sg := range w.segs {
		var opts []string
		switch {
		case !sg.dyn:
			opts = []string{sg.s}
		case sg.out != nil && !sg.proc:
			opts = []string{*sg.out}
		case sg.param != "" && sg.elems:
			for _, a := range ck.vars.arrays[sg.param] {
				opts = append(opts, strings.Join(a, " "))
			}
			split = true
		case sg.param != "":
			opts = append(opts, ck.vars.scalars[sg.param]...)
		}
		if sg.deflt != nil {
			opts = append(opts, *sg.deflt)
		}
		if len(opts) == 0 {
			return nil, false, false
		}
		split = split || sg.dyn && sg.split
		next := make([]string, 0, len(texts)*len(opts))
		for _, t := range texts {
			for _, o := range opts {
				if len(next) < maxVarValues {
					next = append(next, t+o)
				}
			}
		}
		texts = next
	}
	return texts, split, true
}

// foldings returns the commands a simple command makes once its run-time
// words are folded; nil when none is.
func (ck *checker) foldings(ws []word) [][]word {
	alts := [][]word{nil}
	changed := false
	for _, w := range ws {
		texts, split, ok := ck.foldTexts(w)
		if !ok {
			for i := range alts {
				alts[i] = append(alts[i], w)
			}
			continue
		}
		changed = true
		var next [][]word
		for _, a := range alts {
			for _, t := range texts {
				if len(next) == maxFoldings {
					break
				}
				pieces := []string{t}
				if split {
					pieces = strings.Fields(t)
				}
				na := append([]word(nil), a...)
				for _, p := range pieces {
					na = append(na, word{val: p, prefix: p})
				}
				next = append(next, na)
			}
		}
		alts = next
	}
	if !changed {
		return nil
	}
	out := alts[:0]
	for _, a := range alts {
		if len(a) > 0 {
			out = append(out, a)
		}
	}
	return out
}

// globNames returns the command with its glob name (/bin/r?) replaced by
// each name of a deny rule the glob may stand for.
func (ck *checker) globNames(ws []word) [][]word {
	w := ws[0]
	if !w.glob || w.dyn {
		return nil
	}
	pat := w.pat
	if i := strings.LastIndexByte(pat, '/'); i >= 0 {
		pat = pat[i+1:]
	}
	literal := strings.NewReplacer("*", "", "?", "", "[", "", "]", "").Replace(pat)
	var out [][]word
	for _, r := range ck.c.commands {
		if r.Effect != Deny || r.nameSlash {
			continue
		}
		name := strings.ReplaceAll(r.name.val, "*", "")
		cand := ""
		if ok, err := path.Match(pat, name); err == nil && ok && name != "" {
			cand = name
		} else if globMatch(r.name.pat, literal, false) && literal != "" {
			cand = literal
		}
		if cand != "" {
			alt := append([]word{{val: cand, prefix: cand}}, ws[1:]...)
			out = append(out, alt)
		}
	}
	return out
}

// speculate checks, against the deny rules, the commands a simple command
// may be once its run-time words have the values the text shows.
func (ck *checker) speculate(ws []word, depth int, in stdinSource, wraps int) {
	alts := ck.foldings(ws)
	alts = append(alts, ck.globNames(ws)...)
	for _, alt := range alts {
		if ck.done() {
			return
		}
		ck.maybe(func() { ck.simple(alt, depth, in, wraps+1) })
	}
}

// speculateScript checks the scripts a run-time script (bash -c "$x",
// eval "$x") may be.
func (ck *checker) speculateScript(s word, depth int, posix bool) {
	texts, _, ok := ck.foldTexts(s)
	if !ok {
		return
	}
	for _, t := range texts {
		ck.maybe(func() { ck.script(t, depth+1, posix) })
	}
}

// quotedCode checks the command substitutions in the quoted or escaped
// text of a word: bash may evaluate that text later.
func (ck *checker) quotedCode(n *syntax.Word, src string, depth int) {
	raw := nodeSource(n, src)
	if !strings.Contains(raw, "$") && !strings.Contains(raw, "`") {
		return
	}
	w := reduceWord(n, src)
	var b strings.Builder
	for _, sg := range w.segs {
		if sg.dyn {
			b.WriteString("$_") // what the shell expands now is checked where it is
		} else {
			b.WriteString(sg.s)
		}
	}
	text := b.String()
	if !strings.Contains(text, "$(") && !strings.Contains(text, "`") {
		return
	}
	for _, code := range substitutionsIn(text) {
		ck.maybe(func() { ck.script(code, depth+1, ck.posix) })
	}
}

// substitutionsIn returns the bodies of the $(...) and `...` in text,
// found by counting parentheses: enough for text that is not parsed.
func substitutionsIn(text string) []string {
	var out []string
	for i := 0; i < len(text) && len(out) < maxQuoted; i++ {
		switch {
		case strings.HasPrefix(text[i:], "$("):
			depth := 0
		scan:
			for j := i + 1; j < len(text); j++ {
				switch text[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
				if depth == 0 {
					out = append(out, text[i+2:j])
					break scan
				}
			}
		case text[i] == '`':
			if j := strings.IndexByte(text[i+1:], '`'); j >= 0 {
				out = append(out, text[i+1:i+1+j])
				i += j + 1
			}
		}
	}
	return out
}
