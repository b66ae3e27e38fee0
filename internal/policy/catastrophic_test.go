package policy

import "testing"

// TestCatastrophicNormalised: the catastrophic denies of standard and
// trusted see the path an operand names (.., ~, $HOME, the working
// directory, globs), what find runs and removes, text that filters decode
// before a shell runs it, and the positional parameters.
func TestCatastrophicNormalised(t *testing.T) {
	t.Parallel()
	const A, Q, D = Allow, Ask, Deny
	tests := []struct {
		cmd  string
		want effects
	}{
		// Paths as they resolve.
		{`cd / && rm -rf *`, effects{D, D, D}},
		{`cd / && rm -rf .`, effects{D, D, D}},
		{`cd / && rm -rf ./*`, effects{D, D, D}},
		{`cd /usr && rm -rf ..`, effects{D, D, D}},
		{`cd /tmp; cd .. && rm -rf *`, effects{D, D, D}},
		{`rm -rf /.`, effects{D, D, D}},
		{`rm -rf /usr/..`, effects{D, D, D}},
		{`rm -rf ~/..`, effects{D, D, D}},
		{`rm -rf "$HOME"/..`, effects{D, D, D}},
		{`rm -rf ~/../..`, effects{D, D, D}},
		{`rm -rf /home/agent/../..`, effects{D, D, D}},
		{`rm -rf /usr`, effects{D, D, D}},
		{`rm -rf /[a-z]*`, effects{D, D, D}},
		{`rm -rf /?*`, effects{D, D, D}},
		{`rm -rf /u*`, effects{D, D, D}},
		{`cd ~ && rm -rf *`, effects{D, D, A}},
		{`cd ~ && rm -rf .`, effects{D, D, A}},
		{`cd /dev && dd if=/dev/zero of=sda`, effects{D, D, D}},
		// find runs {} as what it finds, the start points among them, and
		// -delete removes them.
		{`find / -delete`, effects{D, D, D}},
		{`find / -depth -delete`, effects{D, D, D}},
		{`find / -mindepth 1 -delete`, effects{D, D, D}},
		{`find / -type f -delete`, effects{D, D, D}},
		{`find / -name '*' -delete`, effects{D, D, D}},
		{`find / -name x -o -delete`, effects{D, D, D}},
		{`cd / && find -delete`, effects{D, D, D}},
		{`find ~ -delete`, effects{D, D, A}},
		{`find / -exec rm -rf {} +`, effects{D, D, D}},
		{`find / -exec rm -rf {} \;`, effects{D, D, D}},
		{`find / -execdir rm -rf {} \;`, effects{D, D, D}},
		{`find / -ok rm -rf {} \;`, effects{D, D, D}},
		{`find / -okdir rm -rf {} \;`, effects{D, D, D}},
		{`find /tmp / -xdev -exec rm -rf {} +`, effects{D, D, D}},
		{`find / -maxdepth 0 -exec sh -c 'rm -rf "$0"' {} \;`, effects{D, D, D}},
		{`find . -name '*.o' -delete`, effects{D, A, A}},
		{`find ~ -name '*.log' -delete`, effects{D, A, A}},
		{`find / -name '*.pyc' -exec rm -f {} +`, effects{D, A, A}},
		{`find /tmp/build -delete`, effects{D, A, A}},
		{`find . -type f -exec grep -l x {} +`, effects{D, A, A}},
		// Decode, then run.
		{`echo cm0gLXJmIC8K | base64 -d | sh`, effects{D, D, D}},
		{`echo cm0gLXJmIC8K | base64 --decode | bash`, effects{D, D, D}},
		{`base64 -d <<< cm0gLXJmIC8K | sh`, effects{D, D, D}},
		{`bash -c "$(echo cm0gLXJmIC8K | base64 -d)"`, effects{D, D, D}},
		{`echo OJWSALLSMYQC6CQ= | base32 -d | sh`, effects{D, D, D}},
		{`echo cm0gLXJmIC8K | openssl enc -base64 -d | sh`, effects{D, D, D}},
		{`echo 726d202d7266202f | xxd -r -p | sh`, effects{D, D, D}},
		{`echo / fr- mr | rev | xargs env`, effects{D, D, D}},
		{`echo / fr- mr | rev | sh`, effects{D, D, D}},
		{`echo 'rm -rf /' | tr a-z a-z | sh`, effects{D, D, D}},
		{`echo 'ez -es /' | tr a-z n-za-m | sh`, effects{D, D, D}},
		{`echo 'RM -RF /' | tr '[:upper:]' '[:lower:]' | sh`, effects{D, D, D}},
		{`echo H4sIAAAAAAAAAyvKVdAtSlPQ5wIAAOnmUAkAAAA= | base64 -d | gunzip | sh`, effects{D, D, D}},
		{`echo x | sed s/x/y/ | sh`, effects{D, Q, A}}, // a filter it does not read: dynamic code
		{`echo cHJpbnQoMSk= | some-decoder | python3`, effects{D, Q, A}},
		{`cat script.sh | sh`, effects{D, A, A}}, // a script file, not decoded text
		{`echo aGkK | base64 -d`, effects{D, A, A}},
		// The positional parameters.
		{`set -- rm -rf /; "$@"`, effects{D, D, D}},
		{`set rm -rf /; $1 $2 $3`, effects{D, D, D}},
		{`f(){ "$@"; }; f rm -rf /`, effects{D, D, D}},
		{`bash -c '"$@"' _ rm -rf /`, effects{D, D, D}},
		{`sh -c '$0 -rf /' rm`, effects{D, D, D}},
		{`set -- a b; echo "$@"`, effects{D, A, A}}, // readonly does not list set
		// What stays allowed.
		{`rm -rf /usr/local/build /tmp/x ./dist ~/project/build`, effects{D, A, A}},
		{`cd /tmp && rm -rf *`, effects{D, A, A}},
		{`rm -rf /var/tmp/x`, effects{D, A, A}},
		{`rm -rf "$BUILD_DIR"`, effects{D, A, A}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			t.Parallel()
			checkEffects(t, tt.cmd, tt.want)
		})
	}
}
