package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"mvdan.cc/sh/v3/syntax"
)

// cmdRule is a compiled CommandRule.
type cmdRule struct {
	CommandRule
	label     string // `commands[3] deny "git push"`
	name      word
	nameSlash bool // the rule names a path (/usr/bin/rm), not a basename
	flags     []ruleWord
	operands  []ruleWord
}

// ruleWord is one word of a rule after the command name.
type ruleWord struct {
	word
	any      bool   // "**": any run of operands
	cluster  string // the letters of a short-flag cluster such as "-rf"
	pathLike bool   // starts with /, ~, $HOME or $WORKSPACE: compared as cleaned paths
	// key and value split a "key=/path" word (dd's of=/dev/sda) so the path
	// part is compared cleaned.
	key, value string
	// long is an unquoted long flag's name ("--output" for --output or
	// --output*): a command's flag that abbreviates it matches.
	long string
	// cache holds a path operand's pattern as last read (see alternatives).
	cache *atomic.Pointer[patternCache]
}

var (
	clusterRE = lazyRE(`^-[A-Za-z0-9]+$`)
	longRE    = lazyRE(`^--[A-Za-z0-9][-A-Za-z0-9]*\*?$`)
)

func compileCommandRule(i int, r CommandRule) (*cmdRule, error) {
	field := fmt.Sprintf("commands[%d]", i)
	if !r.Effect.Valid() {
		return nil, fieldErr(field+".effect", "invalid effect %q (want allow, ask or deny)", r.Effect)
	}
	if strings.TrimSpace(r.Match) == "" {
		return nil, fieldErr(field+".match", "empty match")
	}
	f, err := parseScript(r.Match)
	if err != nil {
		return nil, fieldErr(field+".match", "%q does not parse: %v", r.Match, err)
	}
	if len(f.Stmts) != 1 {
		return nil, fieldErr(field+".match", "%q must be one simple command", r.Match)
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(st.Redirs) > 0 || st.Background || st.Negated || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, fieldErr(field+".match", "%q must be one simple command: words only, no redirections, assignments or operators", r.Match)
	}
	c := &cmdRule{CommandRule: r, label: fmt.Sprintf("commands[%d] %s %q", i, r.Effect, r.Match)}
	for j, w := range call.Args {
		rw := reduceWord(w, r.Match)
		if _, err := path.Match(rw.pat, ""); errors.Is(err, path.ErrBadPattern) {
			return nil, fieldErr(field+".match", "word %d %q is a bad glob", j, rw.val)
		}
		if j == 0 {
			if rw.dyn || strings.HasPrefix(rw.val, "-") {
				return nil, fieldErr(field+".match", "%q: the first word must name a command", r.Match)
			}
			c.name, c.nameSlash = rw, strings.Contains(rw.val, "/")
			continue
		}
		c.add(rw)
		if rw.val == "--" {
			return nil, fieldErr(field+".match", "%q: \"--\" is not supported in rules", r.Match)
		}
	}
	if err := checkCommandExamples(field, c); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *cmdRule) add(w word) {
	rw := ruleWord{word: w}
	switch {
	case w.pat == "**":
		rw.any = true
		c.operands = append(c.operands, rw)
	case len(w.val) > 1 && w.val[0] == '-':
		if !w.quoted && clusterRE().MatchString(w.pat) {
			rw.cluster = w.val[1:]
		}
		if !w.quoted && longRE().MatchString(w.pat) {
			rw.long = strings.TrimSuffix(w.val, "*")
		}
		c.flags = append(c.flags, rw)
	default:
		rw.pathLike = isPathLike(w.val)
		rw.cache = new(atomic.Pointer[patternCache])
		if k, v, ok := strings.Cut(w.pat, "="); ok && !strings.Contains(k, "/") && isPathLike(v) {
			rw.key, rw.value = k, v
		}
		c.operands = append(c.operands, rw)
	}
}

func isPathLike(s string) bool {
	return strings.HasPrefix(s, "/") || s == "~" || strings.HasPrefix(s, "~/") ||
		hasVarPrefix(s, "$HOME") || hasVarPrefix(s, "$WORKSPACE")
}

func hasVarPrefix(s, v string) bool {
	return s == v || strings.HasPrefix(s, v+"/")
}

// env is what path-like words expand against.
type env struct {
	home, workspace string
	cwd             dirs // the working directory a command runs in
	dotglob         bool // shell globs may match a leading "."
}

func (c *cmdRule) matches(v *cmdView, e env) bool {
	if !c.matchName(v) {
		return false
	}
	for _, f := range c.flags {
		if !f.matchFlag(v) {
			return false
		}
	}
	return matchOperands(c.operands, v.operands, e)
}

func (c *cmdRule) matchName(v *cmdView) bool {
	if c.nameSlash {
		return globMatch(c.name.pat, path.Clean(v.words[0].val), true)
	}
	if c.Effect == Allow && !systemCommand(v.words[0].val) {
		return false // ./ls, tools/ls, /tmp/ls are not the ls an allow rule means
	}
	return globMatch(c.name.pat, v.name, false)
}

