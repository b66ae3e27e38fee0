package policy

import (
	"fmt"
	"path"
	"strings"
)

// This file checks the paths a command's words may name against the path
// rules: operands, option values (--file=F, -fF, if=F) and redirection
// targets, absolute or relative to the working directory the text leaves
// the shell in (see cwd.go), with their glob characters and run-time parts
// read as patterns (see pathpat.go).

// maxCandidates bounds the paths read from one word.
const maxCandidates = 16

// dynMark stands, in a word's text, for a part only known at run time: any
// run of characters within an element (see parseGlobElem); numberMark for
// one that is a number.
const (
	dynMark    = "\x00"
	numberMark = "\x01"
)

// numericParams are the variables bash sets to a number.
var numericParams = map[string]bool{
	"$": true, "!": true, "#": true, "?": true, "PPID": true, "BASHPID": true, "UID": true,
	"EUID": true, "RANDOM": true, "SRANDOM": true, "LINENO": true, "SECONDS": true,
}

// markEscaper keeps the marks' bytes in a word's own text literal.
var markEscaper = strings.NewReplacer(dynMark, `\`+dynMark, numberMark, `\`+numberMark)

// candidate is one path a word may name.
type candidate struct {
	pat pathPat
	// anyDir marks a relative path in a directory only known at run time:
	// pat is "**" followed by it.
	anyDir bool
}

// wordText writes a word as glob text: quoted and escaped characters
// backslashed, unquoted glob characters as they are, each run-time part as
// dynMark (numberMark for a number). param is the variable a leading
// expansion reads ("" if none).
func wordText(w word) (text, param string) {
	var b strings.Builder
	for i, sg := range w.segs {
		switch {
		case sg.dyn && numericParams[sg.param]:
			b.WriteString(numberMark)
		case sg.dyn || sg.glob:
			if i == 0 && sg.dyn && !sg.proc {
				param = sg.param
			}
			b.WriteString(dynMark)
		case sg.lit:
			b.WriteString(markEscaper.Replace(escapeGlob(sg.s)))
		default:
			b.WriteString(markEscaper.Replace(sg.s))
		}
	}
	if len(w.segs) == 0 { // made by the engine: a folded value may be globbed
		return markEscaper.Replace(w.val), ""
	}
	return b.String(), param
}

// wordPaths returns the paths a word, written as glob text, may name once
// skip bytes of that text are dropped (the "--file=" of --file=F): ~, $HOME,
// $WORKSPACE, $PWD expanded, a relative path in each directory the
// command may run in (e.cwd). A word whose start is only known at run time
// names no path the text shows.
func (e env) wordPaths(text, param string, skip int) []candidate {
	d := e.cwd
	if skip > 0 {
		param = ""
		text = text[skip:]
	}
	var base []pathPat
	anyDir := false
	rest := text
	switch {
	case param != "" && strings.HasPrefix(text, dynMark):
		rest = text[len(dynMark):]
		switch param {
		case "HOME":
			base = []pathPat{e.homeDir()}
		case "WORKSPACE":
			base = []pathPat{absDir(e.workspace)}
		case "PWD":
			base, anyDir = d.known, d.unknown
		case "OLDPWD":
			anyDir = true
		default:
			return nil // "$f": a path only known at run time
		}
	case strings.HasPrefix(text, dynMark), strings.HasPrefix(text, numberMark):
		return nil
	case strings.HasPrefix(text, "~"):
		name, after, _ := strings.Cut(text[1:], "/")
		rest = "/" + after
		switch name {
		case "":
			base = []pathPat{e.homeDir()}
		case "+":
			base, anyDir = d.known, d.unknown
		case "-":
			anyDir = true
		default:
			base = []pathPat{{elems: []elem{{any: true}}}} // another user's home: anywhere
		}
	case strings.HasPrefix(text, "/"):
		base = []pathPat{{}}
	default:
		base, anyDir = d.known, d.unknown
	}
	rel := globElems(rest, !e.dotglob)
	var out []candidate
	for _, b := range base {
		if len(out) == maxCandidates {
			break
		}
		out = append(out, candidate{pat: resolvePath(b, rel)})
	}
	if anyDir {
		out = append(out, candidate{pat: resolvePath(pathPat{elems: []elem{{any: true}}}, rel), anyDir: true})
	}
	return out
}

// absDir is a directory the request names, or anywhere when it does not.
func absDir(dir string) pathPat {
	if dir == "" {
		return pathPat{elems: []elem{{any: true}}}
	}
	return pathPat{elems: globElems(escapeGlob(dir), false)}
}

func (e env) homeDir() pathPat { return absDir(e.home) }

// globElems splits glob text into element patterns; shell marks a shell
// glob, whose wildcards do not match a leading ".".
func globElems(text string, shell bool) []elem {
	var out []elem
	for _, part := range strings.Split(text, "/") {
		switch part {
		case "":
			continue
		case "**":
			out = append(out, elem{any: true}) // globstar may be on
			continue
		}
		out = append(out, parseGlobElem(part, shell))
	}
	return out
}

// resolvePath joins a relative pattern to a directory as the kernel
// resolves it: /dev/fd is a link to /proc/self/fd, then ".." goes up.
func resolvePath(dir pathPat, rel []elem) pathPat {
	p := pathPat{rel: dir.rel, elems: append(append([]elem(nil), dir.elems...), rel...)}
	var kept []elem
	for _, e := range p.elems {
		if name, ok := e.literal(); ok && (name == "" || name == ".") {
			continue
		}
		kept = append(kept, e)
	}
	p.elems = kept
	return p.canonical().clean()
}

// operandPaths checks the words of a command that may name paths against
// the path rules, as reads: operands (cat F), option values (--file=F,
// -fF, if=F). A relative path is resolved against the directory the
// command runs in; a word only known at run time ("$f") is not read.
func (ck *checker) operandPaths(ws []word, e env, notPath int) {
	if len(ck.c.paths) == 0 {
		return
	}
	for i, w := range ws {
		if i == notPath {
			continue
		}
		text, param := wordText(w)
		prefix := w.prefix
		if !w.runtime() {
			prefix = w.val
		}
		type cut struct {
			skip    int
			cluster bool
		}
		var cuts []cut
		if !strings.HasPrefix(prefix, "-") {
			cuts = append(cuts, cut{})
		}
		if eq := strings.IndexByte(prefix, '='); eq >= 0 {
			cuts = append(cuts, cut{skip: eq + 1})
		}
		if len(prefix) > 2 && prefix[0] == '-' && prefix[1] != '-' {
			for k := 2; k < len(prefix) && k < 2+maxCandidates; k++ {
				cuts = append(cuts, cut{skip: k, cluster: true})
			}
		}
		for _, c := range cuts {
			if p, ok := plainPath(w, c.skip, e); ok {
				ck.operandPath(p, Read) // the common case, read fast
				continue
			}
			if skip := escapedOffset(text, c.skip); skip >= 0 {
				for _, cand := range e.wordPaths(text, param, skip) {
					if cand.anyDir && c.cluster {
						continue // -n5 is not a path in a directory nobody knows
					}
					ck.candidatePath(cand, Read, w.val, false)
				}
			}
		}
	}
}

// plainPath is the path a static word names from byte skip on, when that
// is one path with no glob, no ~ and no link the kernel would follow
// differently (/dev/fd) to read, in a directory the request names.
func plainPath(w word, skip int, e env) (string, bool) {
	if w.runtime() || skip > len(w.val) {
		return "", false
	}
	v := w.val[skip:]
	if v == "" || strings.ContainsAny(v, "*?[\\~\x00") || strings.Contains(v, "/dev/") || strings.Contains(v, "..") {
		return "", false
	}
	if !strings.HasPrefix(v, "/") {
		if len(e.cwd.known) != 1 || e.cwd.unknown {
			return "", false
		}
		dir, ok := e.cwd.known[0].literal()
		if !ok {
			return "", false
		}
		v = dir + "/" + v
	}
	return path.Clean(v), true
}

// escapedOffset maps an offset into a word's static start to the offset in
// its glob text, where quoted characters carry a backslash.
func escapedOffset(text string, n int) int {
	i := 0
	for k := 0; k < n; k++ {
		if i >= len(text) || strings.HasPrefix(text[i:], dynMark) || strings.HasPrefix(text[i:], numberMark) {
			return -1
		}
		if text[i] == '\\' {
			i++
		}
		i++
	}
	if i > len(text) {
		return -1
	}
	return i
}

// candidatePath records the path rules of access a that match a path a
// word may name. A path in a directory only known at run time gets the
// dynamicArgument effect instead, where a rule may match it. full records
// a path no rule matches too (redirection targets, as tools' paths are).
func (ck *checker) candidatePath(c candidate, a Access, subject string, full bool) {
	if c.pat.rel {
		return
	}
	if lit, ok := c.pat.literal(); ok && !c.anyDir {
		if full {
			ck.checkPath(lit, a)
		} else {
			ck.operandPath(lit, a)
		}
		return
	}
	for i := range ck.c.paths {
		r := &ck.c.paths[i]
		if r.Access != "" && r.Access != a || r.Effect == Allow || !ck.meetsRule(c.pat, i) {
			continue
		}
		if !c.anyDir {
			ck.add(Decision{Effect: r.Effect, Rule: r.label, Reason: r.Reason + " (a path the word may name)", Subject: c.pat.String()})
			continue
		}
		e := ck.c.dynamicArg
		if e == Allow {
			return
		}
		if r.Effect.Severity() < e.Severity() {
			e = r.Effect
		}
		ck.add(Decision{Effect: e, Rule: RuleDynamicArg + " " + string(e),
			Reason: fmt.Sprintf("a relative path in a directory only known at run time could be one %s matches (%s)", r.label, r.Reason), Subject: subject})
	}
}

// operandPath records only the rules that match: an operand no rule
// matches is not a check worth listing.
func (ck *checker) operandPath(p string, a Access) {
	clean, err := validatePath(p)
	if err != nil {
		return
	}
	for i := range ck.c.paths {
		r := &ck.c.paths[i]
		if (r.Access == "" || r.Access == a) && r.matches(clean, ck.env) {
			ck.add(Decision{Effect: r.Effect, Rule: r.label, Reason: r.Reason, Subject: clean})
		}
	}
}

// meetsRule reports whether a path pattern and path rule i have a path in
// common.
func (ck *checker) meetsRule(p pathPat, i int) bool {
	if ck.rulePats == nil {
		ck.rulePats = map[int][]pathPat{}
	}
	pats, ok := ck.rulePats[i]
	if !ok {
		for _, s := range expandBraces(expandPattern(ck.c.paths[i].Pattern, ck.env)) {
			pats = append(pats, parseGlobPattern(s))
		}
		ck.rulePats[i] = pats
	}
	for _, rp := range pats {
		if p.meets(rp) {
			return true
		}
	}
	return false
}

// commandEnv is the environment a command's words are read in (git -C DIR
// reads its operands in DIR) and the word of ws that names no path (git's
// subcommand), or 0.
func (ck *checker) commandEnv(ws []word) (env, int) {
	e := ck.env
	if baseName(ws[0].val) != "git" {
		return e, 0
	}
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		switch {
		case w.runtime():
			return e, 0
		case len(w.val) < 2 || w.val[0] != '-':
			return e, i
		case w.val == "-C" && i+1 < len(ws):
			e.cwd = ck.cd(ws[i+1], e.cwd)
			i++
		case optionValues["git"][w.val]:
			i++
		}
	}
	return e, 0
}
