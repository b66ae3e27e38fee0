package policy

import (
	"strings"
	"sync"
)

// This file models how commands read their options, the way getopt_long
// does: short options cluster (-rf), a short option's value may be
// attached (-n5) or the next word (-n 5), a long option's value may follow
// "=" or be the next word, and a long option may be abbreviated to any
// prefix that names it alone (--out for --output). The engine uses it to
// find the command a wrapper runs and to see an option however it is
// spelled.

// argKind says whether an option takes a value.
type argKind uint8

const (
	noArg       argKind = iota
	requiredArg         // -n 5, -n5, --lines=5, --lines 5
	optionalArg         // attached only: -i{}, --replace={}
)

// getopt is how one command reads its options. It is built from its
// spec at its first use: the package declares some forty of them, and a
// program that links the policy engine without checking a command (the
// CLI's exec, list, version) should not pay their ~600 allocations at
// start.
type getopt struct {
	spec  string   // getopt(3)'s
	longs []string // with the same suffixes
	once  sync.Once
	short map[byte]argKind
	long  map[string]argKind
	// inOrder: options end at the first operand (getopt's "+", as
	// wrappers and POSIX tools read them). Otherwise GNU tools permute:
	// an option may follow operands, up to "--".
	inOrder bool
}

// newGetopt declares a getopt from a getopt(3) string ("+" first for
// in-order, "x:" for a value, "x::" for an optional one) and long option
// names with the same suffixes ("output:", "replace::").
func newGetopt(short string, long ...string) *getopt {
	return &getopt{spec: short, longs: long}
}

// built returns g with its tables made.
func (g *getopt) built() *getopt {
	g.once.Do(g.build)
	return g
}

func (g *getopt) build() {
	short := g.spec
	g.short, g.long = map[byte]argKind{}, map[string]argKind{}
	if strings.HasPrefix(short, "+") {
		g.inOrder, short = true, short[1:]
	}
	for i := 0; i < len(short); i++ {
		c, k := short[i], noArg
		if i+1 < len(short) && short[i+1] == ':' {
			k = requiredArg
			if i+2 < len(short) && short[i+2] == ':' {
				k = optionalArg
				i++
			}
			i++
		}
		g.short[c] = k
	}
	for _, l := range g.longs {
		name, k := strings.TrimRight(l, ":"), noArg
		switch strings.Count(l, ":") {
		case 1:
			k = requiredArg
		case 2:
			k = optionalArg
		}
		g.long["--"+name] = k
	}
}

// shortKind is what short option c takes (noArg for one g lacks).
func (g *getopt) shortKind(c byte) argKind { return g.built().short[c] }

// ordered reports whether g's options end at the first operand.
func (g *getopt) ordered() bool { return g.built().inOrder }

// lookupLong resolves a long option name ("--out") the way getopt_long
// does: an exact name, else the one option it is a prefix of. ok is false
// when no option, or more than one, has that prefix.
func (g *getopt) lookupLong(name string) (canon string, k argKind, ok bool) {
	g.built()
	if k, ok := g.long[name]; ok {
		return name, k, true
	}
	if len(name) < 3 {
		return "", noArg, false
	}
	n := 0
	for l, lk := range g.long {
		if strings.HasPrefix(l, name) {
			canon, k, n = l, lk, n+1
		}
	}
	return canon, k, n == 1
}

// option is one option a command was given; val is set for options that
// take a value and got one.
type option struct {
	name string // "-n" or the long name it resolves to ("--max-args")
	val  *word
}

// parseOptions reads args as g does, up to the first operand or "--" (a
// wrapper's options always end at the command). It returns the words after
// the options and the options read. A word only known at run time where an
// option may stand ends the options: it may be an option or the command,
// so it is left first in rest, where it makes the command dynamic. So is a
// value that splits into words.
func parseOptions(args []word, g *getopt) (rest []word, got []option) {
	for i := 0; i < len(args); {
		a := args[i]
		if a.runtime() {
			return args[i:], got
		}
		if a.val == "--" {
			return args[i+1:], got
		}
		if len(a.val) < 2 || a.val[0] != '-' {
			return args[i:], got
		}
		opts, n := nextOption(args[i:], g)
		got = append(got, opts...)
		if n == 0 { // the value splits
			return args[i+1:], got
		}
		i += n
	}
	return nil, got
}

