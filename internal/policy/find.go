package policy

import (
	"slices"
	"strings"
)

// This file reads what find runs and removes. -exec, -execdir, -ok and
// -okdir run a command with {} as each path find finds, and the start
// points are among them; -delete removes every path it finds, the start
// points last. So, unless a name test narrows what it finds,
// `find / -exec rm -rf {} +` runs `rm -rf /` and `find / -delete` is
// `rm -rf /`: both are checked as that, against the deny rules.

// findValues are the find primaries that read the next word as their value
// (-fprintf reads two).
var findValues = map[string]int{
	"-name": 1, "-iname": 1, "-path": 1, "-ipath": 1, "-wholename": 1, "-iwholename": 1,
	"-regex": 1, "-iregex": 1, "-lname": 1, "-ilname": 1, "-type": 1, "-xtype": 1,
	"-user": 1, "-group": 1, "-uid": 1, "-gid": 1, "-perm": 1, "-size": 1,
	"-mtime": 1, "-atime": 1, "-ctime": 1, "-mmin": 1, "-amin": 1, "-cmin": 1,
	"-newer": 1, "-anewer": 1, "-cnewer": 1, "-samefile": 1, "-inum": 1, "-links": 1,
	"-used": 1, "-maxdepth": 1, "-mindepth": 1, "-fstype": 1, "-context": 1,
	"-regextype": 1, "-files0-from": 1, "-printf": 1, "-fprint": 1, "-fprint0": 1,
	"-fls": 1, "-fprintf": 2, "-D": 1,
}

// nameTests are the tests that narrow what find finds to some names.
var nameTests = map[string]bool{
	"-name": true, "-iname": true, "-path": true, "-ipath": true, "-wholename": true,
	"-iwholename": true, "-regex": true, "-iregex": true, "-lname": true, "-ilname": true,
}

// findStarts returns find's start points (. when none), and whether a name
// test narrows what it finds: one whose value is static and not a pattern
// matching every name, in an expression with no operator (-o, !, -not,
// ",") that could undo it.
func findStarts(args []word) (starts []word, narrowed bool) {
	i := 0
	for i < len(args) && !args[i].runtime() {
		switch v := args[i].val; {
		case v == "-H" || v == "-L" || v == "-P" || strings.HasPrefix(v, "-O"):
			i++
			continue
		case v == "-D":
			i += 2
			continue
		}
		break
	}
	for ; i < len(args); i++ {
		v := args[i].val
		if !args[i].runtime() && (strings.HasPrefix(v, "-") || v == "(" || v == "!" || v == ")" || v == ",") {
			break
		}
		starts = append(starts, args[i])
	}
	if len(starts) == 0 {
		starts = []word{{val: ".", prefix: ".", segs: []seg{{s: ".", lit: true}}}}
	}
	operator := false
	for k := i; k < len(args); k++ {
		a := args[k]
		switch {
		case a.runtime():
			operator = true // it may be one
		case a.val == "-o" || a.val == "-or" || a.val == "!" || a.val == "-not" || a.val == ",":
			operator = true
		case nameTests[a.val] && k+1 < len(args):
			v := args[k+1]
			narrowed = narrowed || !v.runtime() && strings.Trim(v.val, "*?./") != ""
			k++
		case findValues[a.val] > 0:
			k += findValues[a.val]
		}
	}
	return starts, narrowed && !operator
}

// unwrapFind returns the commands of find's -exec, -execdir, -ok and -okdir
// actions, which end at ";" or "+", and the removal -delete makes. A word
// only known at run time that is not the value of a primary may itself be
// -exec, running the words after it up to a ";" or "+": what find runs is
// then unknown. A word that splits may hold all of that; a single one
// needs a terminator after it (find "$dir" -type f runs nothing).
func unwrapFind(args []word) []inner {
	var out []inner
	starts, narrowed := findStarts(args)
	terminated := func(rest []word) bool {
		return slices.ContainsFunc(rest, func(w word) bool { return w.runtime() || w.val == ";" || w.val == "+" })
	}
	deletes := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a.runtime() {
			if a.multi() || terminated(args[i+1:]) {
				out = append(out, inner{dynamic: "a word only known at run time may be find's -exec"})
			}
			continue
		}
		if n, ok := findValues[a.val]; ok {
			i += n
			if i < len(args) && args[i].multi() {
				out = append(out, inner{dynamic: "a value that splits into words may hold find's -exec"})
			}
			continue
		}
		if strings.HasPrefix(a.val, "-newer") {
			i++
			continue
		}
		switch a.val {
		case "-delete":
			deletes = true
			continue
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(args) && args[j].val != ";" && args[j].val != "+" {
			j++
		}
		cmd := args[i+1 : j]
		out = append(out, commandOf(cmd)...)
		if len(cmd) > 0 && !narrowed {
			out = append(out, foundCommands(cmd, starts, strings.HasSuffix(a.val, "dir"))...)
		}
		i = j
	}
	if deletes && !narrowed {
		rm := []word{{val: "rm", prefix: "rm"}, {val: "-r", prefix: "-r"}, {val: "-f", prefix: "-f"}, {val: "--", prefix: "--"}}
		out = append(out, inner{words: append(rm, starts...), maybe: true})
	}
	return out
}

// maxFindStarts bounds the start points a command with {} is read for.
const maxFindStarts = 4

// foundCommands is an action's command with {} as each start point; with
// -execdir it runs in the directory of what it finds, at or below the
// start point.
func foundCommands(cmd, starts []word, inDir bool) []inner {
	var out []inner
	for k, st := range starts {
		if k == maxFindStarts {
			break
		}
		c := make([]word, len(cmd))
		for n, w := range cmd {
			c[n] = w
			if !w.runtime() && strings.Contains(w.val, "{}") {
				c[n] = substituteFound(w, st)
			}
		}
		in := inner{words: c, maybe: true}
		if inDir {
			in.dirs = []word{st}
			if !st.runtime() {
				in.dirs = append(in.dirs, word{val: st.val + "/**"}, word{val: st.val + "/.."})
			}
		}
		out = append(out, in)
	}
	return out
}

// substituteFound writes a path find found where {} stands in a word.
func substituteFound(w, found word) word {
	if w.val == "{}" {
		return found
	}
	v := strings.ReplaceAll(w.val, "{}", found.val)
	return word{val: v, prefix: v, dyn: found.dyn}
}
