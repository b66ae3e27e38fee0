package policy

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
)

// This file generates variants of the classes an adversarial re-test found
// (see gen_test.go for how variants are built and why they are dangerous
// or benign by construction): env -S strings split as GNU env splits
// them, credentials read through a relative path after cd, a glob, a
// run-time part or a descriptor, catastrophic paths that resolve to the
// root (.., ~, a glob after cd /), what find runs and removes, text a
// filter decodes before a shell runs it, and the positional parameters.

// envSplitString writes words as one env -S string, with GNU env's
// separators (blanks, \_) and quotes, spelled as one of env's options.
func (g gen) envSplitString(ws []string) string {
	var b strings.Builder
	if g.c.pick(4) == 0 {
		b.WriteString(`\_`)
	}
	for i, w := range ws {
		if i > 0 {
			b.WriteString(g.one(" ", `\_`, "  ", `\_ `))
		}
		switch g.c.pick(4) {
		case 0:
			b.WriteString(`"` + w + `"`)
		case 1:
			b.WriteString(`'` + w + `'`)
		default:
			b.WriteString(w)
		}
	}
	s := shellQuote(b.String())
	return g.one("env -S", "env -S ", "env --split-string=", "env -vS", "env --split-str ") + s
}

// envSplit: readonly's env runs, after -S, a program it does not list or a
// listed one with an option that writes.
func (g gen) envSplit(p payload) string {
	if g.c.pick(2) == 0 {
		return g.envSplitString(p)
	}
	o := dangerousOptions[g.c.pick(len(dangerousOptions))]
	opt := []string{o.short}
	if o.long != "" && (o.short == "" || g.c.pick(2) == 0) {
		opt = []string{o.long}
	}
	if o.value != "" {
		if strings.HasPrefix(opt[0], "--") {
			opt = []string{opt[0] + "=" + o.value}
		} else {
			opt = append(opt, o.value)
		}
	}
	ws := append(append(append([]string(nil), o.cmd...), opt...), o.after...)
	if slices.Contains(ws, ";") {
		return g.envSplitString(p) // find's -exec: its ";" is fine in -S, but keep it simple
	}
	return g.envSplitString(ws)
}

// secret is a file the presets deny reading, as a directory and a name.
type secret struct{ dir, name string }

var secrets = []secret{
	{"/proc/self", "environ"}, {"/proc/1", "environ"}, {"/proc/1/task/1", "environ"},
	{"/home/agent/.ssh", "id_rsa"}, {"/home/agent/.aws", "credentials"}, {"/home/agent", ".netrc"},
	{"/home/agent", ".git-credentials"}, {"/proc/self/fd", "3"}, {"/proc/1", "mem"},
}

// globbed writes a path with one of its elements as a glob that matches
// it (a wildcard never first in a dot-name, as bash would not match it).
func (g gen) globbed(p string) string {
	els := strings.Split(p, "/")
	k := 1 + g.c.pick(len(els)-1)
	e := els[k]
	if len(e) < 2 {
		return p
	}
	i := 1 + g.c.pick(len(e)-1)
	switch g.c.pick(3) {
	case 0:
		els[k] = e[:i] + "?" + e[i+1:]
	case 1:
		els[k] = e[:i] + "[" + e[i:i+1] + "]" + e[i+1:]
	default:
		els[k] = e[:i] + "*"
	}
	return strings.Join(els, "/")
}

// spelledDir writes a directory another way: ~ and $HOME for the home,
// $$ and $PPID for a process, /dev/fd/.. for /proc/self.
func (g gen) spelledDir(dir string) string {
	switch {
	case strings.HasPrefix(dir, "/home/agent") && g.c.pick(2) == 0:
		return g.one("~", "$HOME", `"$HOME"`, "${HOME}") + dir[len("/home/agent"):]
	case strings.HasPrefix(dir, "/proc/self") && g.c.pick(2) == 0:
		return g.one("/proc/$$", "/proc/$BASHPID", "/proc/thread-self", "/dev/fd/..") + dir[len("/proc/self"):]
	case strings.HasPrefix(dir, "/proc/1") && g.c.pick(2) == 0:
		return "/proc/$PPID" + dir[len("/proc/1"):]
	}
	return dir
}

