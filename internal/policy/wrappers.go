package policy

import (
	"slices"
	"strings"
)

// inner is what a wrapper command runs: another simple command, or shell
// source to parse (bash -c STR, eval ARGS, watch ARGS, env -S STR).
type inner struct {
	words  []word
	script *word
	// shell is the shell that runs script: "bash", "sh" (POSIX), or ""
	// for the current one (eval).
	shell string
	// dynamic, when set, says why the command the wrapper runs is only
	// known at run time (a word that may be find's -exec, ...).
	dynamic string
	// maybe marks a command the wrapper may run, read from text that feeds
	// it (xargs reading `echo rm -rf /`): only deny rules apply to it.
	maybe bool
	// dirs, when set, are where the command runs (env -C DIR): any of the
	// directories a cd to each would go to.
	dirs []word
	// params are $0 and the positional parameters script runs with.
	params []word
}

// posixShells read their source as POSIX sh, not bash: dash reads $'...'
// as "$" and a quoted string, so the same text holds other commands.
var posixShells = map[string]bool{"sh": true, "dash": true, "ash": true, "ksh": true, "mksh": true}

// dialectOf names the dialect a shell reads.
func dialectOf(shell string) string {
	if posixShells[shell] {
		return "sh"
	}
	return "bash"
}

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ash": true, "ksh": true, "mksh": true, "rbash": true}

// skipAssignments drops leading NAME=value words (env, sudo).
func skipAssignments(ws []word) []word {
	for len(ws) > 0 && !ws[0].runtime() && isAssignment(ws[0].val) {
		ws = ws[1:]
	}
	return ws
}

func isAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	return ok && isName(name)
}

// isName reports whether s is a shell variable name.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func commandOf(ws []word) []inner {
	if len(ws) == 0 {
		return nil
	}
	return []inner{{words: ws}}
}

// afterOperand drops the operand a wrapper reads before its command
// (timeout's duration, chroot's new root). An operand that may split into
// several words leaves the command unknown: it stays first.
func afterOperand(rest []word) []word {
	if len(rest) == 0 || rest[0].multi() {
		return rest
	}
	return rest[1:]
}

// joinScript joins words into shell source, as eval and watch do.
func joinScript(ws []word) []inner {
	if len(ws) == 0 {
		return nil
	}
	s := word{}
	vals := make([]string, len(ws))
	for i, w := range ws {
		vals[i] = w.val
		s.dyn = s.dyn || w.runtime()
		if i > 0 {
			s.segs = append(s.segs, seg{s: " "})
		}
		s.segs = append(s.segs, w.segs...)
	}
	s.val = strings.Join(vals, " ")
	return []inner{{script: &s}}
}

// unwrap returns what a wrapper command runs; nil when ws is not a wrapper
// or runs nothing. in is what feeds the command's standard input.
func unwrap(ws []word, in stdinSource) []inner {
	name := baseName(ws[0].val)
	args := ws[1:]
	switch name {
	case "sudo":
		rest, got := parseOptions(args, sudoOpts)
		in := commandOf(skipAssignments(rest))
		if d := hasOption(got, "-D", "--chdir"); d != nil && d.val != nil && len(in) > 0 {
			in[0].dirs = []word{*d.val}
		}
		return in
	case "doas":
		rest, _ := parseOptions(args, doasOpts)
		return commandOf(rest)
	case "env":
		return unwrapEnv(args)
	case "nice":
		rest, _ := parseOptions(args, niceOpts)
		return commandOf(rest)
	case "nohup":
		rest, _ := parseOptions(args, nohupOpts)
		return commandOf(rest)
	case "builtin", "busybox":
		return commandOf(args)
	case "setsid":
		rest, _ := parseOptions(args, setsidOpts)
		return commandOf(rest)
	case "timeout":
		rest, _ := parseOptions(args, timeoutOpts)
		return commandOf(afterOperand(rest))
	case "time":
		rest, _ := parseOptions(args, timeOpts)
		return commandOf(rest)
	case "command":
		rest, got := parseOptions(args, commandOpts)
		if hasOption(got, "-v", "-V") != nil {
			return nil // only prints what the name is
		}
		return commandOf(rest)
	case "exec":
		rest, _ := parseOptions(args, execOpts)
		return commandOf(rest)
	case "xargs":
		return unwrapXargs(args, in)
	case "stdbuf":
		rest, _ := parseOptions(args, stdbufOpts)
		return commandOf(rest)
	case "chroot":
		rest, _ := parseOptions(args, chrootOpts)
		return commandOf(afterOperand(rest))
	case "ionice":
		rest, _ := parseOptions(args, ioniceOpts)
		return commandOf(rest)
	case "watch":
		rest, got := parseOptions(args, watchOpts)
		if hasOption(got, "-x", "--exec") != nil {
			return commandOf(rest)
		}
		return joinScript(rest)
	case "eval":
		return joinScript(args)
	case "su", "runuser":
		return unwrapSu(name, args)
	case "find":
		return unwrapFind(args)
	case "trap":
		return unwrapTrap(args)
	case "mapfile", "readarray":
		_, got := parseOptions(args, mapfileOpts)
		return optionScript(got, "-C")
	case "source", ".":
		if len(args) > 0 && args[0].val == "--" {
			args = args[1:]
		}
		if len(args) > 0 {
			if s := scriptFile(args[0]); s != nil {
				return []inner{{script: s}}
			}
		}
		return nil
	case "compgen", "complete":
		_, got := parseOptions(args, compgenOpts)
		return optionScript(got, "-C", "-W")
	}
	if shells[name] {
		if script, _ := shellScript(args); script != nil {
			in := inner{script: script, shell: dialectOf(name)}
			for k := range args {
				if &args[k] == script { // bash -c SCRIPT NAME ARGS: $0 and $@
					in.params = args[k+1:]
				}
			}
			return []inner{in}
		}
	}
	return nil
}

