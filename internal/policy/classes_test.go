package policy

import (
	"fmt"
	"strings"
	"testing"
)

// reported are the commands the security review ran under a preset: each
// wrote a file or ran a program the preset should have kept out. The
// table keeps them, and their siblings, closed.
var reported = []struct {
	cmd    string
	preset string
	want   Effect // the most the preset may answer: Deny, or Ask
}{
	// Wrappers whose command arrives at run time.
	{`echo touch /tmp/x | xargs env`, "readonly", Deny},
	{`echo 5 touch /tmp/x | xargs timeout`, "readonly", Deny},
	{`echo touch /tmp/x | xargs timeout 5`, "readonly", Deny},
	{`printf 'touch\0/tmp/x\0' | xargs -0 env`, "readonly", Deny},
	{`echo rm -rf / | xargs env`, "standard", Deny},
	{`echo rm -rf / | xargs env`, "trusted", Deny},
	{`find . | xargs env`, "standard", Ask},
	// GNU long-option abbreviations and long forms.
	{`sort --out=/tmp/x f`, "readonly", Deny},
	{`git grep --open-files-in=touch x`, "readonly", Deny},
	{`file --compile -m magic`, "readonly", Deny},
	// Bash evaluating quoted text.
	{`printf -v 'a[$(touch /tmp/x)]' x`, "readonly", Deny},
	{`test -v 'a[$(touch /tmp/x)]'`, "readonly", Deny},
	{`x='a[$(touch /tmp/x)]'; [[ $x -eq 0 ]]`, "readonly", Deny},
	{`x='a[$(touch /tmp/x)]'; echo $((x))`, "readonly", Deny},
	{`x='a[$(touch /tmp/x)]'; let x`, "readonly", Deny},
	{`declare -i x='a[$(touch /tmp/x)]'`, "readonly", Deny},
	{`x='a[$(touch /tmp/x)]'; echo ${!x}`, "readonly", Deny},
	{`x='$(touch /tmp/x)'; echo ${x@P}`, "readonly", Deny},
	// Environment assignments that make git run commands.
	{`GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0='touch /tmp/x' git log`, "readonly", Deny},
	{`GIT_CONFIG_PARAMETERS="'core.pager'='touch /tmp/x'" git log`, "readonly", Deny},
	{`GIT_EXTERNAL_DIFF='touch /tmp/x' git diff`, "readonly", Deny},
	{`GIT_EDITOR='touch /tmp/x' git branch --edit-description`, "readonly", Deny},
	{`GIT_EXTERNAL_DIFF='rm -rf /' git diff`, "standard", Deny},
	{`GIT_EXTERNAL_DIFF='rm -rf /' git diff`, "trusted", Deny},
	// Names matched by basename.
	{`tools/ls`, "readonly", Deny},
	{`PATH=./tools:$PATH ls`, "readonly", Deny},
	// /proc environments of threads.
	{`cat /proc/1/task/1/environ`, "readonly", Deny},
	{`cat /proc/1/task/1/environ`, "standard", Deny},
}

func TestReportedBypasses(t *testing.T) {
	t.Parallel()
	for _, tt := range reported {
		t.Run(tt.preset+"/"+tt.cmd, func(t *testing.T) {
			p := mustPreset(t, tt.preset)
			d := p.Check(bash(tt.cmd))
			if d.Effect.Severity() < tt.want.Severity() {
				t.Fatalf("got %s by %s, want %s\n%s", d.Effect, d.Rule, tt.want, p.Explain(bash(tt.cmd)))
			}
		})
	}
}

// effects is what readonly, standard and trusted answer.
type effects [3]Effect

var presetOrder = [3]string{"readonly", "standard", "trusted"}

func checkEffects(t *testing.T, cmd string, want effects) {
	t.Helper()
	for i, name := range presetOrder {
		p := mustPreset(t, name)
		if d := p.Check(bash(cmd)); d.Effect != want[i] {
			t.Errorf("%s: got %s by %s, want %s\n%s", name, d.Effect, d.Rule, want[i], p.Explain(bash(cmd)))
		}
	}
}

