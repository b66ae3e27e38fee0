package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// fakeCLI records what it was given, says something on both streams and
// exits 7: the contract test's stand-in for a hosted agent CLI.
const fakeCLI = `#!/bin/sh
printf '%s\0' "$@" > rec.argv
pwd > rec.cwd
env -0 > rec.env
id -u > rec.uid
umask > rec.umask
echo out
echo err >&2
exit 7
`

// envNames reads `env -0` output into its names.
func envNames(b string) []string {
	var names []string
	for _, kv := range strings.Split(strings.TrimRight(b, "\x00"), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		if k != "" && k != "PWD" && k != "SHLVL" && k != "_" && k != "OLDPWD" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

func TestLaunchContract(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "hosted")
		if _, errs, code := c.run(fakeCLI, "exec", "hosted", "--", "sh", "-c", "cat > fake && chmod +x fake"); code != 0 {
			t.Fatal(errs)
		}
		base := envNames(c.ok("exec", "hosted", "--", "env", "-0"))
		c.env = append(c.env, "PASSED_KEY=the-value-42", "NOT_PASSED_SECRET=shh-43", "ANTHROPIC_API_KEY=sk-never-44")
		out, errs, code := c.run("", "launch", "--stdio", "--pass-env", "PASSED_KEY", "hosted", "--", "./fake", "a b", "$HOME", "", "x'y")
		if code != 7 || out != "out\n" || !strings.Contains(errs, "err") {
			t.Fatalf("stdio launch: %d %q %q", code, out, errs)
		}
		read := func(name string) string { return c.ok("exec", "hosted", "--", "cat", name) }
		if argv := strings.Split(strings.TrimSuffix(read("rec.argv"), "\x00"), "\x00"); !slices.Equal(argv, []string{"a b", "$HOME", "", "x'y"}) {
			t.Fatalf("argv: %q", argv)
		}
		env := read("rec.env")
		want := append(slices.Clone(base), "PASSED_KEY")
		slices.Sort(want)
		if got := envNames(env); !slices.Equal(got, want) {
			t.Fatalf("env names: %v, want %v", got, want)
		}
		if !strings.Contains(env, "PASSED_KEY=the-value-42") || strings.Contains(env, "shh-43") || strings.Contains(env, "sk-never-44") {
			t.Fatalf("env: %q", env)
		}
		if cwd := strings.TrimSpace(read("rec.cwd")); !strings.HasSuffix(cwd, "workspace") {
			t.Fatalf("cwd: %q", cwd)
		}
		if u := strings.TrimSpace(read("rec.umask")); u != "0022" {
			t.Fatalf("umask: %q", u)
		}
		uid := strings.TrimSpace(read("rec.uid"))

		// The receipt: what ran, as whom, how it ended; names, never values.
		var receipts []struct {
			Argv     []string `json:"argv"`
			Env      []string `json:"env"`
			Passed   []string `json:"passed"`
			IO       string   `json:"io"`
			ExitCode *int     `json:"exitCode"`
			Identity struct {
				UID   int    `json:"uid"`
				Umask string `json:"umask"`
			} `json:"identity"`
			Mounts []struct {
				Target string `json:"target"`
			} `json:"mounts"`
		}
		raw := c.ok("receipts", "hosted", "-o", "json")
		if err := json.Unmarshal([]byte(raw), &receipts); err != nil || len(receipts) != 1 {
			t.Fatalf("receipts: %v %s", err, raw)
		}
		r := receipts[0]
		if r.ExitCode == nil || *r.ExitCode != 7 || r.IO != "stdio" || !slices.Equal(r.Env, []string{"PASSED_KEY"}) ||
			fmt.Sprint(r.Identity.UID) != uid || r.Identity.Umask != "0022" || len(r.Mounts) == 0 || r.Argv[0] != "./fake" {
			t.Fatalf("receipt: %s", raw)
		}
		audit, err := os.ReadFile(filepath.Join(c.home, "logs", "audit.log"))
		if err != nil || !strings.Contains(string(audit), `"event":"launch.start"`) || !strings.Contains(string(audit), `"exitCode":7`) {
			t.Fatalf("audit: %v %s", err, audit)
		}
		for _, secret := range []string{"the-value-42", "shh-43", "sk-never-44"} {
			if strings.Contains(raw, secret) || strings.Contains(string(audit), secret) {
				t.Fatalf("%s is in a receipt or the audit log", secret)
			}
		}

		// On a PTY: the exit status is the program's too, and a status
		// above 128 is not mistaken for a signal.
		if _, _, code := c.run("", "launch", "--pty", "hosted", "--", "./fake"); code != 7 {
			t.Fatalf("pty launch: %d", code)
		}
		if _, _, code := c.run("", "launch", "--pty", "hosted", "--", "sh", "-c", "exit 130"); code != 130 {
			t.Fatalf("pty launch exit 130: %d", code)
		}
		last := c.ok("receipts", "hosted", "--format", "{{.ExitCode}} [{{.Signal}}]")
		if lines := strings.Split(strings.TrimSpace(last), "\n"); lines[len(lines)-1] != "130 []" {
			t.Fatalf("the receipt of exit 130: %q", last)
		}
		// A profile needing a network the neuron does not reach fails
		// before anything starts.
		c.ok("exec", "hosted", "--", "rm", "rec.argv")
		_, errs, code = c.run("", "launch", "--profile", "claude", "hosted", "--", "./fake")
		if net := strings.TrimSpace(c.ok("status", "hosted", "--format", "{{.Policy.Network.Mode}}")); net == "full" {
			if code != 7 { // process mode: the host's network reaches everything
				t.Fatalf("with a full network: %d %q", code, errs)
			}
		} else if code != 125 || !strings.Contains(errs, "api.anthropic.com") || !strings.Contains(errs, "nothing was started") {
			t.Fatalf("network fail-closed: %d %q", code, errs)
		}
		if _, _, code := c.run("", "exec", "hosted", "--", "test", "-e", "rec.argv"); code == 0 && !strings.Contains(errs, "no credentials") {
			t.Fatal("the program ran though the launch was refused")
		}
		if _, errs, code := c.run("", "launch", "--pass-env", "NOT_SET_ANYWHERE_X", "hosted", "--", "./fake"); code != 125 || !strings.Contains(errs, "not set") {
			t.Fatalf("%d %q", code, errs)
		}
	})
}

