package main_test

import (
	"regexp"
	"strings"
	"testing"
)

// fakeArgv prints the name it was run by and each argument on a line: a
// stand-in for a program whose argv is what a test looks at.
const fakeArgv = `#!/bin/sh
printf '%s\n' "${0##*/}" "$@"
`

// installFakeArgv puts fakeArgv in the neuron's workdir as rec and as a
// program named -i, and returns a PATH that finds them first.
func installFakeArgv(t *testing.T, c *cli, id string) string {
	t.Helper()
	if _, errs, code := c.run(fakeArgv, "exec", id, "--", "sh", "-c", "cat > rec && chmod +x rec && cp rec ./-i"); code != 0 {
		t.Fatal(errs)
	}
	return "PATH=" + strings.TrimSpace(c.ok("exec", id, "pwd")) + ":/usr/bin:/bin"
}

// exec's words: flags before ID, or between ID and a -- (kubectl's
// exec POD -it -- sh); without that --, everything after ID is the
// command line (docker's rule). Process mode: the rule is the CLI's, the
// same in every mode.
func TestExecFlagsBetweenIDAndDash(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "words")
	path := installFakeArgv(t, c, "words")
	cases := []struct {
		stdin    string
		args     []string
		out      string // stdout, exactly; or a regexp when it starts with ^
		code     int
		stderrIn string // part of stderr, when it matters
	}{
		// Flags between ID and -- are flags, and take effect.
		{"in\n", []string{"exec", "words", "-i", "--", "cat"}, "in\n", 0, ""},
		{"in\n", []string{"exec", "-i", "words", "--", "cat"}, "in\n", 0, ""},
		{"in\n", []string{"exec", "words", "-n", "--", "cat"}, "", 0, ""},
		{"", []string{"exec", "words", "-it", "--", "sh", "-c", "tty"}, "^/dev/pts/[0-9]+\r?\n$", 0, ""},
		{"", []string{"exec", "words", "--timeout", "5s", "--", "sleep", "1"}, "", 0, ""},
		{"", []string{"exec", "words", "--timeout", "300ms", "--", "sleep", "30"}, "", 124, "--timeout"},
		{"", []string{"exec", "words", "-e", "A=b c", "--", "sh", "-c", "echo $A"}, "b c\n", 0, ""},
		{"", []string{"exec", "-e", "A=1", "words", "-e", "B=2", "--", "sh", "-c", "echo $A$B"}, "12\n", 0, ""},
		{"", []string{"exec", "words", "-d", "--", "sleep", "5"}, "^[0-9]+\n$", 0, ""},
		// A leading -- only marks where the command line starts.
		{"", []string{"exec", "words", "--", "./rec", "-la"}, "rec\n-la\n", 0, ""},
		{"", []string{"exec", "-e", path, "words", "--", "-i", "x"}, "-i\nx\n", 0, ""},
		// Without a -- after flags, everything after ID is the command line.
		{"", []string{"exec", "words", "./rec", "-la"}, "rec\n-la\n", 0, ""},
		{"", []string{"exec", "-e", path, "words", "-i", "x"}, "-i\nx\n", 0, ""},
		{"", []string{"exec", "words", "sh", "-c", "echo -i"}, "-i\n", 0, ""},
		{"", []string{"exec", "words", "./rec", "diff", "--", "f"}, "rec\ndiff\n--\nf\n", 0, ""},
		// Between ID and --, anything but a flag is an error naming it,
		// and nothing runs.
		{"", []string{"exec", "words", "--bogus", "--", "./rec"}, "", 125, "unknown flag: --bogus"},
		{"", []string{"exec", "words", "-z", "--", "./rec"}, "", 125, "unknown shorthand flag: 'z'"},
		{"", []string{"exec", "words", "-i", "./rec", "--", "x"}, "", 125, `"./rec" is not a flag`},
		{"", []string{"exec", "words", "--timeout", "--", "sleep", "1"}, "", 125, "flag needs an argument: --timeout"},
		{"", []string{"exec", "words", "-i", "--"}, "", 125, "give a neuron and a command"},
		// The flags there are checked together with those before ID.
		{"", []string{"exec", "words", "-d", "-t", "--", "sh"}, "", 125, "-d and -t cannot be combined"},
		{"", []string{"exec", "-d", "words", "-i", "--", "cat"}, "", 125, "-d and -i cannot be combined"},
		{"", []string{"exec", "words", "-h", "--", "./rec"}, "^Exec runs COMMAND", 0, ""},
	}
	for _, tc := range cases {
		out, errs, code := c.run(tc.stdin, tc.args...)
		match := out == tc.out
		if strings.HasPrefix(tc.out, "^") {
			match = regexp.MustCompile(tc.out).MatchString(out)
		}
		if !match || code != tc.code || !strings.Contains(errs, tc.stderrIn) {
			t.Errorf("nsys-cortex %q: exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				tc.args, code, out, errs, tc.code, tc.out, tc.stderrIn)
		}
	}

	// -i between ID and -- forwards a terminal's input; without it, a
	// command on a terminal reads nothing.
	r := c.onPty(t, 80, 24, "exec", "words", "-i", "--", "sh", "-c", "read x; echo got=[$x]")
	r.tty.Write([]byte("abc\n"))
	r.waitFor(t, "got=[abc]")
	if code := r.exit(t); code != 0 {
		t.Fatalf("-i on a terminal: exit %d, %q", code, r.output())
	}
	r = c.onPty(t, 80, 24, "exec", "words", "--", "sh", "-c", "read x; echo got=[$x]")
	r.waitFor(t, "got=[]")
	if code := r.exit(t); code != 0 {
		t.Fatalf("without -i on a terminal: exit %d, %q", code, r.output())
	}
}

