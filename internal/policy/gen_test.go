package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// This file generates variants of the bypass classes the security review
// found, for TestGeneratedVariants and the fuzz targets. Each variant is
// dangerous or benign by construction: the generator builds it from a
// payload (a command that writes or runs an unlisted program, or a
// catastrophic one) placed where the shell runs it, or where a program the
// shell runs would (git's pager when it pages, its external diff when there
// is a change, a planted ./tools/ls), or from a harmless command placed the
// same way. Every transformation it applies keeps what runs: quoting a word
// keeps its value, a context runs what it holds, a wrapper runs its command.
// So the checks are not the engine checking itself: a dangerous variant
// must not be allowed, a benign one must be.

// chooser picks among n choices.
type chooser interface{ pick(n int) int }

// rngChooser picks at random, for the deterministic table.
type rngChooser struct{ r *rand.Rand }

func (c rngChooser) pick(n int) int { return c.r.IntN(n) }

// bytesChooser picks by the bytes of a fuzz input, then the first choice.
type bytesChooser struct {
	data []byte
	i    int
}

func (c *bytesChooser) pick(n int) int {
	if c.i >= len(c.data) {
		return 0
	}
	b := c.data[c.i]
	c.i++
	return int(b) % n
}

type gen struct{ c chooser }

func (g gen) one(xs ...string) string { return xs[g.c.pick(len(xs))] }

// q writes a literal value as one shell word, in a way picked at random:
// bare, single-quoted, double-quoted, backslashed, $'...', or two of these
// joined. Every way keeps the value.
func (g gen) q(v string) string {
	if v == "" {
		return "''"
	}
	switch g.c.pick(7) {
	case 0, 1:
		if isBare(v) {
			return v
		}
		return "'" + v + "'"
	case 2:
		if !strings.Contains(v, "'") {
			return "'" + v + "'"
		}
	case 3:
		r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "`", "\\`")
		return `"` + r.Replace(v) + `"`
	case 4:
		var b strings.Builder
		for _, ch := range v {
			b.WriteByte('\\')
			b.WriteRune(ch)
		}
		return b.String()
	case 5:
		r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
		return "$'" + r.Replace(v) + "'"
	case 6:
		if len(v) > 1 {
			k := 1 + g.c.pick(len(v)-1)
			return g.q(v[:k]) + g.q(v[k:])
		}
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "`", "\\`").Replace(v) + `"`
}

// isBare reports whether v reads as itself unquoted.
func isBare(v string) bool {
	if v[0] == '~' || v[0] == '#' {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./:,=+-@%^", c)) {
			return false
		}
	}
	return true
}

// words writes a command's literal words, each quoted its own way. The
// first is a command name: quoting it keeps the command (keywords are not
// generated).
func (g gen) words(ws ...string) string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = g.q(w)
	}
	return strings.Join(out, " ")
}