// systemDirs hold the programs a bare command name means, whatever PATH
// holds: only there does /usr/bin/ls count as ls for an allow rule.
var systemDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/sbin": true, "/usr/sbin": true}

// SystemPATH is the PATH a command runs with under a policy whose allow
// rules decide (Policy.SystemPath): the system's directories, which the
// neuron's user cannot write. A bare name is then one of their programs.
const SystemPATH = "/usr/bin:/bin:/usr/sbin:/sbin"

// systemCommand reports whether a command name means the program the rules
// name: a bare name, found through PATH (SystemPATH, which readonly does not
// let a command change), or a path into systemDirs. Deny and ask rules
// match any path by its basename: ./rm is as suspect as rm.
func systemCommand(name string) bool {
	if !strings.Contains(name, "/") {
		return true
	}
	return systemDirs[path.Dir(path.Clean(name))]
}

// couldMatch reports whether the rule may match the command once its words
// only known at run time have their values: a word that may be an option
// counts as any flag, a run-time operand as any operand, and one that may
// split as any number of them.
func (c *cmdRule) couldMatch(v *cmdView, e env) bool {
	if !c.matchName(v) {
		return false
	}
	for _, f := range c.flags {
		if !v.wild && !f.matchFlag(v) {
			return false
		}
	}
	if len(v.operands) > maxLooseOperands {
		return true // too many to try every way: it may
	}
	return matchLoose(c.operands, v.operands, e)
}

// maxLooseOperands bounds matchLoose, whose tries grow with the operands
// that may split.
const maxLooseOperands = 64

func matchLoose(pats []ruleWord, ws []word, e env) bool {
	switch {
	case len(pats) == 0:
		return true
	case pats[0].any:
		for k := 0; k <= len(ws); k++ {
			if matchLoose(pats[1:], ws[k:], e) {
				return true
			}
		}
		return false
	case len(ws) == 0:
		return false
	case ws[0].multi():
		return matchLoose(pats, ws[1:], e) || matchLoose(pats[1:], ws, e)
	case ws[0].runtime():
		return matchLoose(pats[1:], ws[1:], e)
	}
	return pats[0].matchOperand(ws[0], e) && matchLoose(pats[1:], ws[1:], e)
}

func (rw *ruleWord) matchFlag(v *cmdView) bool {
	aliases := flagAliases[v.name]
	if rw.cluster != "" && !singleDashLong[v.name] {
		for i := 0; i < len(rw.cluster); i++ {
			b := rw.cluster[i]
			if a, ok := aliases["-"+string(b)]; ok {
				b = a
			}
			if !v.letters[b] {
				return false
			}
		}
		return true
	}
	if a, ok := aliases[rw.val]; ok && v.letters[a] {
		return true
	}
	for _, f := range v.flags {
		if globMatch(rw.pat, f, false) {
			return true
		}
		name, _, ok := strings.Cut(f, "=")
		if ok && globMatch(rw.pat, name, false) {
			return true
		}
		if rw.long != "" && abbreviates(v.name, name, rw.long) {
			return true
		}
	}
	return false
}

// abbreviates reports whether a command's long flag may be getopt_long's
// abbreviation of long: a prefix of it that is not itself another option.
// A prefix shared with other options makes the command refuse it, so
// counting it errs on the safe side.
func abbreviates(cmd, flag, long string) bool {
	return len(flag) > 2 && strings.HasPrefix(flag, "--") && !singleDashLong[cmd] &&
		strings.HasPrefix(long, flag) && !exactLong[cmd][flag]
}

// matchOperands matches rule operands against the command's operands from
// the first one on; "**" matches any run of operands, and operands left over
// at the end are fine (a rule is a prefix).
func matchOperands(pats []ruleWord, ws []word, e env) bool {
	if len(pats) == 0 {
		return true
	}
	if pats[0].any {
		for k := 0; k <= len(ws); k++ {
			if matchOperands(pats[1:], ws[k:], e) {
				return true
			}
		}
		return false
	}
	return len(ws) > 0 && pats[0].matchOperand(ws[0], e) && matchOperands(pats[1:], ws[1:], e)
}

func (rw *ruleWord) matchOperand(w word, e env) bool {
	switch {
	case rw.pathLike:
		return rw.matchPath(rw.pat, w, 0, e)
	case rw.key != "":
		k, _, ok := strings.Cut(w.val, "=")
		return ok && globMatch(rw.key, k, false) && rw.matchPath(rw.value, w, len(k)+1, e)
	default:
		return globMatch(rw.pat, w.val, false)
	}
}

