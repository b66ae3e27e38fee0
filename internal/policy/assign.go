package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file checks assignments to variables. Many variables make programs
// run commands or load code: PATH and its relatives choose the programs,
// GIT_PAGER, GIT_EXTERNAL_DIFF, GIT_CONFIG_* make git run a command,
// LD_PRELOAD loads a library, BASH_ENV a script. Under envAssignment only a
// small set of environment variables, and shell variables (any name with a
// lower-case letter), may be set, in any of the ways bash sets one: NAME=x
// before or as a command, export and declare, env NAME=x, for NAME in,
// read NAME, ${NAME:=x}, {NAME}>file, coproc NAME, xargs
// --process-slot-var=NAME. Whatever the policy, the value of a variable
// that holds a command line is checked against the deny rules.

const whyEnv = "sets an environment variable that can make programs run or load other code (PATH, GIT_*, LD_*, PAGER, ...)"

// safeEnv are the upper-case variables any policy may set: locale, time
// zone and terminal size, which no program reads as code.
var safeEnv = map[string]bool{"LANG": true, "LANGUAGE": true, "TZ": true, "COLUMNS": true, "LINES": true, "NO_COLOR": true}

// safeName reports whether setting the variable name is harmless: a shell
// variable (a name with a lower-case letter, which no program reads for
// its configuration), or one of safeEnv and LC_*.
func safeName(name string) bool {
	return safeEnv[name] || strings.HasPrefix(name, "LC_") || strings.ToUpper(name) != name
}

// commandVars hold a command line that programs run (with sh -c, mostly).
var commandVars = map[string]bool{
	"PAGER": true, "MANPAGER": true, "GIT_PAGER": true, "EDITOR": true, "VISUAL": true,
	"GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true, "SUDO_EDITOR": true, "FCEDIT": true,
	"BROWSER": true, "GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_ASKPASS": true,
	"SSH_ASKPASS": true, "GIT_EXTERNAL_DIFF": true, "GIT_PROXY_COMMAND": true,
	"LESSOPEN": true, "LESSCLOSE": true, "PROMPT_COMMAND": true,
}

var (
	gitConfigValueRE = lazyRE(`^GIT_CONFIG_VALUE_[0-9]+$`)
	gitParameterRE   = lazyRE(`'((?:[^']|'\\'')*)'='((?:[^']|'\\'')*)'`)
)

// assignment checks one assignment of value (nil when unknown or none)
// to name.
func (ck *checker) assignment(name string, value *word, subject string, depth int) {
	if ck.c.envAssignment != Allow && !safeName(name) {
		e := ck.c.envAssignment
		ck.add(Decision{Effect: e, Rule: RuleEnvAssignment + " " + string(e), Reason: whyEnv, Subject: subject})
	}
	if value != nil {
		for _, cmd := range commandsIn(name, value.val) {
			ck.maybe(func() { ck.script(cmd, depth+1, true) })
		}
	}
}

// commandsIn returns the command lines a variable's value holds: the whole
// value of commandVars (less's "|" prefix dropped), and every value of
// GIT_CONFIG_VALUE_N and GIT_CONFIG_PARAMETERS, which may be core.pager,
// an alias "!cmd" and the like.
func commandsIn(name, value string) []string {
	switch {
	case commandVars[name]:
		return []string{strings.TrimLeft(value, "|-")}
	case gitConfigValueRE().MatchString(name):
		return []string{gitConfigCommand(value)}
	case name == "GIT_CONFIG_PARAMETERS":
		var out []string
		for _, m := range gitParameterRE().FindAllStringSubmatch(value, -1) {
			out = append(out, gitConfigCommand(strings.ReplaceAll(m[2], `'\''`, "'")))
		}
		return out
	}
	return nil
}

// gitConfigCommand is a git configuration value as the command it may be
// (an alias "!cmd" runs cmd).
func gitConfigCommand(v string) string { return strings.TrimPrefix(v, "!") }