// reader writes a command that reads file f. A path with ~ or a glob
// stays a word of its own, where bash expands it.
func (g gen) reader(f string) string {
	n := 10
	if strings.ContainsAny(f, "~*?[$") {
		n = 4
	}
	switch g.c.pick(n) {
	case 0:
		return "head -c 999 " + f
	case 1:
		return "xargs -0 -a " + f + " echo"
	case 2:
		return "cat < " + f
	case 3:
		return "cat " + f
	case 4:
		return "tail -n 5 " + f
	case 5:
		return "xargs -0 -a" + f + " echo"
	case 6:
		return "grep -f" + f + " x"
	case 7:
		return "wc -c " + f
	case 8:
		return "env -S" + shellQuote("cat "+f)
	}
	return "grep -r x " + f
}

// secretRead: a command reads a file the presets deny, through a path
// written another way: a glob, a run-time part, a descriptor, or relative
// after a cd.
func (g gen) secretRead() string {
	s := secrets[g.c.pick(len(secrets))]
	full := s.dir + "/" + s.name
	var x string
	switch g.c.pick(8) {
	case 0:
		x = g.reader(g.globbed(full))
	case 1:
		x = g.reader(g.spelledDir(s.dir) + "/" + s.name)
	case 2:
		x = g.one("cd ", "pushd ", "builtin cd ") + g.spelledDir(s.dir) + g.one(" && ", "; ", " >/dev/null && ") + g.reader(g.one("", "./")+s.name)
	case 3:
		x = "cd " + s.dir + g.one(" && ", "; ") + g.reader("$PWD/"+s.name)
	case 4:
		x = "cd " + g.globbed(s.dir) + " && " + g.reader(s.name)
	case 5:
		x = g.one("env -C ", "env --chdir=") + s.dir + " cat " + s.name
	case 6:
		x = "git -C " + s.dir + " diff --no-index " + s.name + " /dev/null"
	default:
		x = "cd /tmp && " + g.reader(".."+full)
	}
	return g.contexts(x, false)
}

// secretBenign: reads like those, of files no rule denies.
func (g gen) secretBenign() string {
	x := g.one(
		"cd /proc/self && cat status", "cat /proc/$$/status", "cd ~ && cat notes.txt",
		"cd src && wc -l *.go", "cat ~/project/README.md", "ls ~/*/x", "env -C /tmp cat notes.txt",
		"git -C /workspace diff --no-index a b", "cat /etc/host*", "cd /tmp && cat ../etc/hostname",
		"grep -rn TODO ./src", "head -c 99 /proc/self/cmdline",
	)
	return g.contexts(x, true)
}

// normalised: the catastrophic payload's "/" written as a path that
// resolves to it, or reached from a directory a cd goes to.
func (g gen) normalised(p payload) string {
	last := len(p) - 1
	switch {
	case p[last] == "/":
		if baseName(p[0]) == "rm" && g.c.pick(3) == 0 {
			head := g.words(p[:last]...)
			return g.one("cd / && ", "cd /tmp; cd .. && ", "cd ~/../.. && ") + head + " " + g.one("*", "./*")
		}
		ws := slices.Clone(p)
		ws[last] = g.one("/usr/..", "/.", "//", "/home/agent/../..", "/tmp/../")
		alt := g.one("~/../..", `"$HOME"/../..`, "$HOME/../..")
		return g.words(ws[:last]...) + " " + g.one(g.q(ws[last]), alt)
	case strings.HasPrefix(p[last], "of=/dev/"):
		ws := slices.Clone(p)
		ws[last] = "of=" + strings.TrimPrefix(p[last], "of=/dev/")
		return "cd /dev && " + g.words(ws...)
	}
	return g.wrapAll(g.words(p...))
}

