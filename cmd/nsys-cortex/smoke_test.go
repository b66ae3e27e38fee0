package main_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The real hosted CLIs, installed from the npm registry inside an nsbox
// neuron (its egress allows only the registry and the vendors' APIs), run
// their --version under --pty through launch. No credentials are used.
// Skipped, saying why, where node/npm or the registry is not there.
func TestHostedCLIsSmoke(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("no npm on this machine: the hosted CLIs cannot be installed")
	}
	if !slices.Contains(modes(t), "nsbox") {
		t.Skip("nsbox cannot run here")
	}
	c := newCLI(t, "nsbox")
	c.ok("create", "--allow", "registry.npmjs.org", "--allow", "api.anthropic.com", "--allow", "api.openai.com", "smoke")
	var grant []string
	if ca := os.Getenv("NODE_EXTRA_CA_CERTS"); ca != "" {
		grant = []string{"-e", "NODE_EXTRA_CA_CERTS=" + ca} // a TLS-inspecting proxy's CA, where there is one
	}
	version := regexp.MustCompile(`\d+\.\d+\.\d+`)
	for _, cli := range []struct{ profile, pkg, bin string }{
		{"claude", "@anthropic-ai/claude-code", "claude"},
		{"codex", "@openai/codex", "codex"},
	} {
		t.Run(cli.profile, func(t *testing.T) {
			args := append([]string{"exec"}, grant...)
			args = append(args, "smoke", "--", "sh", "-c", "cd ~ && npm install --no-audit --no-fund --loglevel=error --prefix ~/"+cli.profile+" "+cli.pkg)
			if out, errs, code := c.run("", args...); code != 0 {
				t.Skipf("npm could not install %s here (exit %d): %s%s", cli.pkg, code, out, lastLines(errs, 5))
			}
			bin := "/home/agent/" + cli.profile + "/node_modules/.bin/" + cli.bin
			launch := []string{"launch", "--pty", "--profile", cli.profile}
			if len(grant) > 0 {
				c.env = append(c.env, grant[1])
				launch = append(launch, "--pass-env", "NODE_EXTRA_CA_CERTS")
			}
			out, errs, code := c.run("", append(launch, "smoke", "--", bin, "--version")...)
			if code != 0 || !version.MatchString(out) {
				t.Fatalf("%s --version under --pty: exit %d\n%s\n%s", cli.bin, code, out, errs)
			}
			t.Logf("%s: %s", cli.bin, strings.TrimSpace(out))
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