// TestRunTimeCommands: a wrapper whose command only arrives when it runs
// (from xargs's input, a word that splits) runs an unknown command; one
// that the text feeds (echo ... | xargs) runs what the text shows.
func TestRunTimeCommands(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		// xargs with a static, listed command stays useful.
		{`find . -name '*.go' | xargs grep foo`, effects{A, A, A}},
		{`find . -print0 | xargs -0 grep -n foo`, effects{A, A, A}},
		{`find . | xargs -I X grep foo X`, effects{A, A, A}},
		{`ls | xargs`, effects{A, A, A}}, // runs echo
		{`xargs -a list wc -l`, effects{A, A, A}},
		// Its command is a wrapper: what runs comes from the input.
		{`find . | xargs env`, effects{D, Q, A}},
		{`xargs timeout`, effects{D, Q, A}},
		{`xargs timeout 5`, effects{D, Q, A}},
		{`xargs -0 env < list`, effects{D, Q, A}},
		{`xargs --null env`, effects{D, Q, A}},
		{`xargs --nu env`, effects{D, Q, A}},
		{`xargs -n1 nice`, effects{D, Q, A}},
		{`xargs nohup`, effects{D, Q, A}},
		{`xargs stdbuf -oL`, effects{D, Q, A}},
		{`xargs command`, effects{D, Q, A}},
		{`xargs xargs`, effects{D, Q, A}},
		{`xargs find`, effects{D, Q, A}},
		{`xargs env -S`, effects{D, Q, A}},
		{`xargs sh`, effects{D, Q, A}},
		{`xargs bash -c`, effects{D, Q, A}},
		{`xargs -I{} sh -c {}`, effects{D, Q, A}},
		{`xargs -i env {}`, effects{D, Q, A}},
		{`xargs --replace=X env X`, effects{D, Q, A}},
		{`xargs -I{} {}`, effects{D, Q, A}},
		{`xargs sh -c 'echo "$@"' sh`, effects{D, A, A}}, // the script is static
		// The input is in the text: what xargs runs is checked.
		{`echo rm -rf / | xargs env`, effects{D, D, D}},
		{`echo / | xargs rm -rf`, effects{D, D, D}},
		{`printf 'rm\n-rf\n/\n' | xargs env`, effects{D, D, D}},
		{`printf 'rm\0-rf\0/\0' | xargs -0 nice`, effects{D, D, D}},
		{`printf '%s\n' rm -rf / | xargs timeout 5`, effects{D, D, D}},
		{`{ echo rm; echo -rf /; } | xargs env`, effects{D, D, D}},
		{`xargs env <<< 'rm -rf /'`, effects{D, D, D}},
		{`xargs -a <(echo rm -rf /) env`, effects{D, D, D}},
		{`echo / | xargs -I{} rm -rf {}`, effects{D, D, D}},
		{`echo 'rm -rf /' | xargs -I{} sh -c {}`, effects{D, D, D}},
		{`xargs --arg x rm -rf /`, effects{D, D, D}}, // --arg is --arg-file: x is not the command
		// Wrapper options: abbreviations, values, clusters.
		{`env - rm -rf /`, effects{D, D, D}},
		{`env --split-str='rm -rf /'`, effects{D, D, D}},
		{`env -vS'rm -rf /'`, effects{D, D, D}},
		{`timeout --sig=KILL 5 rm -rf /`, effects{D, D, D}},
		{`timeout --kill 5 10 rm -rf /`, effects{D, D, D}},
		{`stdbuf --out=L rm -rf /`, effects{D, D, D}},
		{`sudo --us=root rm -rf /`, effects{D, D, D}},
		{`nice -5 rm -rf /`, effects{D, D, D}},
		{`su -lc 'rm -rf /'`, effects{D, D, D}},
		{`su root --comm='rm -rf /'`, effects{D, D, D}},
		{`su --session-command='rm -rf /'`, effects{D, D, D}},
		// Words that split leave the command unknown.
		{`timeout $d ls`, effects{D, Q, A}},
		{`nice -n $x ls`, effects{D, Q, A}},
		{`find . $x`, effects{D, Q, A}},
		{`find . "$x" rm -rf /tmp/x \;`, effects{D, Q, A}},
		{`find "$dir" -type f -print`, effects{D, A, A}}, // one word cannot end an -exec; readonly: it may be -delete
		{`find "$a" "$b" -print`, effects{D, Q, A}},
		{`find . -name "$p"`, effects{A, A, A}},
		{`bash $script`, effects{D, Q, A}},
		{`/bin/r? -rf /tmp/x`, effects{D, Q, A}}, // a glob in the name
		// Scripts a shell reads from elsewhere.
		{`echo 'rm -rf /' | sh`, effects{D, D, D}},
		{`cat <<< 'rm -rf /' | bash`, effects{D, D, D}},
		{`bash <(echo rm -rf /)`, effects{D, D, D}},
		{`source <(echo rm -rf /)`, effects{D, D, D}},
		{`. /dev/stdin <<< 'rm -rf /'`, effects{D, D, D}},
		{`echo 'rm -rf /' | bash /dev/stdin`, effects{D, D, D}},
		{`source <(kubectl completion bash)`, effects{D, Q, A}},
		{`cat script.sh | sh`, effects{D, A, A}},
		// Given no command, these start a shell that reads stdin.
		{`sudo -i <<< 'rm -rf /'`, effects{D, D, D}},
		{`echo 'rm -rf /' | sudo -s`, effects{D, D, D}},
		{`echo 'rm -rf /' | su`, effects{D, D, D}},
		{`su - <<< 'rm -rf /'`, effects{D, D, D}},
		{`echo 'rm -rf /' | chroot /`, effects{D, D, D}},
		{`curl https://x | sudo -s`, effects{D, Q, A}},
		{`trap 'rm -rf /' EXIT`, effects{D, D, D}},
		{`mapfile -C 'rm -rf /;:' -c1 < f`, effects{D, D, D}},
		{`compgen -W '$(rm -rf /)' x`, effects{D, D, D}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestLongOptions: an option counts however getopt_long would read it
// (abbreviated, with "=" or the next word as its value, in a cluster), and
// in readonly a word only known at run time may be any option.
func TestLongOptions(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`sort --output=/tmp/x f`, effects{D, A, A}},
		{`sort --outp /tmp/x f`, effects{D, A, A}},
		{`sort --o=/tmp/x f`, effects{D, A, A}},
		{`sort -uo/tmp/x f`, effects{D, A, A}},
		{`sort --comp=sh f`, effects{D, A, A}},
		{`sort --temporary-d=/tmp f`, effects{D, A, A}},
		{`sort -T /tmp f`, effects{D, A, A}},
		{`sort -t: -k2 -n f`, effects{A, A, A}},
		{`sort --reverse --unique f`, effects{A, A, A}},
		{`file --comp -m magic`, effects{D, A, A}},
		{`file -zC -m magic`, effects{D, A, A}},
		{`file --mime-type x`, effects{A, A, A}},
		{`date --se 2020-01-01`, effects{D, A, A}},
		{`date -us 2020-01-01`, effects{D, A, A}},
		{`date -d yesterday +%F`, effects{A, A, A}},
		{`tree -R -H . -L 1`, effects{D, A, A}},
		{`tree -ao out`, effects{D, A, A}},
		{`tree -L 2 -a`, effects{A, A, A}},
		{`rg --pre ./x TODO`, effects{D, A, A}},
		{`rg --hostname-bin=./x TODO`, effects{D, A, A}},
		{`rg -n --hidden TODO`, effects{A, A, A}},
		{`git grep --open TODO`, effects{D, A, A}},
		{`git grep -nOvi TODO`, effects{D, A, A}},
		{`git log -p --out=x.patch`, effects{D, A, A}},
		{`git show --ext HEAD`, effects{D, A, A}},
		{`git diff --ext-diff`, effects{D, A, A}},
		{`git log -p --textconv`, effects{D, A, A}},
		{`git log -p --text`, effects{A, A, A}}, // --text is an option of its own
		{`git branch --edit-desc`, effects{D, A, A}},
		{`git log --oneline -5`, effects{A, A, A}},
		{`git diff HEAD~1`, effects{A, A, A}},
		{`git status --short`, effects{A, A, A}},
		// Aliases of short flags count abbreviated too.
		{`rm --rec --for /`, effects{D, D, D}},
		{`rm --recursive -f /`, effects{D, D, D}},
		{`chmod --recu 777 /`, effects{D, D, A}},
		// A word only known at run time may be any option: readonly denies
		// where that option would be denied; "--" ends the options.
		{`sort "$f"`, effects{D, A, A}},
		{`sort $f`, effects{D, A, A}},
		{`sort -- "$f"`, effects{A, A, A}},
		{`sort -k "$k" f`, effects{A, A, A}},
		{`sort ./"$f"`, effects{A, A, A}},
		{`sort -o$f x`, effects{D, A, A}},
		{`sort --output=$f x`, effects{D, A, A}},
		{`sort *`, effects{D, A, A}}, // a file may be named -o...
		{`sort ./*`, effects{A, A, A}},
		{`echo a | xargs sort`, effects{D, A, A}},
		{`uniq $f`, effects{D, A, A}}, // may split into IN OUT
		{`uniq "$f"`, effects{A, A, A}},
		{`uniq -f 1 in`, effects{A, A, A}},
		{`git log "$rev"`, effects{D, A, A}},
		{`git log --end-of-options "$rev"`, effects{A, A, A}},
		{`git log --grep "$p"`, effects{A, A, A}},
		{`git log --format="$f"`, effects{A, A, A}},
		{`git -C "$d" log`, effects{A, A, A}},
		{`git "$x" log`, effects{D, A, A}},
		{`rg foo "$d"`, effects{D, A, A}},
		{`rg -- foo "$d"`, effects{A, A, A}},
		{`date "$x"`, effects{D, A, A}},
		{`date -d "$x"`, effects{A, A, A}},
		{`file "$f"`, effects{D, A, A}},
		{`tree "$d"`, effects{D, A, A}},
		{`find . $x`, effects{D, Q, A}},
		{`cat "$f" | grep "$p"`, effects{A, A, A}},
		{`sort -u <(cat a b)`, effects{A, A, A}}, // /dev/fd/N, never an option
		{`diff <(sort a) <(sort b)`, effects{A, A, A}},
		{`git log --since=yesterday --author="$me"`, effects{A, A, A}},
		{`ls $d`, effects{A, A, A}},
		{`find . -name '*.go' | xargs grep foo`, effects{A, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestRuntimeEval: readonly denies the constructs in which bash evaluates
// text it only reads at run time, and keeps arithmetic on literals.
func TestRuntimeEval(t *testing.T) {
	t.Parallel()
	p := mustPreset(t, "readonly")
	std := mustPreset(t, "standard")
	tests := []struct {
		cmd  string
		want Effect
	}{
		{`echo $((x))`, Deny},
		{`echo $(( $x + 1 ))`, Deny},
		{`echo $[x]`, Deny},
		{`(( x ))`, Deny},
		{`for ((i=0; i<3; i++)); do echo $i; done`, Deny},
		{`let x=1`, Deny},
		{`a[i]=1`, Deny},
		{`a=([i]=1)`, Deny},
		{`echo ${a[i]}`, Deny},
		{`echo ${a[$(echo 1)]}`, Deny},
		{`echo ${s:n}`, Deny},
		{`echo ${s:0:$(echo 2)}`, Deny},
		{`[[ $x -eq 0 ]]`, Deny},
		{`[[ x -lt 1 ]]`, Deny},
		{`[[ -v a[$x] ]]`, Deny},
		{`[[ -v $x ]]`, Deny},
		{`test -v "$x"`, Deny},
		{`[ -v 'a[0]' ]`, Deny},
		{`test "$x" "$y"`, Deny},         // x may be -v
		{`[ -n $x ]`, Deny},              // $x may split into "x -o -v a[...]"
		{`[ -f "$f" -a -r "$f" ]`, Deny}, // four or more: any word may be an operator
		{`printf -v x %s y`, Deny},
		{`printf -vx %s y`, Deny},
		{`printf "$fmt" x`, Deny},
		{`declare -i n=1`, Deny},
		{`local -n ref=PATH`, Deny},
		{`typeset -I x`, Deny},
		{`declare "$spec"`, Deny},
		{`declare 'a[$(id)]=1'`, Deny},
		{`echo ${!x}`, Deny},
		{`echo ${!a[0]}`, Deny},
		{`echo ${x@P}`, Deny},
		{`env declare -i x=1`, Deny}, // not listed either
		// Literals are read as numbers, nothing else.
		{`echo $((1 + 2 * 3)) $((0x10)) $((2#101)) $(($# + 1))`, Allow},
		{`echo ${a[0]} ${a[-1]} "${a[@]}" ${#a[@]} ${#s} ${s:1:2}`, Allow},
		{`[[ 1 -eq 1 && -n $x && $x == y* ]]`, Allow},
		{`[[ -v HOME ]]`, Allow},
		{`[ -n "$x" ]`, Allow},
		{`[ -z "$x" ]`, Allow},
		{`[ "$x" = y ]`, Allow},
		{`[ "$x" ]`, Allow},
		{`[ -f x -a -r y ]`, Allow},
		{`test -v HOME`, Allow},
		{`printf '%s\n' "$x"`, Allow},
		{`printf -- -v`, Allow},
		{`echo ${!x*} ${!a[@]}`, Allow},
		{`declare -a arr=(1 2)`, Allow},
		{`export x`, Allow},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			d := p.Check(bash(tt.cmd))
			if d.Effect != tt.want {
				t.Fatalf("got %s by %s, want %s\n%s", d.Effect, d.Rule, tt.want, p.Explain(bash(tt.cmd)))
			}
			if tt.want == Deny && d.Rule != RuleRuntimeEval+" deny" && d.Rule != RuleCommandDefault+" deny" {
				t.Errorf("decided by %s, want %s", d.Rule, RuleRuntimeEval)
			}
			if d := std.Check(bash(tt.cmd)); d.Effect != Allow {
				t.Errorf("standard: got %s by %s, want allow", d.Effect, d.Rule)
			}
		})
	}
}

// TestEnvAssignments: readonly sets no environment variable but a few
// harmless ones, however the assignment is spelled; every preset checks the
// command lines variables like GIT_PAGER hold against its deny rules.
func TestEnvAssignments(t *testing.T) {
	t.Parallel()
	const A, D = Allow, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`PATH=./tools:$PATH ls`, effects{D, A, A}},
		{`PATH+=:. ls`, effects{D, A, A}},
		{`export PATH=/tmp; ls`, effects{D, A, A}},
		{`export 'PATH=/tmp'`, effects{D, A, A}},
		{`declare -x PATH=/tmp`, effects{D, A, A}},
		{`env PATH=/tmp ls`, effects{D, A, A}},
		{`env -i ls`, effects{D, A, A}},
		{`env - ls`, effects{D, A, A}},
		{`env -u PATH ls`, effects{D, A, A}},
		{`for PATH in /tmp; do ls; done`, effects{D, A, A}},
		{`: ${PATH:=/tmp}`, effects{D, A, A}},
		{`ls {PATH}>/dev/null`, effects{D, A, A}},
		{`coproc PATH { ls; }`, effects{D, A, A}},
		{`xargs --process-slot-var=PATH ls`, effects{D, A, A}},
		{`LD_PRELOAD=./x.so ls`, effects{D, A, A}},
		{`BASH_ENV=./x ls`, effects{D, A, A}},
		{`GIT_DIR=/tmp/evil git log`, effects{D, A, A}},
		{`GIT_CONFIG_GLOBAL=/tmp/c git log`, effects{D, A, A}},
		{`GIT_EXEC_PATH=/tmp git log`, effects{D, A, A}},
		{`GIT_PAGER=less git log`, effects{D, A, A}},
		{`PS4='$(id)' ls`, effects{D, A, A}},
		{`BASH_CMDS[ls]=/tmp/x; ls`, effects{D, A, A}},
		// Harmless ones, and shell variables.
		{`LANG=C LC_ALL=C TZ=UTC COLUMNS=80 NO_COLOR=1 ls`, effects{A, A, A}},
		{`x=1; echo "$x"`, effects{A, A, A}},
		{`f=$(ls | head -1); cat "$f"`, effects{A, A, A}},
		{`for f in a b; do wc -l "$f"; done`, effects{A, A, A}},
		{`export PATH`, effects{A, A, A}},
		{`env -u FOO ls`, effects{A, A, A}},
		// Command lines in variables meet the deny rules everywhere.
		{`GIT_PAGER='rm -rf /' git log`, effects{D, D, D}},
		{`PAGER='rm -rf /' man ls`, effects{D, D, D}},
		{`export EDITOR='rm -rf /'`, effects{D, D, D}},
		{`env GIT_SSH_COMMAND='rm -rf /' git fetch`, effects{D, D, D}},
		{`LESSOPEN='|rm -rf / %s' less f`, effects{D, D, D}},
		{`GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.x GIT_CONFIG_VALUE_0='!rm -rf /' git x`, effects{D, D, D}},
		{`GIT_CONFIG_PARAMETERS="'core.pager'='rm -rf /'" git log`, effects{D, D, D}},
		{`git -c core.pager='rm -rf /' log`, effects{D, D, D}},
		{`git -c alias.x='!mkfs.ext4 /dev/sda' x`, effects{D, D, D}},
		{`GIT_SSH_COMMAND="ssh -i $KEY" git fetch`, effects{D, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestCommandPaths: an allow rule for ls means the ls found through PATH or
// in the system's directories, not a program of that name elsewhere; deny
// rules match any path by its basename.
func TestCommandPaths(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`ls -la`, effects{A, A, A}},
		{`/bin/ls -la`, effects{A, A, A}},
		{`/usr/bin/git log`, effects{A, A, A}},
		{`//usr/bin/./cat f`, effects{A, A, A}},
		{`tools/ls`, effects{D, A, A}},
		{`./ls`, effects{D, A, A}},
		{`/tmp/ls`, effects{D, A, A}},
		{`/usr/local/bin/ls`, effects{D, A, A}},
		{`/usr/bin/../../tmp/ls`, effects{D, A, A}},
		{`~/bin/cat f`, effects{D, A, A}},
		{`command ./ls`, effects{D, A, A}},
		{`timeout 5 tools/grep x`, effects{D, A, A}},
		{`find . | xargs ./grep x`, effects{D, A, A}},
		{`./rm -rf /`, effects{D, D, D}},
		{`/tmp/x/rm -rf /`, effects{D, D, D}},
		{`tools/sudo id`, effects{D, Q, A}},
		// /proc: every process's and thread's environment and memory, and
		// other processes' open files.
		{`cat /proc/1/task/1/environ`, effects{D, D, A}},
		{`cat /proc/thread-self/environ`, effects{D, D, A}},
		{`cat /proc/self/task/12/environ`, effects{D, D, A}},
		{`cat /proc//1/./environ`, effects{D, D, A}},
		{`cat /proc/1/mem`, effects{D, D, A}},
		{`cat /proc/1/fd/3`, effects{D, D, A}},
		{`ls -l /proc/1/fd`, effects{A, A, A}},
		{`cat /proc/1/cmdline /proc/self/status`, effects{A, A, A}},
		{`echo x > /proc/self/root/etc/passwd`, effects{D, D, A}},
		{`echo 1 > /proc/sys/kernel/sysrq`, effects{D, D, A}},
		{`echo 1 > /sys/power/state`, effects{D, D, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
	t.Run("read tool", func(t *testing.T) {
		for _, name := range []string{"readonly", "standard"} {
			p := mustPreset(t, name)
			r := &Request{Tool: "read", Group: "fs_read", Paths: []PathAccess{{"/proc/1/task/1/environ", Read}}}
			if d := p.Check(r); d.Effect != Deny {
				t.Errorf("%s: got %+v", name, d)
			}
		}
	})
}

// TestSpeculation: the catastrophic denies of standard and trusted see
// through words the text gives values to, quoted text bash may evaluate
// later, and glob names.
func TestSpeculation(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`$(echo rm) -rf /`, effects{D, D, D}},
		{"`echo rm` -rf /", effects{D, D, D}},
		{`r$(echo m) -rf /`, effects{D, D, D}},
		{`$(printf 'rm -rf /')`, effects{D, D, D}},
		{`x=rm; $x -rf /`, effects{D, D, D}},
		{`for c in ls rm; do $c -rf /; done`, effects{D, D, D}},
		{`x=(rm -rf /); "${x[@]}"`, effects{D, D, D}},
		{`${x:-rm} -rf /`, effects{D, D, D}},
		{`d=/; rm -rf $d`, effects{D, D, D}},
		{`a=/; b="$a"; c=${b}; rm -rf $c`, effects{D, D, D}},
		{`x='rm -rf /'; eval "$x"`, effects{D, D, D}},
		{`x='rm -rf /'; bash -c "$x"`, effects{D, D, D}},
		{`bash -c "$(echo rm -rf /)"`, effects{D, D, D}},
		{`x=':(){ :|:& };:'; eval "$x"`, effects{D, D, D}},
		{`x='a[$(rm -rf /)]'; echo $((x))`, effects{D, D, D}},
		{`x='a[$(rm -rf /)]'; [[ $x -eq 0 ]]`, effects{D, D, D}},
		{`printf -v 'a[$(rm -rf /)]' x`, effects{D, D, D}},
		{`test -v 'a[$(mkfs.ext4 /dev/sda1)]'`, effects{D, D, D}},
		{`x='$(rm -rf /)'; echo ${x@P}`, effects{D, D, D}},
		{"x='`dd if=/dev/zero of=/dev/sda`'; echo ${x@P}", effects{D, D, D}},
		{`declare -i n='a[$(rm -rf /)]'`, effects{D, D, D}},
		{`echo "\$(rm -rf /)"`, effects{A, D, D}}, // text that may run later; readonly denies what would run it
		{"cat > f <<'EOF'\n$(rm -rf /)\nEOF", effects{D, D, D}},
		{`/bin/r? -rf /`, effects{D, D, D}},
		{`/bin/r[m] -rf /`, effects{D, D, D}},
		{`/sbin/mkfs.e* /dev/sda1`, effects{D, D, D}},
		// What the text does not show stays as it was.
		{`"$(which rm)" -rf /`, effects{D, Q, A}},
		{`rm -rf "$DIR"`, effects{D, A, A}},
		{`x=/tmp/build; rm -rf $x`, effects{D, A, A}},
		{`grep -r 'rm -rf /' .`, effects{A, A, A}},
		{`echo "$(date)" '$HOME'`, effects{A, A, A}},
		{`awk '{print $1}' f`, effects{D, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestShellReading: text is read as bash reads it where the parser reads
// it otherwise. Found by the generated variants (TestGeneratedVariants).
func TestShellReading(t *testing.T) {
	t.Parallel()
	const A, D = Allow, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		// A here-string is a word: its backslashes go before it is fed.
		{`bash <<< \r\m\ \-\r\f\ \/`, effects{D, D, D}},
		{`xargs env <<< \r\m\ \-\r\f\ \/`, effects{D, D, D}},
		// Each level of backquotes takes one level of backslashes off.
		{"echo `a \\`b \\\\\\`rm -rf /\\\\\\`\\``", effects{D, D, D}},
		{"echo `echo \\`\\\\\\\\l\\\\\\\\s -d /\\``", effects{A, A, A}},
		// Text sh may run is read as bash too: sh is bash on some systems.
		{`echo ':(){ :|:& };:' | sh`, effects{D, D, D}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestSpeculationBound: text that holds more text that may run, again and
// again, is read up to a bound, and what is left is dynamic.
func TestSpeculationBound(t *testing.T) {
	t.Parallel()
	cmd := `eval "$x"`
	for i := range 8 {
		cmd = fmt.Sprintf(`x='eval "$x"%s'; %s`, strings.Repeat(" ", i), cmd)
	}
	p := mustPreset(t, "standard")
	if d := p.Check(bash(cmd)); d.Effect != Ask || !strings.HasPrefix(d.Rule, RuleDynamicCommand) {
		t.Fatalf("got %+v", d)
	}
	ro := mustPreset(t, "readonly")
	long := "uniq" + strings.Repeat(" $f", 200)
	if d := ro.Check(bash(long)); d.Effect != Deny {
		t.Fatalf("readonly %q: got %+v", long[:20], d)
	}
}