// context puts a command where the shell runs it. A function defined and
// called is among them only for dangerous variants: readonly denies the
// call, a command it does not list.
func (g gen) context(x string, benign bool) string {
	switch g.c.pick(16) {
	case 0:
		return "true && " + x
	case 1:
		return "false || " + x
	case 2:
		return "( " + x + " )"
	case 3:
		return "{ " + x + "; }"
	case 4:
		return x + " | cat"
	case 5:
		return "ls; " + x
	case 6:
		return "if true; then " + x + "; fi"
	case 7:
		return "echo $( " + x + " )"
	case 8:
		return "cat <( " + x + " )"
	case 9:
		return "for i in 1; do " + x + "; done"
	case 10:
		if !benign {
			return "f() { " + x + "; }; f"
		}
	case 11:
		return "case a in a) " + x + ";; esac"
	case 12:
		return "{ " + x + " & }"
	case 13:
		return "while false; do true; done; " + x
	case 14:
		if benign && strings.Contains(x, "`") {
			return "{ " + x + "; }" // the parser refuses some nested backquotes that bash reads
		}
		// Inside backquotes \\, \` and \$ lose their backslash.
		return "echo `" + strings.NewReplacer(`\`, `\\`, "`", "\\`", "$", `\$`).Replace(x) + "`"
	}
	return x
}

// contexts puts x in zero to two contexts.
func (g gen) contexts(x string, benign bool) string {
	for n := g.c.pick(3); n > 0; n-- {
		x = g.context(x, benign)
	}
	return x
}

// A payload is a command, as literal words.
type payload []string

func (p payload) text() string { return strings.Join(p, " ") }

// unlisted are commands readonly must not run: they write, or are not on
// its list, or are a planted program.
var unlisted = []payload{
	{"touch", "/tmp/x"}, {"rm", "-f", "x"}, {"cp", "a", "b"}, {"sh", "-c", "id"},
	{"python3", "-c", "1"}, {"./tools/ls"}, {"tee", "out"}, {"chmod", "+x", "f"},
}

// readonlyDangerous returns a variant that runs an unlisted program or
// writes a file, by one of the review's classes, or a mix.
func (g gen) readonlyDangerous() string {
	p := unlisted[g.c.pick(len(unlisted))]
	var x string
	switch g.c.pick(6) {
	case 0:
		x = g.runTimeWrapper(p)
	case 1:
		x = g.longOption()
	case 2:
		x = g.evaluated(p)
	case 3:
		x = g.envAssigned(p)
	case 4:
		x = g.envSplit(p)
	default:
		x = g.planted()
	}
	return g.contexts(x, false)
}

// readonlyWrappers are the wrappers readonly lists, as prefixes that keep
// what they wrap.
func (g gen) readonlyWrap(x string) string {
	for n := g.c.pick(3); n > 0; n-- {
		x = g.one("env ", "timeout 5 ", "command ", "timeout --sig=KILL 9 ") + x
	}
	return x
}

// feed writes a command that prints the payload's words, for xargs.
func (g gen) feed(p payload) (src string, nul bool) {
	switch g.c.pick(5) {
	case 0:
		return "echo " + g.words(p...), false
	case 1:
		return "printf '%s\\n' " + g.words(p...), false
	case 2:
		return "printf '" + strings.Join(p, `\0`) + `\0'`, true
	case 3:
		return "{ echo " + g.words(p[0]) + "; echo " + g.words(p[1:]...) + "; }", false
	}
	return "cat <<<" + g.q(p.text()), false
}

// runTimeWrapper: xargs runs a wrapper whose command comes from its input.
func (g gen) runTimeWrapper(p payload) string {
	src, nul := g.feed(p)
	opts := g.one("", "-r ", "-t ", "--no-run ", "-P2 ")
	if nul {
		opts += g.one("-0 ", "--null ", "--nu ")
	} else if g.c.pick(2) == 0 {
		opts += g.one("-n9 ", "--max-args=9 ", "-s 4096 ")
	}
	wrapper := g.one("env", "timeout 5", "command", "nice", "nohup", "stdbuf -oL", "xargs", "env --", "timeout -s KILL 5", "sh -c '\"$0\" \"$@\"'")
	return src + " | " + g.readonlyWrap("xargs "+opts+wrapper)
}

// dangerousOptions are options of listed commands that write or run,
// with the shortest prefix getopt_long takes for the long ones.
var dangerousOptions = []struct {
	cmd    []string // command and subcommand
	long   string   // "--output", "" for a short one
	min    int      // shortest unambiguous prefix, in characters after --
	short  string   // "-o"
	value  string   // "" when it takes none
	after  []string // operands after
	equals bool     // only --opt=VALUE
}{
	{cmd: []string{"sort"}, long: "--output", min: 1, short: "-o", value: "/tmp/x", after: []string{"f"}},
	{cmd: []string{"sort"}, long: "--compress-program", min: 3, value: "sh", after: []string{"f"}},
	{cmd: []string{"sort"}, long: "--temporary-directory", min: 2, short: "-T", value: "/tmp", after: []string{"f"}},
	{cmd: []string{"file"}, long: "--compile", min: 2, short: "-C", after: []string{"-m", "magic"}},
	{cmd: []string{"date"}, long: "--set", min: 2, short: "-s", value: "2020-01-01"},
	{cmd: []string{"tree"}, short: "-o", value: "out"},
	{cmd: []string{"tree"}, short: "-R", after: []string{"-H", ".", "-L", "1"}},
	{cmd: []string{"rg"}, long: "--pre", min: 3, value: "./x", after: []string{"TODO"}},
	{cmd: []string{"rg"}, long: "--hostname-bin", min: 12, value: "./x", after: []string{"TODO"}},
	{cmd: []string{"git", "log"}, long: "--output", min: 6, value: "x.patch", after: []string{"-p"}},
	{cmd: []string{"git", "diff"}, long: "--ext-diff", min: 3},
	{cmd: []string{"git", "show"}, long: "--textconv", min: 5, after: []string{"HEAD"}},
	{cmd: []string{"git", "grep"}, long: "--open-files-in-pager", min: 2, short: "-O", value: "touch", after: []string{"x"}, equals: true},
	{cmd: []string{"git", "branch"}, long: "--edit-description", min: 6},
	{cmd: []string{"find", "."}, short: "-delete"},
	{cmd: []string{"find", "."}, short: "-fprint", value: "out"},
	{cmd: []string{"find", "."}, short: "-exec", value: "touch", after: []string{"{}", ";"}},
	{cmd: []string{"uniq", "in"}, short: "out"},
}

// longOption writes a listed command with one of its options that write or
// run, spelled as getopt_long takes it, or given at run time.
func (g gen) longOption() string {
	o := dangerousOptions[g.c.pick(len(dangerousOptions))]
	var opt []string
	switch {
	case o.long != "" && (o.short == "" || g.c.pick(2) == 0):
		name := o.long[:2+o.min+g.c.pick(len(o.long)-1-o.min)]
		switch {
		case o.value == "":
			opt = []string{name}
		case o.equals || g.c.pick(2) == 0:
			opt = []string{name + "=" + o.value}
		default:
			opt = []string{name, o.value}
		}
	case o.short != "" && o.value != "" && o.short[1] != '-' && len(o.short) == 2 && o.cmd[0] != "find" && g.c.pick(2) == 0:
		opt = []string{o.short + o.value} // attached
	case o.value != "":
		opt = []string{o.short, o.value}
	default:
		opt = []string{o.short}
	}
	ws := append(append(append([]string(nil), o.cmd...), opt...), o.after...)
	if o.cmd[0] == "find" || o.cmd[0] == "uniq" || g.c.pick(3) != 0 {
		return g.readonlyWrap(g.words(ws...))
	}
	// The option arrives at run time, where the command reads options.
	cmd, after := g.words(o.cmd...), g.words(o.after...)
	switch g.c.pick(3) {
	case 0:
		return "o=" + g.q(strings.Join(opt, " ")) + "; " + g.readonlyWrap(cmd+" $o "+after)
	case 1:
		return "o=" + g.q(opt[0]) + "; " + g.readonlyWrap(cmd+` "$o" `+g.words(opt[1:]...)+" "+after)
	}
	if len(o.cmd) > 1 && o.cmd[1] == "grep" {
		return "o=" + g.q(opt[0]) + "; " + cmd + ` $o ` + after // git grep stops at its pattern
	}
	return "echo " + g.words(opt...) + " | " + g.readonlyWrap("xargs "+g.words(append(append([]string(nil), o.cmd...), o.after...)...))
}

// evaluated: bash evaluates quoted text that runs the payload.
func (g gen) evaluated(p payload) string {
	code := "$(" + p.text() + ")"
	sub := "a[" + code + "]"
	assign := "x=" + g.q(sub) + "; "
	switch g.c.pick(16) {
	case 0:
		return assign + "echo $((x))"
	case 1:
		return assign + "echo $[x]"
	case 2:
		return assign + "(( x ))"
	case 3:
		return assign + "let x"
	case 4:
		return assign + "[[ $x -eq 0 ]]"
	case 5:
		return assign + "[[ x -lt 1 ]]"
	case 6:
		return assign + "echo ${b[x]}"
	case 7:
		return assign + "echo ${s:x}"
	case 8:
		return assign + "echo ${!x}"
	case 9:
		return assign + `test -v "$x"`
	case 10:
		return assign + `[ -v "$x" ]`
	case 11:
		return "printf -v " + g.q(sub) + " x"
	case 12:
		return "declare -i n=" + g.q(sub)
	case 13:
		return "x=" + g.q(code) + "; echo ${x@P}"
	case 14:
		return "declare " + g.q(sub+"=1")
	}
	return "test -v " + g.q(sub)
}

// gitRuns are git commands readonly lists and a variable that makes them
// run a command.
var gitRuns = []struct{ vars, cmd string }{
	{"GIT_PAGER=%s", "git log"},
	{"PAGER=%s", "git log"},
	{"GIT_EXTERNAL_DIFF=%s", "git diff"},
	{"GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0=%s", "git log"},
	{"GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.external GIT_CONFIG_VALUE_0=%s", "git diff"},
	{"GIT_EDITOR=%s", "git branch --edit-description"},
}

// envAssigned: an environment variable makes a listed command run the
// payload, set in one of the ways bash sets one.
func (g gen) envAssigned(p payload) string {
	if g.c.pick(4) == 0 {
		pre := g.one("PATH=./tools:$PATH ", "PATH=./tools ", "LD_PRELOAD=./x.so ", "LD_LIBRARY_PATH=./tools ")
		return g.readonlyWrap(pre + g.words("ls", "-la"))
	}
	r := gitRuns[g.c.pick(len(gitRuns))]
	v := g.q(p.text())
	if strings.HasPrefix(r.vars, "GIT_CONFIG_PARAMETERS") {
		v = `"'core.pager'='` + p.text() + `'"`
	}
	vars := fmt.Sprintf(r.vars, v)
	cmd := g.words(strings.Fields(r.cmd)...)
	switch g.c.pick(5) {
	case 0:
		return "export " + vars + "; " + g.readonlyWrap(cmd)
	case 1:
		return "env " + vars + " " + cmd
	case 2:
		return "declare -x " + vars + "; " + cmd
	case 3:
		return `GIT_CONFIG_PARAMETERS="'core.pager'='` + p.text() + `'" ` + cmd
	}
	return vars + " " + g.readonlyWrap(cmd)
}

// planted: a program with a listed name, not the listed one.
func (g gen) planted() string {
	name := g.one("ls", "cat", "grep", "git", "sort", "env", "timeout")
	dir := g.one("./", "tools/", "./tools/", "/tmp/", "/usr/local/bin/", "/usr/bin/../../tmp/", "../")
	x := g.q(dir+name) + " " + g.q("x")
	switch g.c.pick(6) {
	case 0:
		return g.readonlyWrap(x)
	case 1:
		return "find . | xargs " + x
	case 2:
		return "PATH=./tools:$PATH " + g.words(name, "x")
	case 3:
		return "env PATH=./tools " + g.words(name, "x")
	case 4:
		return "for PATH in ./tools; do " + g.words(name, "x") + "; done"
	}
	return x
}

// readonlyBenign returns a variant of a command readonly must allow,
// written with the same quoting, wrappers and contexts.
func (g gen) readonlyBenign() string {
	var x string
	switch g.c.pick(10) {
	case 9:
		return g.secretBenign()
	case 0:
		x = g.readonlyWrap(g.words("ls", "-la"))
	case 1:
		x = g.words("cat", "f") + " | " + g.words("grep", "x") + " | sort | " + g.words("uniq", "-c")
	case 2:
		x = g.readonlyWrap(g.words("git", "log", "--oneline", "-5"))
	case 3:
		x = g.readonlyWrap(g.words("git", "diff", "HEAD~1"))
	case 4:
		x = "find . -name " + g.q("*.go") + " | " + g.readonlyWrap("xargs "+g.words("grep", "foo"))
	case 5:
		x = g.words("sort", g.one("-u", "-r", "--reverse", "-k2", "-t:", "--uniq"), "f")
	case 6:
		x = "x=" + g.q("a b") + "; " + g.words("grep", "-n") + ` "$x" f`
	case 7:
		x = "echo $((1 + 2)) " + g.q("$x")
	default:
		x = g.words("/usr/bin/git", "status", "--short")
	}
	return g.contexts(x, true)
}

// catastrophic are the commands standard and trusted always deny.
var catastrophic = []payload{
	{"rm", "-rf", "/"}, {"rm", "-fr", "/"}, {"rm", "-r", "-f", "/"}, {"rm", "--recursive", "--force", "/"},
	{"rm", "--rec", "--for", "/"}, {"rm", "-Rf", "/"}, {"rm", "/", "-rf"}, {"rm", "-rf", "/tmp/x", "/"},
	{"rm", "-rf", "//"}, {"rm", "-rf", "/tmp/.."}, {"rm", "-rf", "/*"}, {"/bin/rm", "-rf", "/"},
	{"mkfs.ext4", "/dev/sda1"}, {"mkfs", "-t", "xfs", "/dev/vdb"}, {"/sbin/mkfs.vfat", "/dev/sdb1"},
	{"dd", "if=/dev/zero", "of=/dev/sda"}, {"dd", "of=/dev/nvme0n1", "if=x", "bs=4M"},
	{"rm", "-rf", "--", "/"}, {"rm", "-r", "--force", "/./"}, {"rm", "--no-preserve-root", "-rf", "/"},
}

const forkBomb = ":(){ :|:& };:"

// catastrophicVariant returns a variant that runs a catastrophic command.
func (g gen) catastrophicVariant() string {
	if g.c.pick(8) == 0 {
		return g.contexts(g.carry(forkBomb, false), false)
	}
	p := catastrophic[g.c.pick(len(catastrophic))]
	var x string
	switch g.c.pick(9) {
	case 8:
		x = g.retestCatastrophe(p)
	case 7:
		x = g.wrapAll(braced(p))
	case 0:
		x = g.wrapAll(g.words(p...))
	case 1:
		x = g.carry(p.text(), true)
	case 2:
		x = g.fedCatastrophic(p)
	case 3:
		x = g.runTimeValue(p)
	case 4:
		x = g.evaluated(p)
	case 5:
		x = g.envCarried(p)
	default:
		x = g.renamed(p)
	}
	return g.contexts(x, false)
}

// wrapAll puts the wrappers the engine knows around a command, and maybe
// assignments in front (only the shell, env and sudo take those).
func (g gen) wrapAll(x string) string {
	for n := g.c.pick(3); n > 0; n-- {
		x = g.one("sudo ", "sudo -u root -E ", "env ", "env FOO=1 ", "timeout 5 ", "timeout --sig=KILL 5 ",
			"nice -n 5 ", "nice -5 ", "nohup ", "command ", "exec ", "stdbuf -oL ", "setsid ", "time ",
			"ionice -c3 ", "busybox ", "chroot / ", "env - ", "doas ", "sudo FOO=1 ", "command -p ",
			"exec -a x ", "sudo -s ", "nice --adjustment=5 ", "timeout -k 1 5 ", "stdbuf --output=L ",
			"env -u HOME ", "env --chdir=/ ", "setsid -f ", "time -p ") + x
	}
	return g.one("", "", "PATH=/tmp:$PATH ", "LC_ALL=C ", "FOO=1 BAR=2 ") + x
}

// carry runs source text through a shell, eval and the like; simple says
// it is one simple command (env -S runs only such).
func (g gen) carry(src string, simple bool) string {
	switch g.c.pick(14) {
	case 0:
		return "bash -c " + shellQuote(src)
	case 1:
		return "sh -c " + shellQuote(src)
	case 2:
		return "eval " + shellQuote(src)
	case 3:
		return "bash <<< " + shellQuote(src)
	case 4:
		return "echo " + shellQuote(src) + " | sh"
	case 5:
		return "x=" + shellQuote(src) + `; eval "$x"`
	case 6:
		return "bash <(echo " + shellQuote(src) + ")"
	case 7:
		return ". /dev/stdin <<< " + shellQuote(src)
	case 8:
		return "su -c " + shellQuote(src)
	case 9:
		return "trap " + shellQuote(src) + " EXIT"
	case 10:
		if simple {
			return "env -S " + shellQuote(src)
		}
	case 11:
		return "bash <<" + g.one("EOF", "'EOF'", "-EOF") + "\n" + src + "\nEOF"
	case 12:
		return g.one("sudo -s", "sudo -i", "su", "su -", "chroot /") + " <<< " + shellQuote(src)
	}
	return src
}

// fedCatastrophic: xargs reads the command, or its operands, from text.
func (g gen) fedCatastrophic(p payload) string {
	src, nul := g.feed(p)
	opts := ""
	if nul {
		opts = g.one("-0 ", "--null ")
	}
	switch g.c.pick(5) {
	case 3:
		if len(p) > 1 {
			last := p[len(p)-1]
			return "xargs -I{} " + g.words(p[:len(p)-1]...) + " {} <<< " + g.q(last)
		}
	case 0:
		return "xargs " + g.one("env", "timeout 5", "nice") + " <<< " + g.q(p.text())
	case 1:
		return "xargs -a <(echo " + g.words(p...) + ") env"
	case 2:
		if len(p) > 1 {
			last := p[len(p)-1]
			return "echo " + g.q(last) + " | xargs " + g.words(p[:len(p)-1]...)
		}
	}
	return src + " | xargs " + opts + g.one("env", "timeout 5", "nice -n 1", "nohup", "command", "xargs", "stdbuf -oL")
}

// runTimeValue: the command's words come at run time, from values the text
// gives them.
func (g gen) runTimeValue(p payload) string {
	name, args := p[0], g.words(p[1:]...)
	switch g.c.pick(7) {
	case 0:
		return "$(echo " + g.q(name) + ") " + args
	case 1:
		return "`printf " + g.q(name) + "` " + args
	case 2:
		return "x=" + g.q(name) + "; $x " + args
	case 3:
		return "x=(" + g.words(p...) + `); "${x[@]}"`
	case 4:
		return "${u:-" + name + "} " + args
	case 5:
		return `bash -c "$(echo ` + shellQuote(p.text()) + `)"`
	}
	return "for c in ls " + g.q(name) + "; do $c " + args + "; done"
}

// braced writes a command as one brace expansion, {rm,-rf,/}, when its
// words allow.
func braced(p payload) string {
	for _, w := range p {
		if strings.ContainsAny(w, ",{}*") {
			return p.text()
		}
	}
	return "{" + strings.Join(p, ",") + "}"
}

// envCarried: a variable or git -c holds the command a program runs.
func (g gen) envCarried(p payload) string {
	v := g.q(p.text())
	switch g.c.pick(7) {
	case 0:
		return "GIT_PAGER=" + v + " git log"
	case 1:
		return "git -c core.pager=" + v + " log"
	case 2:
		return "git -c alias.x=" + g.q("!"+p.text()) + " x"
	case 3:
		return "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0=" + v + " git log"
	case 4:
		return "export EDITOR=" + v
	case 5:
		return "LESSOPEN=" + g.q("|"+p.text()+" %s") + " less f"
	}
	return "GIT_EXTERNAL_DIFF=" + v + " git diff"
}

// renamed: the command name spelled as a path or a glob.
func (g gen) renamed(p payload) string {
	name := baseName(p[0])
	var spelled string
	switch name {
	case "rm":
		spelled = g.one("/bin/rm", "/usr/bin/rm", "./rm", "/bin/rm*", "/bin/r[m]", "/bin/[r]m", "/usr/bin/../bin/rm")
	case "dd":
		spelled = g.one("/bin/dd", "/usr/bin/d[d]", "./dd")
	default:
		spelled = g.one("/sbin/"+name, "/sbin/mkfs.e*", "/usr/sbin/"+name)
		if strings.Contains(spelled, "*") && !strings.HasPrefix(name, "mkfs.e") {
			spelled = "/sbin/" + name
		}
	}
	rest := g.words(p[1:]...)
	if strings.ContainsAny(spelled, "*?[") {
		return spelled + " " + rest // a glob works only unquoted
	}
	return g.q(spelled) + " " + rest
}

// standardBenign returns a variant of a command standard and trusted allow.
func (g gen) standardBenign() string {
	cmds := []payload{
		{"rm", "-rf", "./build"}, {"rm", "-rf", "/tmp/build"}, {"dd", "if=/dev/zero", "of=/dev/null", "count=1"},
		{"grep", "-r", "rm -rf /", "."}, {"echo", "rm -rf /"}, {"chmod", "-R", "755", "./bin"},
		{"git", "status"}, {"go", "test", "./..."}, {"rm", "-r", "-f", "~/project/build"},
	}
	if g.c.pick(8) == 0 {
		return g.contexts(g.retestBenign(), true)
	}
	p := cmds[g.c.pick(len(cmds))]
	x := g.words(p...)
	for n := g.c.pick(3); n > 0; n-- {
		x = g.one("env ", "timeout 5 ", "nice -n 5 ", "nohup ", "command ", "time ", "env LC_ALL=C ") + x
	}
	x = g.one("", "LC_ALL=C ", "FOO=1 ") + x
	if g.c.pick(4) == 0 {
		x = g.one("bash -c ", "eval ", "sh -c ") + shellQuote(x)
	}
	return g.contexts(x, true)
}
