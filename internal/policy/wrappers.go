package policy

import (
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

type optSet map[string]bool

func opts(names ...string) optSet {
	s := optSet{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

var (
	sudoValues    = opts("-u", "-g", "-C", "-D", "-p", "-r", "-t", "-T", "-U", "--user", "--group", "--close-from", "--chdir", "--prompt", "--role", "--type", "--command-timeout", "--other-user", "--host")
	doasValues    = opts("-C", "-u")
	envValues     = opts("-u", "-C", "-S", "--unset", "--chdir", "--split-string")
	niceValues    = opts("-n", "--adjustment")
	timeoutValues = opts("-s", "-k", "--signal", "--kill-after")
	timeValues    = opts("-f", "-o", "--format", "--output")
	execValues    = opts("-a")
	xargsValues   = opts("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var")
	stdbufValues  = opts("-i", "-o", "-e", "--input", "--output", "--error")
	chrootValues  = opts("--userspec", "--groups")
	ioniceValues  = opts("-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid", "--pgid", "--uid")
	watchValues   = opts("-n", "--interval", "-q", "--equexit")
	noValues      = optSet{}
)

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ash": true, "ksh": true, "mksh": true, "rbash": true}

// option is one option a wrapper was given; val is set for options that
// take a value.
type option struct {
	name string
	val  *word
}

// skipOptions consumes leading options and returns the words after them.
// A dynamic word ends the options: it may be the command itself.
func skipOptions(args []word, values optSet) (rest []word, got []option) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.dyn {
			return args[i:], got
		}
		if a.val == "--" {
			return args[i+1:], got
		}
		if len(a.val) < 2 || a.val[0] != '-' {
			return args[i:], got
		}
		if strings.HasPrefix(a.val, "--") {
			name, val, hasVal := strings.Cut(a.val, "=")
			o := option{name: name}
			switch {
			case hasVal:
				o.val = &word{val: val}
			case values[name] && i+1 < len(args):
				i++
				o.val = &args[i]
			}
			got = append(got, o)
			continue
		}
		for j := 1; j < len(a.val); j++ {
			name := "-" + a.val[j:j+1]
			o := option{name: name}
			if values[name] {
				if j+1 < len(a.val) {
					o.val = &word{val: a.val[j+1:]}
				} else if i+1 < len(args) {
					i++
					o.val = &args[i]
				}
				got = append(got, o)
				break
			}
			got = append(got, o)
		}
	}
	return nil, got
}

func hasOption(got []option, names ...string) *option {
	for i := range got {
		for _, n := range names {
			if got[i].name == n {
				return &got[i]
			}
		}
	}
	return nil
}

// skipAssignments drops leading NAME=value words (env, sudo).
func skipAssignments(ws []word) []word {
	for len(ws) > 0 && !ws[0].dyn && isAssignment(ws[0].val) {
		ws = ws[1:]
	}
	return ws
}

func isAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
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

// joinScript joins words into shell source, as eval and watch do.
func joinScript(ws []word) []inner {
	if len(ws) == 0 {
		return nil
	}
	s := word{}
	vals := make([]string, len(ws))
	for i, w := range ws {
		vals[i] = w.val
		s.dyn = s.dyn || w.dyn
	}
	s.val = strings.Join(vals, " ")
	return []inner{{script: &s}}
}

// unwrap returns what a wrapper command runs; nil when ws is not a wrapper
// or runs nothing.
func unwrap(ws []word) []inner {
	name := baseName(ws[0].val)
	args := ws[1:]
	switch name {
	case "sudo":
		rest, _ := skipOptions(args, sudoValues)
		return commandOf(skipAssignments(rest))
	case "doas":
		rest, _ := skipOptions(args, doasValues)
		return commandOf(rest)
	case "env":
		return unwrapEnv(args)
	case "nice":
		rest, _ := skipOptions(args, niceValues)
		return commandOf(rest)
	case "nohup", "builtin", "busybox":
		rest, _ := skipOptions(args, noValues)
		if name != "nohup" {
			rest = args
		}
		return commandOf(rest)
	case "setsid":
		rest, _ := skipOptions(args, noValues)
		return commandOf(rest)
	case "timeout":
		rest, _ := skipOptions(args, timeoutValues)
		if len(rest) > 0 {
			rest = rest[1:] // the duration
		}
		return commandOf(rest)
	case "time":
		rest, _ := skipOptions(args, timeValues)
		return commandOf(rest)
	case "command":
		rest, got := skipOptions(args, noValues)
		if hasOption(got, "-v", "-V") != nil {
			return nil // only prints what the name is
		}
		return commandOf(rest)
	case "exec":
		rest, _ := skipOptions(args, execValues)
		return commandOf(rest)
	case "xargs":
		rest, _ := skipOptions(args, xargsValues)
		return commandOf(rest)
	case "stdbuf":
		rest, _ := skipOptions(args, stdbufValues)
		return commandOf(rest)
	case "chroot":
		rest, _ := skipOptions(args, chrootValues)
		if len(rest) > 0 {
			rest = rest[1:] // the new root
		}
		return commandOf(rest)
	case "ionice":
		rest, _ := skipOptions(args, ioniceValues)
		return commandOf(rest)
	case "watch":
		rest, got := skipOptions(args, watchValues)
		if hasOption(got, "-x", "--exec") != nil {
			return commandOf(rest)
		}
		return joinScript(rest)
	case "eval":
		return joinScript(args)
	case "su", "runuser":
		return unwrapSu(args)
	case "find":
		return unwrapFind(args)
	}
	if shells[name] {
		if script, _ := shellScript(args); script != nil {
			return []inner{{script: script, shell: dialectOf(name)}}
		}
	}
	return nil
}

func unwrapEnv(args []word) []inner {
	rest, got := skipOptions(args, envValues)
	rest = skipAssignments(rest)
	split := hasOption(got, "-S", "--split-string")
	if split == nil || split.val == nil {
		return commandOf(rest)
	}
	// env -S splits its string into words ahead of the remaining ones.
	s := word{val: split.val.val, dyn: split.val.dyn}
	for _, w := range rest {
		s.val += " " + shellQuote(w.val)
		s.dyn = s.dyn || w.dyn
	}
	return []inner{{script: &s}}
}

func unwrapSu(args []word) []inner {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.dyn {
			continue
		}
		switch {
		case a.val == "-c" || a.val == "--command":
			if i+1 < len(args) {
				return []inner{{script: &args[i+1]}}
			}
		case strings.HasPrefix(a.val, "--command="):
			return []inner{{script: &word{val: strings.TrimPrefix(a.val, "--command=")}}}
		case a.val == "-u" && i+2 < len(args) && baseName(args[0].val) != "su":
			// runuser -u USER CMD...
			return commandOf(args[i+2:])
		}
	}
	return nil
}

// unwrapFind returns the commands of find's -exec, -execdir, -ok and -okdir
// actions, which end at ";" or "+".
func unwrapFind(args []word) []inner {
	var out []inner
	for i := 0; i < len(args); i++ {
		switch args[i].val {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(args) && args[j].val != ";" && args[j].val != "+" {
			j++
		}
		out = append(out, commandOf(args[i+1:j])...)
		i = j
	}
	return out
}

// shellScript finds the command string of "sh -c STR" and whether the shell
// reads its script from stdin (no -c and no script file, or -s).
func shellScript(args []word) (script *word, readsStdin bool) {
	hasC, hasS := false, false
	i := 0
loop:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a.dyn:
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
	return nil, len(operands) == 0 || hasS
}

// readsScriptFromStdin reports whether ws is a shell or interpreter that
// takes its program from stdin.
func readsScriptFromStdin(ws []word) bool {
	name := baseName(ws[0].val)
	if shells[name] {
		_, stdin := shellScript(ws[1:])
		return stdin
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