var (
	mapfileOpts = newGetopt("+d:n:O:s:tu:C:c:")
	compgenOpts = newGetopt("+abcdefgjksuvo:A:G:W:F:C:X:P:S:prDEI")
)

// optionScript returns the values of the options that hold shell source
// (mapfile -C, compgen -C) as scripts, and of those that hold words the
// shell expands (compgen -W) as the words of a ":" command, which checks
// the substitutions in them.
func optionScript(got []option, names ...string) []inner {
	var out []inner
	for _, o := range got {
		if o.val == nil || !slices.Contains(names, o.name) {
			continue
		}
		s := *o.val
		if o.name == "-W" {
			s.val = ": " + s.val
		}
		out = append(out, inner{script: &s})
	}
	return out
}

// unwrapTrap returns the action of `trap ACTION SIGNAL...`, which the shell
// runs when the signal (or EXIT, ERR, DEBUG, RETURN) comes.
func unwrapTrap(args []word) []inner {
	if len(args) > 0 && args[0].val == "--" {
		args = args[1:]
	}
	if len(args) < 2 || args[0].val == "-" || args[0].val == "" || !args[0].runtime() && strings.HasPrefix(args[0].val, "-") {
		return nil // prints, or resets the signals
	}
	return []inner{{script: &args[0]}}
}

func unwrapEnv(args []word) []inner {
	ec := parseEnv(args)
	switch {
	case ec.dynamic != "":
		return []inner{{dynamic: ec.dynamic}}
	case len(ec.cmd) == 0:
		return nil // prints the environment
	}
	return []inner{{words: ec.cmd, dirs: ec.dirs}}
}

// unwrapSu finds the command su and runuser run: -c STR (in any cluster,
// attached or not), --command, --session-command, the shell -s names, and
// runuser -u USER CMD. They permute their options, so every word counts; a
// word only known at run time may be -c itself.
func unwrapSu(name string, args []word) []inner {
	var out []inner
	var operands []word
	hasU := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a.runtime():
			return append(out, inner{dynamic: "a word only known at run time may be su's -c"})
		case a.val == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
			continue
		case strings.HasPrefix(a.val, "--"):
			n, val, hasVal := strings.Cut(a.val, "=")
			canon, k, ok := suOpts.lookupLong(n)
			var v *word
			switch {
			case hasVal:
				v = &word{val: val}
			case ok && k == requiredArg && i+1 < len(args):
				i++
				v = &args[i]
			}
			if v != nil {
				out = append(out, suValue(canon, *v)...)
			}
			hasU = hasU || canon == "--user"
			continue
		case len(a.val) > 1 && a.val[0] == '-':
			for j := 1; j < len(a.val); j++ {
				if suOpts.shortKind(a.val[j]) != requiredArg {
					continue
				}
				var v *word
				if j+1 < len(a.val) {
					v = &word{val: a.val[j+1:]}
				} else if i+1 < len(args) {
					i++
					v = &args[i]
				}
				if v != nil {
					out = append(out, suValue("-"+a.val[j:j+1], *v)...)
				}
				hasU = hasU || a.val[j] == 'u'
				break
			}
			continue
		}
		operands = append(operands, a)
	}
	if name == "runuser" && hasU && len(operands) > 0 {
		out = append(out, inner{words: operands})
	}
	return out
}