// SIGTERM to the launching CLI ends the program's whole process group.
func TestLaunchCancelLeavesNoOrphan(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "cancel")
		marker := fmt.Sprintf("%d", 700000+os.Getpid()%100000)
		for _, io := range []string{"--stdio", "--pty"} {
			cmd := c.command("launch", io, "cancel", "--", "sh", "-c", "sleep "+marker+" & sleep "+marker+"; wait")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			running := func() int { return len(hostProcesses("sleep", marker)) }
			waittest.For(t, 30*time.Second, io+": the program to start", func() bool { return running() >= 2 })
			cmd.Process.Signal(syscall.SIGTERM)
			err := cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
				t.Fatalf("%s: the CLI after SIGTERM: %v", io, err)
			}
			if !waittest.Until(30*time.Second, func() bool { return running() == 0 }) {
				ps, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,sid,stat,args", "--forest").Output()
				tl, _, _ := c.run("", "term", "list", "cancel")
				t.Fatalf("%s: %d of the program's processes outlived the launch; the CLI said %q\n%s\n%s", io, running(), stderr.String(), tl, ps)
			}
		}
	})
}

// BenchmarkLaunchFirstOutput: nsys-cortex launch of a program to its first
// output, against nsys-cortex exec of the same program, interleaved in
// the same run (both whole CLI invocations).
func BenchmarkLaunchFirstOutput(b *testing.B) {
	home := filepath.Join(b.TempDir(), "h")
	env := append(os.Environ(), "NSYS_CORTEX_HOME="+home, "NSYS_CORTEX_MODE=nsbox", "NSYS_CORTEX_AGENT_BIN=")
	run := func(args ...string) time.Duration {
		cmd := exec.Command(filepath.Join(binDir, "nsys-cortex"), args...)
		cmd.Env = env
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		one := make([]byte, 1)
		if _, err := out.Read(one); err != nil {
			b.Fatalf("%v: no output: %v", args, err)
		}
		took := time.Since(start)
		io.Copy(io.Discard, out)
		cmd.Wait()
		return took
	}
	setup := exec.Command(filepath.Join(binDir, "nsys-cortex"), "create", "lb")
	setup.Env = env
	if out, err := setup.CombinedOutput(); err != nil {
		b.Skipf("nsbox: %v %s", err, out)
	}
	defer func() {
		d := exec.Command(filepath.Join(binDir, "nsys-cortex"), "destroy", "--wipe", "lb")
		d.Env = env
		d.Run()
	}()
	var l, e []time.Duration
	for i := 0; i < b.N; i++ {
		e = append(e, run("exec", "lb", "--", "echo", "x"))
		l = append(l, run("launch", "--stdio", "lb", "--", "echo", "x"))
	}
	slices.Sort(l)
	slices.Sort(e)
	b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, "launch-p50-ms")
	b.ReportMetric(float64(e[len(e)/2].Microseconds())/1000, "exec-p50-ms")
	b.ReportMetric(float64(l[len(l)/2])/float64(e[len(e)/2]), "ratio")
}

