package policy

import (
	"errors"
	"strings"
)

// This file reads env's arguments as GNU env does. Its -S STRING
// (--split-string) is not shell: env splits STRING into words by its own
// rules (quotes, \_ as a separator, \t \n \c and other escapes, ${VAR}
// from its environment, # to the end), puts them in place of the -S
// option and reads its options again from the first of them, so the words
// may hold more options, assignments and the command. The command env
// runs is what comes of that, checked as any other.

// envCall is what one env command does.
type envCall struct {
	opts    []option
	assigns []word // NAME=VALUE words: any word with "=" before the command
	cmd     []word // the command it runs; nil when none
	dirs    []word // -C DIR: where the command runs
	dynamic string // why the command is only known at run time
}

// parseEnv reads env's arguments.
func parseEnv(args []word) envCall {
	var ec envCall
	for rounds := 0; ; {
		i, restart := 0, false
	options:
		for i < len(args) {
			a := args[i]
			switch {
			case a.runtime():
				break options
			case a.val == "--":
				i++
				break options
			case len(a.val) < 2 || a.val[0] != '-':
				break options
			}
			opts, n := nextOption(args[i:], envOpts)
			if n == 0 {
				ec.dynamic = "a value that splits into words may hold env's options and command"
				return ec
			}
			for _, o := range opts {
				if o.name != "-S" && o.name != "--split-string" {
					ec.opts = append(ec.opts, o)
					if (o.name == "-C" || o.name == "--chdir") && o.val != nil {
						ec.dirs = []word{*o.val}
					}
					continue
				}
				if o.val == nil {
					return envCall{} // env refuses a -S with no string
				}
				if rounds++; rounds > maxNesting {
					ec.dynamic = "env -S strings nested more than 8 levels deep"
					return ec
				}
				if o.val.runtime() {
					ec.dynamic = "env -S splits a string only known at run time into its command"
					return ec
				}
				ws, err := splitEnvString(o.val.val)
				if err != nil {
					ec.dynamic = "env -S string " + err.Error()
					return ec
				}
				args = append(ws, args[i+n:]...)
				restart = true
				break options
			}
			i += n
		}
		if restart {
			continue
		}
		rest := args[i:]
		if len(rest) > 0 && !rest[0].runtime() && rest[0].val == "-" {
			ec.opts = append(ec.opts, option{name: "-i"}) // a lone "-" is -i
			rest = rest[1:]
		}
		for len(rest) > 0 && !rest[0].runtime() && strings.Contains(rest[0].val, "=") {
			ec.assigns = append(ec.assigns, rest[0])
			rest = rest[1:]
		}
		if len(rest) > 0 && rest[0].runtime() && strings.Contains(rest[0].prefix, "=") {
			ec.assigns = append(ec.assigns, rest[0]) // NAME=$x: an assignment whatever x holds
			rest = rest[1:]
		}
		ec.cmd = rest
		return ec
	}
}

var errEnvString = errors.New("that env refuses")

// splitEnvString splits an env -S string into words as GNU env does
// (coreutils env.c, build_argv). A ${VAR} makes its word only known at run
// time. A string env refuses is an error: another env may read it
// otherwise.
func splitEnvString(s string) ([]word, error) {
	var out []word
	var cur *word
	sep := true
	var sq, dq bool
	start := func() {
		if sep {
			out = append(out, word{})
			cur = &out[len(out)-1]
			sep = false
		}
	}
	add := func(c byte) {
		start()
		cur.val += string(c)
		if !cur.dyn {
			cur.prefix = cur.val
		}
		if n := len(cur.segs); n > 0 && cur.segs[n-1].lit {
			cur.segs[n-1].s += string(c)
		} else {
			cur.segs = append(cur.segs, seg{s: string(c), lit: true})
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' && !dq:
			sq = !sq
			start()
			continue
		case c == '"' && !sq:
			dq = !dq
			start()
			continue
		case strings.IndexByte(" \t\n\v\f\r", c) >= 0 && !sq && !dq:
			sep = true
			continue
		case c == '#' && sep:
			return out, nil // a comment to the end
		case c == '\\' && !(sq && (i+1 >= len(s) || s[i+1] != '\\' && s[i+1] != '\'')):
			i++
			if i == len(s) {
				return nil, errEnvString
			}
			switch e := s[i]; e {
			case '"', '#', '$', '\'', '\\':
				add(e)
			case '_':
				if dq {
					add(' ')
				} else {
					sep = true
				}
			case 'c':
				if dq {
					return nil, errEnvString
				}
				return out, nil
			case 'f':
				add('\f')
			case 'n':
				add('\n')
			case 'r':
				add('\r')
			case 't':
				add('\t')
			case 'v':
				add('\v')
			default:
				return nil, errEnvString
			}
			continue
		case c == '$' && !sq:
			name, ok := envVarName(s[i:])
			if !ok {
				return nil, errEnvString
			}
			start()
			cur.val += "${" + name + "}"
			cur.dyn = true
			cur.segs = append(cur.segs, seg{s: "$" + name, dyn: true, param: name})
			i += len(name) + 2
			continue
		}
		add(c)
	}
	if sq || dq {
		return nil, errEnvString
	}
	return out, nil
}

// envVarName reads the NAME of "${NAME}" at the start of s.
func envVarName(s string) (string, bool) {
	if !strings.HasPrefix(s, "${") {
		return "", false
	}
	end := strings.IndexByte(s, '}')
	if end < 0 || !isName(s[2:end]) {
		return "", false
	}
	return s[2:end], true
}