// suValue is what an option of su with a value runs.
func suValue(opt string, v word) []inner {
	switch opt {
	case "-c", "--command", "--session-command":
		return []inner{{script: &v}}
	case "-s", "--shell":
		return []inner{{words: []word{v}}}
	}
	return nil
}

// shellScript finds the command string of "sh -c STR" and whether the shell
// reads its script from stdin (no -c and no script file, or -s). A word only
// known at run time where an option or the script may stand makes the
// script dynamic: it may be -c.
func shellScript(args []word) (script *word, readsStdin bool) {
	hasC, hasS := false, false
	i := 0
loop:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a.runtime():
			break loop
		case a.val == "--" || a.val == "-":
			i++
			break loop
		case a.val == "-o" || a.val == "+o" || a.val == "-O" || a.val == "+O" || a.val == "--rcfile" || a.val == "--init-file":
			i++
		case strings.HasPrefix(a.val, "--"):
		case len(a.val) > 1 && (a.val[0] == '-' || a.val[0] == '+'):
			hasC = hasC || a.val[0] == '-' && strings.ContainsRune(a.val, 'c')
			hasS = hasS || a.val[0] == '-' && strings.ContainsRune(a.val, 's')
		default:
			break loop
		}
	}
	var operands []word
	if i < len(args) {
		operands = args[i:]
	}
	if hasC {
		if len(operands) > 0 {
			return &operands[0], false
		}
		return nil, false
	}
	if len(operands) > 0 {
		if s := scriptFile(operands[0]); s != nil {
			return s, false
		}
		if isStdinPath(operands[0].val) {
			return nil, true
		}
	}
	if len(operands) > 0 && operands[0].runtime() && (operands[0].multi() || len(operands) > 1 || strings.HasPrefix(operands[0].prefix, "-")) {
		return &word{val: joinVals(operands), dyn: true}, false
	}
	return nil, len(operands) == 0 || hasS
}

// scriptFile returns the script a shell reads from a script operand that
// is a process substitution (bash <(...), source <(...)): what it prints
// when the text shows it, else a script only known at run time. nil for
// any other operand.
func scriptFile(w word) *word {
	if !w.dyn || !strings.HasPrefix(w.val, "<(") {
		return nil
	}
	if w.out != nil {
		return &word{val: *w.out}
	}
	return &word{val: w.val, dyn: true}
}

// isStdinPath reports whether a script operand names standard input.
func isStdinPath(p string) bool {
	switch p {
	case "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0":
		return true
	}
	return false
}

// stdinShell returns the dialect of a shell, or of source and ".", that
// reads the script it runs from stdin ("" for the current shell).
func stdinShell(ws []word) (dialect string, ok bool) {
	name := baseName(ws[0].val)
	switch {
	case shells[name]:
		_, stdin := shellScript(ws[1:])
		return dialectOf(name), stdin
	case name == "source" || name == ".":
		args := ws[1:]
		if len(args) > 0 && args[0].val == "--" {
			args = args[1:]
		}
		return "", len(args) > 0 && isStdinPath(args[0].val)
	}
	return "bash", runsLoginShell(name, ws[1:])
}

// runsLoginShell reports whether a command given no command to run starts
// a shell, which reads its commands from stdin: sudo -s or -i, doas -s, su
// and runuser without -c, chroot DIR.
func runsLoginShell(name string, args []word) bool {
	switch name {
	case "sudo":
		rest, got := parseOptions(args, sudoOpts)
		return len(skipAssignments(rest)) == 0 && hasOption(got, "-s", "--shell", "-i", "--login") != nil
	case "doas":
		rest, got := parseOptions(args, doasOpts)
		return len(rest) == 0 && hasOption(got, "-s") != nil
	case "su", "runuser":
		return len(unwrapSu(name, args)) == 0
	case "chroot":
		rest, _ := parseOptions(args, chrootOpts)
		return len(rest) == 1
	}
	return false
}

// readsScriptFromStdin reports whether ws is a shell or interpreter that
// takes its program from stdin.
func readsScriptFromStdin(ws []word) bool {
	name := baseName(ws[0].val)
	if _, ok := stdinShell(ws); ok || shells[name] || name == "source" || name == "." {
		return ok
	}
	if !isInterpreter(name) {
		return false
	}
	v := newView(ws)
	return len(v.operands) == 0 || v.operands[0].val == "-"
}

func isInterpreter(name string) bool {
	for _, p := range []string{"python", "perl", "ruby", "node", "php", "nodejs"} {
		if name == p || strings.HasPrefix(name, p) && strings.Trim(name[len(p):], "0123456789.") == "" {
			return true
		}
	}
	return false
}