// A profile whose program runs a sandbox of its own needs the neuron's
// consent to nested user namespaces: without it the launch fails before
// the spawn and says so; with it the inner sandbox runs.
func TestLaunchInnerSandbox(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("no bubblewrap on this machine (the inner sandbox of this test)")
	}
	if !slices.Contains(modes(t), "nsbox") {
		t.Skip("nsbox cannot run here")
	}
	c := newCLI(t, "nsbox")
	os.MkdirAll(filepath.Join(c.home, "profiles"), 0o700)
	os.WriteFile(filepath.Join(c.home, "profiles", "boxed.json"), []byte(`{"name":"boxed","description":"runs bubblewrap","io":"stdio",
		"env":{},"secrets":[],"network":[],"innerSandbox":"nested","notes":"test"}`), 0o600)
	inner := []string{"--", "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "sh", "-c", "echo inside-$((6*7))"}
	c.ok("create", "flat")
	_, errs, code := c.run("", append([]string{"launch", "--profile", "boxed", "flat"}, inner...)...)
	if code != 125 || !strings.Contains(errs, "nested user namespaces") || !strings.Contains(errs, "--nested-userns") {
		t.Fatalf("without consent: %d %q", code, errs)
	}
	// The inner sandbox "off" (generic): it runs, and fails on its own.
	if _, errs, code := c.run("", append([]string{"launch", "flat"}, inner...)...); code == 0 || !strings.Contains(errs, "namespace") {
		t.Fatalf("bwrap in a neuron that denies user namespaces: %d %q", code, errs)
	}
	c.ok("create", "--nested-userns", "nest")
	out, errs, code := c.run("", append([]string{"launch", "--profile", "boxed", "nest"}, inner...)...)
	if code != 0 || out != "inside-42\n" {
		t.Fatalf("with consent: %d %q %q", code, out, errs)
	}
	if pol := c.ok("status", "nest", "--format", "{{.Policy.NestedUserns}}"); strings.TrimSpace(pol) != "true" {
		t.Fatalf("policy: %q", pol)
	}
}

