package policy

import "strings"

// Flag spellings that mean the same short flag, per command, so that
// "rm --recursive --force" matches a rule "rm -rf" and "rm -R" matches "rm -r".
// A long spelling counts abbreviated too ("rm --rec --for"), as getopt_long
// reads it.
var flagAliases = map[string]map[string]byte{
	"rm":    {"-R": 'r', "--recursive": 'r', "--force": 'f', "--dir": 'd', "--interactive": 'i', "--verbose": 'v'},
	"cp":    {"-R": 'r', "--recursive": 'r', "--force": 'f', "--archive": 'a'},
	"chmod": {"--recursive": 'R', "--verbose": 'v', "--changes": 'c'},
	"chown": {"--recursive": 'R', "--verbose": 'v', "--changes": 'c'},
	"chgrp": {"--recursive": 'R', "--verbose": 'v', "--changes": 'c'},
	"git":   {"--force": 'f', "--all": 'a'},
}

// Commands whose single-dash options are whole words (find -delete), not
// clusters of letters.
var singleDashLong = map[string]bool{"find": true}

// Options that take the next word as their value, per command, so the value
// is not mistaken for an operand ("git -C dir push" has operands [push],
// "uniq -f 1 in" has one).
var optionValues = map[string]map[string]bool{
	"git":  {"-C": true, "-c": true, "--git-dir": true, "--work-tree": true, "--namespace": true, "--config-env": true, "--super-prefix": true},
	"uniq": {"-f": true, "-s": true, "-w": true, "--skip-fields": true, "--skip-chars": true, "--check-chars": true},
}

// exactLong are long options that are a prefix of another option a rule may
// name, so they are not its abbreviation: git's --text is not --textconv.
var exactLong = map[string]map[string]bool{
	"git": {"--text": true, "--set-upstream": true},
}

// cmdView is a simple command split the way rules look at it.
type cmdView struct {
	words    []word
	name     string // basename of the command name
	flags    []string
	letters  [256]bool // short flags present, aliases included
	operands []word
	// wild is true when a word only known at run time may be an option
	// (the command reads "$X" as --output=f if that is what X holds), so
	// couldMatch counts it as any flag.
	wild bool
}

func newView(ws []word) *cmdView {
	v := &cmdView{words: ws, name: baseName(ws[0].val)}
	values := optionValues[v.name]
	g := commandOptions[v.name]
	endOfOpts, seenOperand, valueNext := false, false, false
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		isValue := valueNext
		valueNext = false
		switch {
		case endOfOpts:
			v.operands = append(v.operands, w)
			continue
		case w.runtime():
			v.runtimeWord(w, isValue, g != nil && g.ordered() && seenOperand)
			continue
		case len(w.val) < 2 || w.val[0] != '-':
			v.operands = append(v.operands, w)
			seenOperand = true
			continue
		case w.val == "--", v.name == "git" && w.val == "--end-of-options":
			endOfOpts = true
			continue
		}
		v.flags = append(v.flags, w.val)
		if values[w.val] {
			i++ // the option's value
			if i < len(ws) && ws[i].split {
				v.wild = true
			}
		}
		valueNext = g.takesNext(w.val, v.name)
		if strings.HasPrefix(w.val, "--") {
			name, _, _ := strings.Cut(w.val, "=")
			v.longLetters(name)
			continue
		}
		if !singleDashLong[v.name] {
			v.shortLetters(w.val[1:])
		}
	}
	return v
}

// runtimeWord places a word only known at run time. One that starts with
// a known option (--output=$F, -o$F) is that option; any other that may be
// an option (its known start is empty or "-", or it splits) makes the view
// wild, unless it is an option's value or comes after the operands of a
// command that reads its options first.
func (v *cmdView) runtimeWord(w word, isValue, afterOperands bool) {
	p := w.prefix
	switch {
	case strings.HasPrefix(p, "--") && strings.Contains(p, "="):
		name, _, _ := strings.Cut(p, "=")
		v.flags = append(v.flags, w.val)
		v.longLetters(name)
		v.wild = v.wild || w.split
		return
	case len(p) > 1 && p[0] == '-' && p[1] != '-' && !singleDashLong[v.name]:
		v.flags = append(v.flags, w.val)
		v.shortLetters(p[1:])
		v.wild = true // the rest of the cluster is unknown
		return
	}
	v.operands = append(v.operands, w)
	if w.split || w.optionLike() && !isValue && !afterOperands {
		v.wild = true
	}
}

// longLetters records the short flags a long option means, abbreviated or
// not.
func (v *cmdView) longLetters(name string) {
	aliases := flagAliases[v.name]
	if a, ok := aliases[name]; ok {
		v.letters[a] = true
		return
	}
	if len(name) < 3 {
		return
	}
	for k, a := range aliases {
		if strings.HasPrefix(k, "--") && strings.HasPrefix(k, name) {
			v.letters[a] = true // an ambiguous prefix makes the command fail; counting it is safe
		}
	}
}

func (v *cmdView) shortLetters(cluster string) {
	aliases := flagAliases[v.name]
	for j := 0; j < len(cluster); j++ {
		b := cluster[j]
		v.letters[b] = true
		if a, ok := aliases["-"+string(b)]; ok {
			v.letters[a] = true
		}
	}
}

// takesNext reports whether a flag word leaves its value to the next word:
// --key KEYDEF, -k KEYDEF, -uk KEYDEF (not -k2, not --key=2). name is the
// command, for find's primaries.
func (g *getopt) takesNext(flag, name string) bool {
	if singleDashLong[name] {
		return findValues[flag] > 0
	}
	if g == nil || strings.Contains(flag, "=") {
		return false
	}
	if strings.HasPrefix(flag, "--") {
		_, k, ok := g.lookupLong(flag)
		return ok && k == requiredArg
	}
	for j := 1; j < len(flag); j++ {
		if k := g.shortKind(flag[j]); k != noArg {
			return k == requiredArg && j == len(flag)-1
		}
	}
	return false
}

// baseName is the last element of a command name: /bin/rm and ./rm are rm.
func baseName(s string) string {
	s = strings.TrimRight(s, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}
