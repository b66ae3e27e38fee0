package policy

import (
	"strings"
	"testing"
)

// TestPathPatternsMeet: a word with glob characters or run-time parts
// counts as a path a rule matches when the two patterns share a path, as
// bash expands the word: its wildcards do not match a leading ".".
func TestPathPatternsMeet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		word, rule string // word as glob text (NUL for a run-time part)
		want       bool
	}{
		{"/proc/1/env*", "/proc/**/environ", true},
		{"/proc/1/enviro[n]", "/proc/**/environ", true},
		{"/proc/self/env?ron", "/proc/**/environ", true},
		{"/proc/\x00/environ", "/proc/**/environ", true},
		{"/proc/\x00/task/*/environ", "/proc/**/environ", true},
		{"/proc/*", "/proc/**/environ", true}, // /proc/environ
		{"/proc/self/status", "/proc/**/environ", false},
		{"/proc/self/environ.", "/proc/**/environ", false},
		{"/home/agent/.s?h/id_rsa", "**/.ssh/**", true},
		{"/home/agent/.s[s]h/id_rsa", "**/.ssh/**", true},
		{"/home/agent/.ss*", "**/.ssh/**", true},
		{"/home/agent/.*/id_rsa", "**/.ssh/**", true},
		{"/home/agent/*/id_rsa", "**/.ssh/**", false},      // * does not match .ssh
		{"/home/agent/?ssh/id_rsa", "**/.ssh/**", false},   // nor does ?
		{"/home/agent/[.]ssh/id_rsa", "**/.ssh/**", false}, // nor [.]
		{"/home/agent/\x00/id_rsa", "**/.ssh/**", false},   // a run-time name is not a dot-name of its own
		{"/home/agent/.ss\x00/id_rsa", "**/.ssh/**", true},
		{"/home/agent/**/id_rsa", "**/.ssh/**", true}, // globstar
		{"/etc/host*", "/etc/**", true},
		{"/etcetera*", "/etc/**", false},
		{"/dev/[sv]d?", "/dev/{sd,hd,vd,xvd,nvme,mmcblk}*", true},
		{"/dev/null*", "/dev/{sd,hd,vd,xvd,nvme,mmcblk}*", false},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.word, "\x00", "$x")+" "+tt.rule, func(t *testing.T) {
			w := pathPat{elems: globElems(tt.word, true)}
			got := false
			for _, alt := range expandBraces(tt.rule) {
				got = got || w.meets(parseGlobPattern(alt))
			}
			if got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPathsInWords: path rules hold however a word spells the path:
// globs, run-time parts (/proc/$$), option values (-fF, --file=F, if=F),
// ~user, /dev/fd (a link to /proc/self/fd: descriptors 3 and up are
// whatever the command line or its parent opened).
func TestPathsInWords(t *testing.T) {
	t.Parallel()
	const A, D = Allow, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`cat /proc/1/env*`, effects{D, D, A}},
		{`cat /proc/1/enviro[n]`, effects{D, D, A}},
		{`cat /proc/self/env?ron`, effects{D, D, A}},
		{`head -c 999 /proc/$$/environ`, effects{D, D, A}},
		{`cat /proc/$PPID/environ`, effects{D, D, A}},
		{`cat "/proc/${BASHPID}/environ"`, effects{D, D, A}},
		{`cat /proc/*/task/*/environ`, effects{D, D, A}},
		{`cat ~/.s[s]h/id_rsa`, effects{D, D, A}},
		{`cat /home/agent/.s?h/id_rsa`, effects{D, D, A}},
		{`cat "$HOME/.ssh/id_rsa"`, effects{D, D, A}},
		{`cat $HOME/.ssh/id_rsa`, effects{D, D, A}},
		{`cat ~agent/.ssh/id_rsa`, effects{D, D, A}},
		{`cat ~/.aws/cred*`, effects{D, D, A}},
		{`xargs -0 -a/proc/self/environ echo`, effects{D, D, A}},
		{`grep -f/proc/self/environ x`, effects{D, D, A}},
		{`grep --file=/proc/self/environ x`, effects{D, D, A}},
		{`f=/proc/self/environ; cat "$f"`, effects{D, D, A}},
		{`echo ~/.ssh/id_rsa | xargs cat`, effects{D, D, A}},
		{`cat /dev/fd/3`, effects{D, D, A}},
		{`cat /dev/fd/*`, effects{D, D, A}},
		{`cat /dev/fd/../environ`, effects{D, D, A}},
		{`cat < /dev/fd/5`, effects{D, D, A}},
		{`cat /proc/self/fd/3`, effects{D, D, A}},
		// What they must not catch.
		{`cat /proc/self/status /proc/$$/cmdline /proc/$PPID/status`, effects{A, A, A}},
		{`cd /proc/$$ && cat status`, effects{A, A, A}},
		{`cat /proc/self/environ.`, effects{A, A, A}}, // no such file, no glob
		{`ls ~/*/README.md`, effects{A, A, A}},
		{`cat ~/$d/notes.txt`, effects{A, A, A}}, // as cat "$f": out of reach
		{`cat /etc/host*`, effects{A, A, A}},
		{`cat /dev/stdin`, effects{A, A, A}},
		{`echo x > /dev/stderr`, effects{A, A, A}},
		{`echo x 2>/dev/null >&2`, effects{A, A, A}},
		{`diff <(sort a) <(sort b)`, effects{A, A, A}},
		{`grep -rn TODO ./src`, effects{A, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}

// TestWorkingDirectory: relative paths are resolved against the directory
// the text leaves the shell in, read lexically in the order bash runs it.
func TestWorkingDirectory(t *testing.T) {
	t.Parallel()
	const A, D = Allow, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`cd /proc/self && cat environ`, effects{D, D, A}},
		{`cd /proc/1/task/1 && cat environ`, effects{D, D, A}},
		{`cd /proc/1 && cat task/*/environ`, effects{D, D, A}},
		{`cd /proc/self; cat ./environ`, effects{D, D, A}},
		{`cd /proc; cd self && cat environ`, effects{D, D, A}},
		{`cd /proc/self/fd && cat ../environ`, effects{D, D, A}},
		{`cd /tmp && cat ../proc/self/environ`, effects{D, D, A}},
		{`cd /proc/self && cat < environ`, effects{D, D, A}},
		{`cd /proc/self && cat $PWD/environ`, effects{D, D, A}},
		{`cd /proc/self && cat ~+/environ`, effects{D, D, A}},
		{`cd /proc/$$ && cat environ`, effects{D, D, A}},
		{`cd ~/.ssh && cat id_rsa`, effects{D, D, A}},
		{`cd ~/.ss? && cat id_rsa`, effects{D, D, A}},
		{`cd ~ && cat .ssh/id_rsa`, effects{D, D, A}},
		{`cd && cat .ssh/id_rsa`, effects{D, D, A}},
		{`cat .ssh/id_rsa`, effects{D, D, A}}, // in the workspace
		{`c\d /proc/self && cat environ`, effects{D, D, A}},
		{`builtin cd /proc/self && cat environ`, effects{D, D, A}},
		{`pushd /proc/self && cat environ`, effects{D, D, A}},
		{`if true; then cd /proc/self; fi; cat environ`, effects{D, D, A}},
		{`true || cd /proc/self; cat environ`, effects{D, D, A}},
		{`for d in /proc/self; do cd $d; done; cat environ`, effects{D, D, A}},
		{`d=/proc/self; cd "$d" && cat environ`, effects{D, D, A}},
		{`f(){ cd /proc/self; }; f; cat environ`, effects{D, D, A}},
		{`eval cd /proc/self; cat environ`, effects{D, D, A}},
		{`env -C /proc/self cat environ`, effects{D, D, A}},
		{`env --chdir=/proc/self cat environ`, effects{D, D, A}},
		{`git -C /proc/self diff --no-index environ /dev/null`, effects{D, D, A}},
		{`bash -c 'cat environ'`, effects{D, A, A}}, // readonly: bash is not listed
		{`cd /proc/self && bash -c 'cat environ'`, effects{D, D, A}},
		{`cd /proc/self && find . -maxdepth 1 -name environ | xargs cat`, effects{D, D, A}},
		{`cd /etc && echo x > hosts`, effects{D, D, A}},
		{`CDPATH=/proc; cd self && cat environ`, effects{D, D, A}},
		{`CDPATH=/x:/proc/1/task cd 1 && cat environ`, effects{D, D, A}},
		{`CDPATH=$x; cd self && cat environ`, effects{D, A, A}},
		// A directory only known at run time: readonly denies relative paths.
		{`cd "$d" && cat x`, effects{D, A, A}},
		{`cd - && cat environ`, effects{D, A, A}},
		{`cd "$d" && ls`, effects{A, A, A}}, // no relative path: as ls "$d"
		// What stays where it was.
		{`(cd /proc/self); cat environ`, effects{A, A, A}},
		{`cd /proc/self | cat environ`, effects{A, A, A}},
		{`echo $(cd /proc/self) && cat environ`, effects{A, A, A}},
		{`cd /proc/self && cat status`, effects{A, A, A}},
		{`cd src && wc -l *.go | sort -n`, effects{A, A, A}},
		{`cd /tmp && ls -la && cat notes.txt`, effects{A, A, A}},
		{`git -C "$d" log --oneline`, effects{A, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
	t.Run("the tool's cwd", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"readonly", "standard"} {
			p := mustPreset(t, name)
			r := bash(`cat environ`)
			r.Dir = "/proc/self"
			if d := p.Check(r); d.Effect != Deny {
				t.Errorf("%s: Dir /proc/self: got %+v", name, d)
			}
			r = bash(`cat environ`)
			r.DirUnknown = true // typed into a running shell
			if d := p.Check(r); (d.Effect == Deny) != (name == "readonly") {
				t.Errorf("%s: DirUnknown: got %+v", name, d)
			}
		}
	})
}