// nextOption reads the option word args[0] (a short cluster or a long
// option) and the value word it may take. It returns the options and how
// many words they took; 0 when the value word may split into several, which
// leaves what follows unknown.
func nextOption(args []word, g *getopt) ([]option, int) {
	a := args[0]
	if strings.HasPrefix(a.val, "--") {
		name, val, hasVal := strings.Cut(a.val, "=")
		canon, k, ok := g.lookupLong(name)
		if !ok {
			canon = name // unknown or ambiguous: the command refuses it
		}
		o := option{name: canon}
		switch {
		case hasVal:
			o.val = &word{val: val}
		case ok && k == requiredArg && len(args) > 1:
			if args[1].split {
				return nil, 0
			}
			o.val = &args[1]
			return []option{o}, 2
		}
		return []option{o}, 1
	}
	var got []option
	for j := 1; j < len(a.val); j++ {
		o := option{name: "-" + a.val[j:j+1]}
		k := g.shortKind(a.val[j])
		if k == noArg {
			got = append(got, o)
			continue
		}
		if j+1 < len(a.val) {
			o.val = &word{val: a.val[j+1:]}
		} else if k == requiredArg && len(args) > 1 {
			if args[1].split {
				return got, 0
			}
			o.val = &args[1]
			return append(got, o), 2
		}
		return append(got, o), 1
	}
	return got, 1
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

// How the wrappers read their options (GNU coreutils, findutils,
// util-linux, sudo, procps, bash builtins).
var (
	sudoOpts = newGetopt("+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv",
		"askpass", "auth-type:", "background", "bell", "close-from:", "login-class:", "chdir:",
		"preserve-env::", "edit", "group:", "set-home", "help", "host:", "login", "remove-timestamp",
		"reset-timestamp", "list", "non-interactive", "no-update", "preserve-groups", "prompt:",
		"chroot:", "role:", "stdin", "shell", "type:", "command-timeout:", "other-user:", "user:",
		"version", "validate")
	doasOpts = newGetopt("+a:C:Lnsu:")
	envOpts  = newGetopt("+0a:C:iS:u:v",
		"argv0:", "chdir:", "debug", "default-signal::", "ignore-environment", "ignore-signal::",
		"block-signal::", "list-signal-handling", "null", "split-string:", "unset:", "help", "version")
	niceOpts    = newGetopt("+n:", "adjustment:", "help", "version")
	nohupOpts   = newGetopt("+", "help", "version")
	setsidOpts  = newGetopt("+cfw", "ctty", "fork", "wait", "help", "version")
	timeoutOpts = newGetopt("+fk:ps:v", "foreground", "kill-after:", "preserve-status", "signal:", "verbose", "help", "version")
	timeOpts    = newGetopt("+af:o:pqvV", "append", "format:", "output:", "portability", "quiet", "verbose", "help", "version")
	execOpts    = newGetopt("+cla:")
	commandOpts = newGetopt("+pvV")
	xargsOpts   = newGetopt("+0a:E:e::i::I:l::L:n:oprs:txP:d:",
		"null", "arg-file:", "delimiter:", "eof::", "replace::", "max-lines::", "max-args:",
		"open-tty", "max-procs:", "process-slot-var:", "interactive", "no-run-if-empty",
		"max-chars:", "show-limits", "verbose", "exit", "help", "version")
	stdbufOpts = newGetopt("+i:o:e:", "input:", "output:", "error:", "help", "version")
	chrootOpts = newGetopt("+", "groups:", "userspec:", "skip-chdir", "help", "version")
	ioniceOpts = newGetopt("+c:n:p:P:tu:", "class:", "classdata:", "pid:", "pgid:", "ignore", "uid:", "help", "version")
	watchOpts  = newGetopt("+bcCd::eg:hn:pq:rtvwx",
		"beep", "color", "no-color", "differences::", "errexit", "chgexit", "equexit:", "exec",
		"help", "interval:", "no-linewrap", "no-rerun", "no-title", "precise", "version")
	suOpts = newGetopt("+c:fg:G:lmpPs:u:w:",
		"command:", "session-command:", "fast", "group:", "supp-group:", "login",
		"preserve-environment", "pty", "shell:", "whitelist-environment:", "user:", "help", "version")
)

// commandOptions are how the commands readonly lists read their options,
// where an option of theirs writes a file or runs a program: with them a
// word only known at run time that is an option's value is known not to
// be an option itself ("sort -k "$K" f" is safe, "sort "$X" f" may be
// -o). Commands not listed permute their options and take no values, the
// safe reading.
var commandOptions = map[string]*getopt{
	"sort": newGetopt("bcCdfghik:mMno:rRsS:t:T:uVz",
		"ignore-leading-blanks", "dictionary-order", "ignore-case", "general-numeric-sort",
		"ignore-nonprinting", "month-sort", "human-numeric-sort", "numeric-sort", "random-sort",
		"random-source:", "reverse", "sort:", "version-sort", "batch-size:", "check::",
		"compress-program:", "debug", "files0-from:", "key:", "merge", "output:", "stable",
		"buffer-size:", "field-separator:", "temporary-directory:", "parallel:", "unique",
		"zero-terminated", "help", "version"),
	"uniq": newGetopt("cdDf:is:uw:z",
		"count", "repeated", "all-repeated::", "skip-fields:", "ignore-case", "skip-chars:",
		"unique", "zero-terminated", "check-chars:", "group::", "help", "version"),
	"date": newGetopt("d:f:I::r:Rs:u",
		"date:", "debug", "file:", "iso-8601::", "resolution", "reference:", "rfc-email",
		"rfc-3339:", "set:", "universal", "utc", "help", "version"),
	"file": newGetopt("0bcCdEe:f:F:hiklLm:nNpP:rsSvzZ",
		"apple", "brief", "checking-printout", "compile", "debug", "exclude:", "exclude-quiet:",
		"extension", "files-from:", "separator:", "help", "mime", "mime-type", "mime-encoding",
		"keep-going", "list", "dereference", "no-dereference", "magic-file:", "no-buffer",
		"no-pad", "no-sandbox", "parameter:", "preserve-date", "raw", "special-files",
		"uncompress", "uncompress-noreport", "print0", "version"),
	"tree": newGetopt("adfgilnpqrstuxACDFJNQRSUvX" + "L:P:I:o:H:T:"),
	"rg": newGetopt("e:f:g:t:T:m:A:B:C:j:M:E:r:d:",
		"regexp:", "file:", "glob:", "iglob:", "type:", "type-not:", "type-add:", "type-clear:",
		"max-count:", "after-context:", "before-context:", "context:", "threads:",
		"max-columns:", "encoding:", "replace:", "max-depth:", "max-filesize:", "pre:",
		"pre-glob:", "ignore-file:", "sort:", "sortr:", "colors:", "color:", "path-separator:",
		"context-separator:", "field-match-separator:", "field-context-separator:",
		"hostname-bin:", "hyperlink-format:", "engine:", "dfa-size-limit:", "regex-size-limit:"),
	"git": newGetopt("C:c:n:e:f:m:A:B:S:G:L:",
		"git-dir:", "work-tree:", "namespace:", "config-env:", "super-prefix:", "grep:",
		"author:", "committer:", "since:", "after:", "until:", "before:", "format:", "pretty:",
		"max-count:", "skip:", "date:", "encoding:", "contains:", "no-contains:", "merged:",
		"no-merged:", "points-at:", "sort:", "max-depth:", "threads:", "contents:",
		"ignore-rev:", "ignore-revs-file:", "exclude:", "exclude-from:", "exclude-per-directory:",
		"with-tree:", "abbrev-ref::", "short::", "output:", "open-files-in-pager::"),
}
