package policy

import "testing"

// TestAdversarialRetest holds every variant of an adversarial re-test of
// the presets, made after the review of TestReportedBypasses was closed,
// with what each preset answers: what must not get through is denied (or
// asked where the preset asks), and what stays allowed is there on
// purpose. The classes they belong to have tables of their own
// (TestEnvSplitString, TestPathsInWords, TestWorkingDirectory,
// TestCatastrophicNormalised) and generated variants (gen_retest_test.go).
func TestAdversarialRetest(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	retest := []struct {
		cmd  string
		want effects
	}{
		// Written against readonly (ro.txt, ro3.txt).
		{`for PATH in ./tools; do ls; done`, effects{D, A, A}},
		{`for PATH in /tmp/evil:/usr/bin; do ls; done`, effects{D, A, A}},
		{`select PATH in ./tools; do ls; break; done`, effects{D, A, A}},
		{`for HOME in /tmp/evil; do git log; done`, effects{D, A, A}},
		{`for GIT_DIR in /tmp/e; do git log; done`, effects{D, A, A}},
		{`cd /proc/self && cat environ`, effects{D, D, A}},
		{`cd /proc/1/task/1 && cat environ`, effects{D, D, A}},
		{`cat /proc/1/task/1/environ`, effects{D, D, A}},
		{`cat /proc/*/environ`, effects{D, D, A}},
		{`cat /proc/1/enviro[n]`, effects{D, D, A}},
		{`cat /proc/1/env*`, effects{D, D, A}},
		{`head -c 999 /proc/$$/environ`, effects{D, D, A}},
		{`cat < /proc/self/environ`, effects{D, D, A}},
		{`xargs -0 -a /proc/self/environ echo`, effects{D, D, A}},
		{`cat /dev/fd/3`, effects{D, D, A}},
		{`s=abc; x='y[$(touch /tmp/p)]'; echo ${s:x}`, effects{D, A, A}},
		{`s=abc; x='y[$(touch /tmp/p)]'; echo ${s:0:x}`, effects{D, A, A}},
		{`a=(1 2); x='y[$(touch /tmp/p)]'; echo ${a[x]}`, effects{D, A, A}},
		{`x='y[$(touch /tmp/p)]'; echo $[x]`, effects{D, A, A}},
		{`for f in *; do echo ${a[f]}; done`, effects{D, A, A}},
		{`for f in *; do echo ${s:f}; done`, effects{D, A, A}},
		{`for f in *; do echo "${@:f}"; done`, effects{D, A, A}},
		{`printf -v'a[$(touch /tmp/p)]' x`, effects{D, A, A}},
		{`printf -va[\$\(touch\ /tmp/p\)] x`, effects{D, A, A}},
		{`env -S'touch\_/tmp/p'`, effects{D, A, A}},
		{`env -S'${SHELL}\_-c\_id'`, effects{D, Q, A}},
		{`env --split-string='touch /tmp/p'`, effects{D, A, A}},
		{`timeout -s0 1 touch /tmp/p`, effects{D, A, A}},
		{`git diff --ext`, effects{D, A, A}},
		{`git log -p --textc`, effects{D, A, A}},
		{`git grep -nOvim x`, effects{D, A, A}},
		{`git grep --open x`, effects{D, A, A}},
		{`git -P log --output-di=x`, effects{D, A, A}},
		{`git diff --no-index a b --outpu=/tmp/x`, effects{D, A, A}},
		{`git --git-dir=/tmp/evil log`, effects{A, A, A}}, // readonly trusts the repositories in the neuron (docs/policy.md)
		{`git -C /tmp/evil status`, effects{A, A, A}},     // the same
		{`git log --output /tmp/x`, effects{D, A, A}},
		{`/bin/../home/agent/ls`, effects{D, A, A}},
		{`/usr/bin/../../tmp/ls`, effects{D, A, A}},
		{`//usr//bin/../../tmp/ls`, effects{D, A, A}},
		{`/usr/bin/./ls`, effects{A, A, A}}, // the system's ls
		{`exec 3>/tmp/p`, effects{D, A, A}},
		{`echo hi >| /tmp/p`, effects{D, A, A}},
		{`echo hi &>/tmp/p`, effects{D, A, A}},
		{`echo hi > >(cat)`, effects{D, A, A}},
		{`{ echo hi; } 2>/tmp/p`, effects{D, A, A}},
		{`echo x | sort -mo/tmp/p`, effects{D, A, A}},
		{`sort -u -o/tmp/p a`, effects{D, A, A}},
		{`sort --ou /tmp/p a`, effects{D, A, A}},
		{`uniq -- a b`, effects{D, A, A}},
		{`uniq -f1 a b`, effects{D, A, A}},
		{`uniq -w 3 a -`, effects{D, A, A}},
		{`tree -fo /tmp/p`, effects{D, A, A}},
		{`tree -R`, effects{D, A, A}},
		{`tree --fromfile x`, effects{A, A, A}}, // reads the listing from x
		{`date -s@0`, effects{D, A, A}},
		{`date --se=@0`, effects{D, A, A}},
		{`file -C -m x`, effects{D, A, A}},
		{`file --comp -m x`, effects{D, A, A}},
		{`rg --pre=./x foo`, effects{D, A, A}},
		{`rg --pr ./x foo`, effects{D, A, A}},
		{`rg --hostname-b=./x foo`, effects{D, A, A}},
		{`find . -fprint /tmp/p`, effects{D, A, A}},
		{`find . -fls /tmp/p`, effects{D, A, A}},
		{`find . -fprintf /tmp/p %p`, effects{D, A, A}},
		{`xargs --process-slot-var=LD_PRELOAD ls`, effects{D, A, A}},
		{`xargs -I{} {} < /dev/null`, effects{D, Q, A}},
		{`echo touch /tmp/p | xargs -I% env %`, effects{D, Q, A}},
		{`echo touch /tmp/p | xargs -d, env`, effects{D, Q, A}},
		{`ls | xargs -n1 timeout 1`, effects{D, Q, A}},
		{`diff --paginate a b`, effects{A, A, A}}, // runs the system's pr
		{`printf '%s\n' touch /tmp/p | xargs env`, effects{D, Q, A}},
		{`echo 'dG91Y2ggL3RtcC9w' | xargs echo`, effects{A, A, A}},
		{`trap 'touch /tmp/p' EXIT`, effects{D, A, A}},
		{`test -R x`, effects{A, A, A}}, // -R does not evaluate a subscript
		{`[ -v 'a[$(touch /tmp/p)]' ]`, effects{D, A, A}},
		{`test "$(cat f)" -eq 1`, effects{A, A, A}}, // test's -eq reads numbers, not expressions
		{`[[ -n x && $(cat f) == y ]]`, effects{A, A, A}},
		{`declare -n r=x`, effects{D, A, A}},
		{`readonly PATH=./tools`, effects{D, A, A}},
		{`export -p`, effects{A, A, A}},
		{`command -p ls`, effects{A, A, A}},
		{`command ls`, effects{A, A, A}},
		{`type -P ls`, effects{A, A, A}},
		{`which -a ls`, effects{A, A, A}},
		{`cd tools; ls`, effects{A, A, A}}, // ls is /usr/bin/ls: PATH is the system's (policy.SystemPATH)
		{`cd tools && ./ls`, effects{D, A, A}},
		{`\ls`, effects{A, A, A}}, // the same ls
		{`l\s`, effects{A, A, A}},
		{`"ls"`, effects{A, A, A}},
		{`$'\x6cs'`, effects{A, A, A}},
		{`ls${x}`, effects{D, Q, A}},
		{`env -S'sort /etc/hostname\_-o/home/agent/ro2'`, effects{D, A, A}},
		{`env -S'sort\_/etc/hostname\_-o\_/home/agent/ro2'`, effects{D, A, A}},
		{`env -S'find . -maxdepth 0\_-fprint\_/home/agent/ro3'`, effects{D, A, A}},
		{`env -S'git log\_--output=/home/agent/ro4'`, effects{D, A, A}},
		// Written against standard and trusted (st.txt, st2.txt).
		{`env -S'rm\_-rf\_/'`, effects{D, D, D}},
		{`env -S'rm -rf\_/'`, effects{D, D, D}},
		{`env -S"rm -rf /"`, effects{D, D, D}},
		{`env -S'rm -rf ${HOME}'`, effects{D, D, A}}, // trusted does not protect the home
		{`env -S'\_rm -rf /'`, effects{D, D, D}},
		{`echo / fr- mr | rev | xargs env`, effects{D, D, D}},
		{`echo cm0gLXJmIC8K | base64 -d | sh`, effects{D, D, D}},
		{`echo 'rm -rf /' | tr a-z a-z | sh`, effects{D, D, D}},
		{`printf 'rm\x20-rf /' | xargs env`, effects{D, D, D}},
		{`printf '%b' 'rm\040-rf\040/' | xargs env`, effects{D, D, D}},
		{`echo -e 'rm\t-rf\t/' | xargs env`, effects{D, D, D}},
		{`xargs -a <(echo rm -rf /) env`, effects{D, D, D}},
		{`x=rm; y=/; $x -rf $y`, effects{D, D, D}},
		{`set -- rm -rf /; "$@"`, effects{D, D, D}},
		{`cd / && rm -rf *`, effects{D, D, D}},
		{`cd / && rm -rf .`, effects{D, D, D}},
		{`rm -rf /.`, effects{D, D, D}},
		{`rm -rf //`, effects{D, D, D}},
		{`rm -rf /usr/..`, effects{D, D, D}},
		{`rm -rf ~/..`, effects{D, D, D}},
		{`rm -rf "$HOME"/..`, effects{D, D, D}},
		{`rm -rf /home/agent/../..`, effects{D, D, D}},
		{`rm -rf --no-preserve-root /`, effects{D, D, D}},
		{`rm -r -f -- /`, effects{D, D, D}},
		{`find / -delete`, effects{D, D, D}},
		{`find / -exec rm -rf {} +`, effects{D, D, D}},
		{`dd if=/dev/zero of=/dev/vda`, effects{D, D, D}},
		{`cat /dev/zero > /dev/vda`, effects{D, D, D}},
		{`:(){ :|:& };:`, effects{D, D, D}},
		{`bomb(){ bomb|bomb& }; bomb`, effects{D, D, D}},
		{`cd /proc/1 && cat task/*/environ`, effects{D, D, A}},
		{`cat /proc/self/env?ron`, effects{D, D, A}},
		{`cat /proc/self/environ.`, effects{A, A, A}}, // no such file, and no glob
		{`cat /home/agent/.s?h/id_rsa`, effects{D, D, A}},
		{`cd ~/.ssh && cat id_rsa`, effects{D, D, A}},
		{`cat ~/.s[s]h/id_rsa`, effects{D, D, A}},
		{`cat /proc/self/root/home/agent/.ssh/id_rsa`, effects{D, D, A}},
		{`cd ~/.ss? && cat id_rsa`, effects{D, D, A}},
		// Explained without --neuron (t2.txt): read as bash, as they run.
		{`x='y[$(touch /home/agent/ro-pwned)]'; echo $[x]`, effects{D, A, A}},
		{`echo $[x]`, effects{D, A, A}},
		{`echo $[y[$(touch /tmp/p)]]`, effects{D, A, A}},
		{`echo $[1]`, effects{A, A, A}}, // arithmetic on a literal
	}
	for _, tt := range retest {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}