// found: find removes the root, or runs rm -rf on what it finds, the
// start point among it.
func (g gen) found() string {
	start := g.one("/", "/.", "//")
	action := g.one("-delete", "-depth -delete", "-mindepth 1 -delete", "-xdev -delete", "-type f -delete",
		"-exec rm -rf {} +", `-exec rm -rf {} \;`, `-execdir rm -rf {} \;`, `-ok rm -rf {} \;`,
		`-okdir rm -rf {} \;`, "-maxdepth 0 -exec rm -rf {} +")
	if g.c.pick(4) == 0 {
		return "cd / && find " + g.one("", ". ") + action
	}
	return "find " + start + " " + action
}

// decoded: the payload's text, encoded in the command line, decoded by a
// filter and run by a shell.
func (g gen) decoded(src string) string {
	text := src + "\n"
	switch g.c.pick(6) {
	case 0:
		return "echo " + base64.StdEncoding.EncodeToString([]byte(text)) + " | " + g.one("base64 -d", "base64 --decode", "openssl enc -base64 -d") + " | " + g.one("sh", "bash")
	case 1:
		return "base64 -d <<< " + base64.StdEncoding.EncodeToString([]byte(text)) + " | bash"
	case 2:
		r := []rune(src)
		slices.Reverse(r)
		return "echo " + shellQuote(string(r)) + " | rev | sh"
	case 3:
		rot := strings.Map(func(c rune) rune {
			switch {
			case c >= 'a' && c <= 'z':
				return 'a' + (c-'a'+13)%26
			case c >= 'A' && c <= 'Z':
				return 'A' + (c-'A'+13)%26
			}
			return c
		}, src)
		return "echo " + shellQuote(rot) + " | tr a-zA-Z n-za-mN-ZA-M | sh"
	case 4:
		return "echo " + hex.EncodeToString([]byte(text)) + " | xxd -r -p | sh"
	}
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(text)) // a bytes.Buffer does not fail
	_ = w.Close()
	return "echo " + base64.StdEncoding.EncodeToString(b.Bytes()) + " | base64 -d | gunzip | sh"
}

// positional: the payload's words as the positional parameters, run as
// "$@".
func (g gen) positional(p payload) string {
	ws := g.words(p...)
	switch g.c.pick(4) {
	case 0:
		return "set -- " + ws + `; "$@"`
	case 1:
		return "f() { \"$@\"; }; f " + ws
	case 2:
		return `bash -c '"$@"' _ ` + ws
	}
	return "set -- " + ws + "; $@"
}

// retestCatastrophe returns a variant of a re-test class that runs a
// catastrophic command.
func (g gen) retestCatastrophe(p payload) string {
	switch g.c.pick(6) {
	case 0:
		if !strings.Contains(p.text(), "*") { // env globs nothing
			return g.envSplitString(p)
		}
		return g.normalised(p)
	case 1:
		return g.normalised(p)
	case 2:
		return g.found()
	case 3:
		if g.c.pick(6) == 0 {
			return g.decoded(forkBomb)
		}
		return g.decoded(p.text())
	case 4:
		return g.positional(p)
	}
	return g.normalised(p)
}

// retestBenign returns everyday work written like the re-test's variants.
func (g gen) retestBenign() string {
	return g.one(
		"find . -name '*.o' -delete", "find /tmp/build -delete", "cd /tmp && rm -rf build *",
		"echo aGkK | base64 -d", "cat script.sh | sh", "env -S'rm -rf ./build'",
		"find . -type f -exec grep -l x {} +", "find ~ -name '*.log' -delete", "set -- a b; echo \"$@\"",
		"cd build && rm -rf ./*", "rm -rf ~/project/build/..",
	)
}