// A secret handed to a neuron every way — passed with --pass-env, in an
// argv, on an exec's stdin, in a file copied in — is in none of the host's
// own records afterwards: receipts, the audit log, the event log, the
// daemon's and the neurons' logs, the host's records of each neuron. (It
// is, as it should be, in the neuron's own files.) A receipt shows where
// it was masked, with a hash prefix to tell which value it was.
func TestLaunchSecretsStayOutOfRecords(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		const secret = "sk-proj-Zq81xVv0YkT3BlbkFJq7r2sWm4nLp9aXeDcR"
		c.ok("create", "keeps")
		c.handSecret("keeps", secret)
		if got := c.ok("exec", "keeps", "--", "cat", "via-argv", "via-stdin", "via-file"); strings.Count(got, secret) != 3 {
			t.Fatalf("the neuron's own files: %q", got)
		}
		raw := c.ok("receipts", "keeps", "-o", "json")
		if !strings.Contains(raw, "[REDACTED:OPENAI_API_KEY sha256:") {
			t.Fatalf("the receipt does not show the masked argv: %s", raw)
		}
		c.ok("destroy", "keeps") // its logs are written out, its records kept
		checked := 0
		filepath.WalkDir(c.home, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(c.home, path)
			parts := strings.Split(rel, string(filepath.Separator))
			if d.IsDir() {
				// The neuron's own data (its overlay's layers, its home) is
				// where the secret belongs; the host's records beside it
				// (dot files, receipts) are checked. Images and binaries
				// are the host's, unchanged by the neuron.
				if parts[0] == "images" || parts[0] == "bin" || len(parts) == 3 && parts[0] == "overlays" && !strings.HasPrefix(parts[2], ".") && parts[2] != "receipts" {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || strings.HasSuffix(rel, ".img") && parts[0] == "overlays" {
				return nil // a disk image holding the neuron's files (its disk ceiling)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			checked++
			if strings.Contains(string(b), secret) || strings.Contains(string(b), secret[8:24]) {
				t.Errorf("the secret is in %s", rel)
			}
			return nil
		})
		if checked < 5 {
			t.Fatalf("only %d records checked under %s", checked, c.home)
		}
	})
}

// TestLaunchWithASecret: a hosted CLI launched in a neuron created with
// --secret authenticates to its API with the key it never holds: it finds
// the placeholder where it reads its key, the egress proxy puts the value
// in; the receipt names the secret as proxied and holds no value, and
// --pass-env of that name is refused. (nsbox: the mode with the proxy.)
func TestLaunchWithASecret(t *testing.T) {
	if !slices.Contains(modes(t), "nsbox") {
		t.Skip("secrets need nsbox's egress proxy, and nsbox does not run here")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("the stand-in CLI is curl, from the host's /usr")
	}
	const value = "sk-ant-launch-0123456789abcdef"
	api, ca := sandboxtest.TLSServer(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != value {
			http.Error(w, "wrong key", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "authenticated")
	}))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, "nsbox")
	host := api.Listener.Addr().String()
	c.env = append(c.env, "ANTHROPIC_API_KEY="+value, "NSYS_CORTEX_EGRESS_UPSTREAM_CA="+caFile)
	c.ok("create", "--secret", "ANTHROPIC_API_KEY", "--secret-host", "ANTHROPIC_API_KEY="+host, "keyless")
	if out := c.ok("status", "keyless"); !strings.Contains(out, "ANTHROPIC_API_KEY") || strings.Contains(out, value) {
		t.Errorf("status: %q", out)
	}
	script := `curl -sS --max-time 20 --noproxy '' -H "x-api-key: $ANTHROPIC_API_KEY" https://` + host + `/v1/messages`
	out, errs, code := c.run("", "launch", "--stdio", "keyless", "--", "sh", "-c", script)
	if code != 0 || out != "authenticated" {
		t.Fatalf("the launched program: exit %d, %q, %q", code, out, errs)
	}
	if strings.Contains(errs, "no credentials passed") {
		t.Errorf("launch warned that no key was passed: %q", errs)
	}
	raw := c.ok("receipts", "keyless", "-o", "json")
	if strings.Contains(raw, value) || !strings.Contains(raw, `"proxied"`) || !strings.Contains(raw, "ANTHROPIC_API_KEY") {
		t.Errorf("the receipt: %s", raw)
	}
	if audit, _ := os.ReadFile(filepath.Join(c.home, "logs", "audit.log")); strings.Contains(string(audit), value) {
		t.Error("the audit log holds the key")
	}
	_, errs, code = c.run("", "launch", "--stdio", "--pass-env", "ANTHROPIC_API_KEY", "keyless", "--", "true")
	if code == 0 || !strings.Contains(errs, "is a secret of neuron keyless") {
		t.Errorf("--pass-env of the secret: exit %d, %q", code, errs)
	}
}