// assignNode checks the assignments of one node of the syntax tree.
func (ck *checker) assignNode(n syntax.Node, src string, depth int) {
	switch n := n.(type) {
	case *syntax.Assign:
		if n.Name == nil {
			if n.Naked && n.Value != nil { // export 'NAME=x', as text
				if w := reduceWord(n.Value, src); !w.runtime() && isAssignment(w.val) {
					name, val, _ := strings.Cut(w.val, "=")
					ck.assignment(name, &word{val: val}, w.val, depth)
				}
			}
			return
		}
		if n.Naked {
			return // export NAME: marks it, sets nothing
		}
		var value *word
		if n.Value != nil {
			w := reduceWord(n.Value, src)
			value = &w
		}
		ck.assignment(n.Name.Value, value, nodeSource(n, src), depth)
	case *syntax.WordIter:
		if n.Name != nil {
			ck.assignment(n.Name.Value, nil, "for "+n.Name.Value, depth)
		}
	case *syntax.ParamExp:
		if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) && n.Param != nil {
			ck.assignment(n.Param.Value, nil, nodeSource(n, src), depth)
		}
	case *syntax.CoprocClause:
		if n.Name != nil {
			ck.assignment(n.Name.Lit(), nil, "coproc "+n.Name.Lit(), depth)
		}
	case *syntax.Redirect:
		if n.N != nil && strings.HasPrefix(n.N.Value, "{") && strings.HasSuffix(n.N.Value, "}") {
			ck.assignment(strings.Trim(n.N.Value, "{}"), nil, n.N.Value, depth)
		}
	}
}

// assignWords checks the assignments a simple command makes with its words:
// env NAME=x (and -u, -i), sudo NAME=x, read NAME, mapfile NAME, getopts
// OPTS NAME, unset PATH, xargs --process-slot-var=NAME, and git -c
// KEY=VALUE, whose value may be a command.
func (ck *checker) assignWords(ws []word, depth int) {
	name, args := baseName(ws[0].val), ws[1:]
	words := func(vs []word) {
		for _, w := range vs {
			if !w.runtime() && isAssignment(w.val) {
				n, v, _ := strings.Cut(w.val, "=")
				ck.assignment(n, &word{val: v}, w.val, depth)
			}
		}
	}
	names := func(vs []word) {
		for _, w := range vs {
			if !w.runtime() && isName(w.val) {
				ck.assignment(w.val, nil, name+" "+w.val, depth)
			}
		}
	}
	switch name {
	case "env":
		ec := parseEnv(args)
		for _, o := range ec.opts {
			switch {
			case o.name == "-i" || o.name == "--ignore-environment":
				ck.assignment("PATH", nil, "env "+o.name, depth)
			case (o.name == "-u" || o.name == "--unset") && o.val != nil && (o.val.runtime() || o.val.val == "PATH"):
				ck.assignment("PATH", nil, "env "+o.name+" "+o.val.val, depth)
			}
		}
		for _, w := range ec.assigns {
			n, v, _ := strings.Cut(w.val, "=")
			if w.runtime() && !strings.Contains(w.prefix, "=") {
				n = "" // the name is only known at run time
			}
			ck.assignment(n, &word{val: v}, w.val, depth)
		}
	case "sudo":
		rest, _ := parseOptions(args, sudoOpts)
		words(rest[:len(rest)-len(skipAssignments(rest))])
	case "read":
		rest, got := parseOptions(args, readOpts)
		if a := hasOption(got, "-a"); a != nil && a.val != nil {
			rest = append(rest, *a.val)
		}
		names(rest)
	case "mapfile", "readarray":
		rest, _ := parseOptions(args, mapfileOpts)
		names(rest)
	case "getopts":
		if len(args) > 1 {
			names(args[1:2])
		}
	case "printf":
		_, got := parseOptions(args, printfOpts)
		if v := hasOption(got, "-v"); v != nil && v.val != nil {
			names([]word{*v.val})
		}
	case "unset":
		for _, w := range args {
			if !w.runtime() && w.val == "PATH" {
				ck.assignment("PATH", nil, "unset PATH", depth)
			}
		}
	case "xargs":
		_, got := parseOptions(args, xargsOpts)
		if o := hasOption(got, "--process-slot-var"); o != nil && o.val != nil {
			names([]word{*o.val})
		}
	case "git":
		for i := 0; i+1 < len(args); i++ {
			if args[i].val == "-c" && !args[i+1].runtime() {
				if _, v, ok := strings.Cut(args[i+1].val, "="); ok {
					cmd := gitConfigCommand(v)
					ck.maybe(func() { ck.script(cmd, depth+1, true) })
				}
			}
		}
	}
}

var printfOpts = newGetopt("+v:")