// matchPath reports whether a command word, from byte skip of its static
// start, may name a path the rule's path pattern matches: ~, $HOME and
// $WORKSPACE expanded, a relative path resolved against the working
// directory, ".." applied, a glob or a run-time part read as the paths it
// may stand for, and {a,b} in the rule read as either.
func (rw *ruleWord) matchPath(pattern string, w word, skip int, e env) bool {
	pattern = normalizePath(pattern, e, true)
	if !strings.HasPrefix(pattern, "/") { // ~ with no home known: as text
		return skip == 0 && globMatch(pattern, normalizePath(w.val, e, false), true)
	}
	alts := rw.alternatives(pattern)
	if v := w.val[min(skip, len(w.val)):]; !w.runtime() && (strings.HasPrefix(v, "/") || v == "~" || strings.HasPrefix(v, "~/")) && !strings.HasPrefix(v, "/dev/") {
		p := normalizePath(v, e, false) // an absolute path as it is: the common case, read fast
		return slices.ContainsFunc(alts, func(a parsedPattern) bool { return globMatch(a.text, p, true) })
	}
	text, param := wordText(w)
	if skip = escapedOffset(text, skip); skip < 0 {
		return false
	}
	cands := e.wordPaths(text, param, skip)
	for _, a := range alts {
		alt, rp := a.text, a.pat
		for _, c := range cands {
			if c.anyDir || c.pat.rel {
				continue
			}
			if lit, ok := c.pat.literal(); ok {
				if globMatch(alt, lit, true) {
					return true
				}
				continue
			}
			if c.pat.meets(rp) {
				return true
			}
		}
	}
	return false
}

// parsedPattern is one {a,b} alternative of a rule's path pattern.
type parsedPattern struct {
	text string
	pat  pathPat
}

// patternCache is a rule word's path pattern, read for one home and
// workspace.
type patternCache struct {
	pattern string
	alts    []parsedPattern
}

// alternatives returns the {a,b} alternatives of a normalized pattern,
// read once for each home and workspace.
func (rw *ruleWord) alternatives(pattern string) []parsedPattern {
	if c := rw.cache.Load(); c != nil && c.pattern == pattern {
		return c.alts
	}
	c := &patternCache{pattern: pattern}
	for _, alt := range expandBraces(pattern) {
		c.alts = append(c.alts, parsedPattern{alt, parseGlobPattern(alt)})
	}
	rw.cache.Store(c)
	return c.alts
}

// normalizePath expands a leading ~, $HOME and $WORKSPACE and cleans an
// absolute result. For a pattern the expansion is glob-escaped.
func normalizePath(s string, e env, isPattern bool) string {
	quote := func(x string) string {
		if isPattern {
			return escapeGlob(x)
		}
		return x
	}
	switch {
	case hasVarPrefix(s, "$HOME"):
		s = "~" + s[len("$HOME"):]
	case hasVarPrefix(s, "$WORKSPACE") && e.workspace != "":
		s = quote(e.workspace) + s[len("$WORKSPACE"):]
	}
	if (s == "~" || strings.HasPrefix(s, "~/")) && e.home != "" {
		s = quote(e.home) + s[1:]
	}
	if strings.HasPrefix(s, "/") {
		s = path.Clean(s)
	}
	return s
}

// globMatch is path.Match; unless pathSemantics is set, "*" and "?" also
// match "/" since a rule word is any word text, not a path.
func globMatch(pattern, s string, pathSemantics bool) bool {
	if !pathSemantics && (strings.Contains(s, "/") || strings.Contains(pattern, "/")) {
		pattern = strings.ReplaceAll(pattern, "/", "\x00")
		s = strings.ReplaceAll(s, "/", "\x00")
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// checkCommandExamples runs a rule alone over its examples: each Match entry
// must contain a simple command the rule matches, no NoMatch entry may.
func checkCommandExamples(field string, c *cmdRule) error {
	if c.Examples == nil {
		return nil
	}
	probe := &compiled{
		commands:       []*cmdRule{c},
		commandDefault: Allow, elevation: Allow, writeRedirects: Allow,
		pipeToShell: Allow, forkBomb: Allow, dynamicCommand: Allow, dynamicArg: Allow, runtimeEval: Allow, envAssignment: Allow,
	}
	matches := func(src string) (bool, error) {
		ck := &checker{c: probe, env: env{home: ExampleHome, workspace: ExampleWorkspace}}
		ck.script(src, 0, false)
		hit := false
		for _, d := range ck.checks {
			if d.Rule == RuleParseError || d.Rule == RuleNestingLimit {
				return false, errors.New(d.Reason)
			}
			hit = hit || d.Rule == c.label
		}
		return hit, nil
	}
	for j, ex := range c.Examples.Match {
		ok, err := matches(ex)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.examples.match[%d]", field, j), "%q: %v", ex, err)
		}
		if !ok {
			return fieldErr(fmt.Sprintf("%s.examples.match[%d]", field, j), "%q does not match %q", ex, c.Match)
		}
	}
	for j, ex := range c.Examples.NoMatch {
		ok, err := matches(ex)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s.examples.noMatch[%d]", field, j), "%q: %v", ex, err)
		}
		if ok {
			return fieldErr(fmt.Sprintf("%s.examples.noMatch[%d]", field, j), "%q matches %q", ex, c.Match)
		}
	}
	return nil
}

// lazyRE compiles expr on first use: compiled at init, the policy's
// expressions cost every command's start, `nsys-cortex version` included.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