// launch reads its words as exec does.
func TestLaunchFlagsBetweenIDAndDash(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "words")
	installFakeArgv(t, c, "words")
	io := func() string {
		lines := strings.Fields(c.ok("receipts", "words", "--format", "{{.IO}}"))
		return lines[len(lines)-1]
	}
	if out := c.ok("launch", "words", "--stdio", "--", "./rec", "a"); out != "rec\na\n" || io() != "stdio" {
		t.Fatalf("launch ID --stdio -- prog: %q, io %s", out, io())
	}
	// --pty, not the generic profile's stdio: the flag took effect.
	if out := c.ok("launch", "words", "--pty", "--", "./rec", "b"); out != "rec\r\nb\r\n" || io() != "pty" {
		t.Fatalf("launch ID --pty -- prog: %q, io %s", out, io())
	}
	// Without --, everything after ID is the program's.
	if out := c.ok("launch", "words", "./rec", "--stdio"); out != "rec\n--stdio\n" || io() != "stdio" {
		t.Fatalf("launch ID prog --stdio: %q", out)
	}
	before := c.ok("receipts", "words", "--format", "{{.ID}}")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"launch", "words", "--bogus", "--", "./rec"}, "unknown flag: --bogus"},
		{[]string{"launch", "words", "--stdio", "./rec", "--", "x"}, `"./rec" is not a flag`},
		{[]string{"launch", "words", "--stdio", "--"}, "give a neuron and a program"},
		{[]string{"launch", "--pty", "words", "--stdio", "--", "./rec"}, "--pty and --stdio contradict each other"},
	} {
		if out, errs, code := c.run("", bad.args...); code != 125 || out != "" || !strings.Contains(errs, bad.want) {
			t.Errorf("nsys-cortex %q: exit %d, stdout %q, stderr %q; want 125 and %q", bad.args, code, out, errs, bad.want)
		}
	}
	if after := c.ok("receipts", "words", "--format", "{{.ID}}"); after != before {
		t.Fatalf("a refused launch left a receipt:\n%s\nthen\n%s", before, after)
	}
}
