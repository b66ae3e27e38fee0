package policy

import (
	"slices"
	"testing"
)

// TestSplitEnvString: env -S strings split as GNU env 9.1 splits them
// (each row was checked against `env -v -S STRING true`).
func TestSplitEnvString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		want []string // nil: env refuses the string
	}{
		{`sort /etc/hostname\_-o/home/agent/ro2`, []string{"sort", "/etc/hostname", "-o/home/agent/ro2"}},
		{`rm\_-rf\_/`, []string{"rm", "-rf", "/"}},
		{`\_rm -rf /`, []string{"rm", "-rf", "/"}},
		{`rm -rf ${HOME}`, []string{"rm", "-rf", "${HOME}"}},
		{`a 'b c' "d\_e" f\tg`, []string{"a", "b c", "d e", "f\tg"}},
		{`x\c y z`, []string{"x"}},
		{`# comment`, []string{}},
		{`a #notcomment b #c`, []string{"a"}},
		{`'' x`, []string{"", "x"}},
		{`"" "a"'b'c`, []string{"", "abc"}},
		{`a\\b 'c\\d' 'e\'f' 'g\xh'`, []string{`a\b`, `c\d`, "e'f", `g\xh`}},
		{`p\nq`, []string{"p\nq"}},
		{`a"b c"d`, []string{"ab cd"}},
		{`x${FOO}y z`, []string{"x${FOO}y", "z"}},
		{`a\#b \$c \'d \"e`, []string{"a#b", "$c", "'d", `"e`}},
		{`'\_' "\_"`, []string{`\_`, " "}},
		{`bad\q`, nil},
		{`"unterminated`, nil},
		{`$FOO`, nil},
		{`"\c"`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			ws, err := splitEnvString(tt.s)
			if (err != nil) != (tt.want == nil) {
				t.Fatalf("error %v, want words %q", err, tt.want)
			}
			got := []string{}
			for _, w := range ws {
				got = append(got, w.val)
			}
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestEnvSplitString: what env runs after -S is checked as any command,
// options, assignments and all.
func TestEnvSplitString(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		{`env -S'sort /etc/hostname\_-o/home/agent/ro2'`, effects{D, A, A}},
		{`env -S'sort\_/etc/hostname\_-o\_/home/agent/ro2'`, effects{D, A, A}},
		{`env -S'find . -maxdepth 0\_-fprint\_/home/agent/ro3'`, effects{D, A, A}},
		{`env -S'git log\_--output=/home/agent/ro4'`, effects{D, A, A}},
		{`env -S'touch\_/tmp/p'`, effects{D, A, A}},
		{`env -S'sort\t-o\tx f'`, effects{D, A, A}},
		{`env -S'sort\n-o\nx f'`, effects{D, A, A}},
		{`env -S'sort "-o" x f'`, effects{D, A, A}},
		{`env -S'sort -o\_x f #' ls`, effects{D, A, A}},
		{`env -S'-S"sort -o x f"'`, effects{D, A, A}},
		{`env -S'-i ls'`, effects{D, A, A}}, // env -i empties PATH
		{`env -S'PATH=/tmp ls'`, effects{D, A, A}},
		{`env -S'-C /proc/self cat environ'`, effects{D, D, A}},
		{`env -S'cat\_${HOME}/.ssh/id_rsa'`, effects{D, D, A}},
		{`env -S'${SHELL}\_-c\_id'`, effects{D, Q, A}},
		{`env -S"$x"`, effects{D, Q, A}},
		{`env -S'bad\q' rm -rf /`, effects{D, Q, A}}, // GNU env refuses it; another env may not
		{`env -S'rm\_-rf\_/'`, effects{D, D, D}},
		{`env -S'rm -rf\_/'`, effects{D, D, D}},
		{`env -S'\_rm -rf /'`, effects{D, D, D}},
		{`env -S"rm -rf /"`, effects{D, D, D}},
		{`env -S'rm "-rf" '"'/'"`, effects{D, D, D}},
		{`env --split-string='rm -rf /'`, effects{D, D, D}},
		{`env -vS'rm\_-rf\_/'`, effects{D, D, D}},
		{`env -S'x-y=1 rm -rf /'`, effects{D, D, D}}, // any word with "=" is an assignment
		{`env a/b=c rm -rf /`, effects{D, D, D}},
		{`env -S'-- rm -rf /'`, effects{D, D, D}},
		{`env -S'sh -c "rm -rf /"'`, effects{D, D, D}},
		{`X=rm env -S'${X} -rf /'`, effects{D, D, D}},
		// What env runs that is fine.
		{`env -S'ls -la'`, effects{A, A, A}},
		{`env -S'grep\_-rn\_TODO .'`, effects{A, A, A}},
		{`env -S'rm -rf /;ls'`, effects{D, A, A}}, // rm's operand is "/;ls": not a shell
		{`env -S'rm\t-rf\t/'`, effects{D, A, A}},  // one word: \t puts a tab in it
		{`env -S'LANG=C sort f'`, effects{A, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}
