package main_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// TestCtxInsideANeuron mounts /ctx with the CLI and gives it to an nsbox
// neuron (create --ctx): validated, so writable; the neuron sees only its
// own subtree; a directory that is not CortexFS is refused.
func TestCtxInsideANeuron(t *testing.T) {
	c, dir := ctxMounted(t)
	c.ok("create", "--ctx", dir, "cx1")
	c.ok("create", "cx2")
	// The model sees a new neuron within a second.
	var status, lastErr string
	waittest.Until(20*time.Second, func() bool {
		out, errOut, code := c.run("", "exec", "cx1", "--", "cat", "/ctx/neurons/cx1/status")
		if code != 0 {
			lastErr = errOut
			return false
		}
		status = out
		return true
	})
	if !strings.HasPrefix(status, "running mode=nsbox") {
		ls, lsErr, _ := c.run("", "exec", "cx1", "--", "ls", "-la", "/ctx", "/ctx/neurons")
		host, _ := os.ReadDir(filepath.Join(dir, "neurons"))
		t.Fatalf("status inside: %q (last error %q)\ninside: %s %s\nhost sees %d neurons", status, lastErr, ls, lsErr, len(host))
	}
	if out := c.ok("exec", "cx1", "--", "ls", "/ctx/neurons"); strings.TrimSpace(out) != "cx1" {
		t.Fatalf("the neuron sees %q in /ctx/neurons", out)
	}
	if _, _, code := c.run("", "exec", "cx1", "--", "cat", "/ctx/neurons/cx2/status"); code == 0 {
		t.Fatal("the neuron read another neuron's status")
	}
	// Writes reach the server (validated): a bad verb is EINVAL, not EROFS.
	_, errOut, code := c.run("", "exec", "cx1", "--", "bash", "-c", "echo bogus > /ctx/neurons/cx1/ctl")
	if code == 0 || !strings.Contains(errOut, "Invalid argument") {
		t.Fatalf("bad verb: exit %d, %q", code, errOut)
	}
	if out := c.ok("exec", "cx1", "--", "cat", "/ctx/neurons/cx1/policy.json"); !strings.Contains(out, `"ctxWritable": true`) && !strings.Contains(out, `"ctxWritable":true`) {
		t.Fatalf("policy.json: %s", out)
	}
	// What a neuron asks of the host through its own ctl goes through the
	// gate, under the policy of the tool kit that drives it: with
	// readonly's, it can neither snapshot nor stop itself (the review did
	// both with `sort --out=.../ctl`); with standard's it can.
	c.ok("tools", "call", "ls", "--neuron", "cx1", "--policy", "readonly", "--input", `{"path":"."}`)
	for _, verb := range []string{"snapshot s1", "stop"} {
		_, errOut, code := c.run("", "exec", "cx1", "--", "bash", "-c", "echo "+verb+" > /ctx/neurons/cx1/ctl")
		if code == 0 || !strings.Contains(errOut, "not permitted") {
			t.Errorf("%q under readonly: exit %d, %q; want EPERM", verb, code, errOut)
		}
	}
	if out := c.ok("exec", "cx1", "--", "cat", "/ctx/neurons/cx1/ctl"); !strings.Contains(out, "readonly") {
		t.Errorf("the ctl does not say why: %q", out)
	}
	if out := c.ok("snapshot", "list", "cx1"); strings.Contains(out, "s1") {
		t.Fatalf("a snapshot was taken past the gate: %s", out)
	}
	c.ok("tools", "call", "ls", "--neuron", "cx1", "--policy", "standard", "--input", `{"path":"."}`)
	c.ok("exec", "cx1", "--", "sh", "-c", "echo snapshot s2 > /ctx/neurons/cx1/ctl")
	// A restart through ctl is made by the mount's own process, which holds
	// the FUSE device: the restarted neuron must not hold it too (it could
	// answer the operator's /ctx in the mount's place).
	started := strings.TrimSpace(c.ok("status", "cx1", "--format", "{{.PID}}"))
	c.run("", "exec", "cx1", "--", "sh", "-c", "echo restart > /ctx/neurons/cx1/ctl")
	waittest.For(t, 60*time.Second, "cx1 to come back from its restart", func() bool {
		out, _, _ := c.run("", "status", "cx1", "--format", "{{.Status}} {{.PID}}")
		f := strings.Fields(out)
		return len(f) == 2 && f[0] == "running" && f[1] != started
	})
	if out := c.ok("exec", "cx1", "--", "sh", "-c", "ls -l /proc/self/fd/ /proc/1/fd/ 2>/dev/null; true"); strings.Contains(out, "fuse") {
		t.Fatalf("the neuron restarted by the mount holds its FUSE device:\n%s", out)
	}
	// A neuron that stops itself through its ctl (the review saw its
	// cgroup left behind after the wipe): stopped, wiped, nothing left.
	cgroups := cgroupsOf(t, c.home, "cx1")
	if len(cgroups) == 0 && os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" && os.Geteuid() == 0 {
		t.Error("no cgroup of the running cx1 found: as root, nsbox makes one in every hierarchy")
	}
	c.run("", "exec", "cx1", "--", "sh", "-c", "echo stop > /ctx/neurons/cx1/ctl")
	waittest.Until(30*time.Second, func() bool {
		out, _, _ := c.run("", "status", "cx1", "--format", "{{.Status}}")
		return strings.TrimSpace(out) == "stopped"
	})
	c.ok("destroy", "--wipe", "cx1")
	for _, d := range cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s is left after the wipe", d)
		}
	}
	// Anything else at --ctx is refused, loudly.
	plain := t.TempDir()
	if _, errOut, code := c.run("", "create", "--ctx", plain, "cx3"); code == 0 || !strings.Contains(errOut, "no CortexFS is mounted") {
		t.Fatalf("create --ctx on a plain directory: exit %d, %q", code, errOut)
	}
	if _, errOut, code := newCLI(t, "process").run("", "create", "--ctx", dir, "cx4"); code == 0 || !strings.Contains(errOut, "/ctx") {
		t.Fatalf("process mode with --ctx: exit %d, %q", code, errOut)
	}
}

// cgroupsOf lists the cgroup directories of neuron id of the home (nsbox
// names them <id>@<a hash of its overlay directory>) in every hierarchy.
func cgroupsOf(t *testing.T, home, id string) []string {
	t.Helper()
	lay, err := layout.New(home, "")
	if err != nil {
		t.Fatal(err)
	}
	name := id + "@" + lay.Tag()
	var out []string
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == name {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// TestSecretsStayOutOfCtx: a secret handed to a neuron every way (passed
// with --pass-env, in an argv, on an exec's stdin, in a file copied in)
// shows nowhere in /ctx: the neuron's status and state, its receipts
// (masked), the audit log. /ctx is the control plane: the neuron's own
// files, where the secret belongs, are not in it.
func TestSecretsStayOutOfCtx(t *testing.T) {
	c, dir := ctxMounted(t)
	const secret = "sk-proj-Ctx81xVv0YkT3BlbkFJq7r2sWm4nLp9aXeDcR"
	c.ok("create", "ctxkeeps")
	c.handSecret("ctxkeeps", secret)
	root := filepath.Join(dir, "neurons", "ctxkeeps")
	waittest.For(t, 20*time.Second, "the neuron in /ctx", func() bool {
		_, err := os.Stat(filepath.Join(root, "status"))
		return err == nil
	})
	read, receipts := 0, 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "ctl") || strings.HasSuffix(path, "input") {
			return nil
		}
		if !strings.HasPrefix(path, root) && !strings.HasPrefix(path, filepath.Join(dir, "audit")) {
			return nil // other neurons' and sessions: none here
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		read++
		if strings.Contains(path, "receipts") {
			receipts++
		}
		if strings.Contains(string(b), secret) || strings.Contains(string(b), secret[8:24]) {
			t.Errorf("the secret is in /ctx: %s", strings.TrimPrefix(path, dir))
		}
		return nil
	})
	if read < 5 || receipts == 0 {
		t.Fatalf("only %d files of /ctx read (%d receipts)", read, receipts)
	}
}

// ctxMounted mounts /ctx with the CLI (nsbox, as root, with FUSE) for the
// test's whole life, and returns the CLI and the mount's directory.
func ctxMounted(t *testing.T) (*cli, string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs /dev/fuse and root (to mount with allow_other)")
	}
	if !slices.Contains(modes(t), "nsbox") {
		t.Skip("nsbox cannot run here")
	}
	c := newCLI(t, "nsbox")
	dir := filepath.Join(t.TempDir(), "ctx")
	mount := c.command("mount", dir)
	stderr, _ := mount.StderrPipe()
	if err := mount.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mount.Process.Signal(syscall.SIGTERM)
		mount.Wait()
	})
	if line, err := bufio.NewReader(stderr).ReadString('\n'); err != nil || !strings.Contains(line, "validated") {
		t.Fatalf("mount said %q, %v", line, err)
	}
	return c, dir
}

// handSecret hands neuron id secret every way: passed with --pass-env
// (as OPENAI_API_KEY) to a launch that writes its argv's copy to
// via-argv, on an exec's stdin into via-stdin, and copied in as via-file.
func (c *cli) handSecret(id, secret string) {
	c.t.Helper()
	c.env = append(c.env, "OPENAI_API_KEY="+secret)
	if _, errs, code := c.run("", "launch", "--stdio", "--pass-env", "OPENAI_API_KEY", id, "--",
		"sh", "-c", `test "$OPENAI_API_KEY" = "$1" && echo "$1" > via-argv`, "sh", secret); code != 0 {
		c.t.Fatalf("launch: %d %s", code, errs)
	}
	if _, errs, code := c.run(secret+"\n", "exec", id, "--", "sh", "-c", "cat > via-stdin"); code != 0 {
		c.t.Fatal(errs)
	}
	host := filepath.Join(c.t.TempDir(), "key.txt")
	os.WriteFile(host, []byte(secret+"\n"), 0o600)
	c.ok("cp", host, id+":via-file")
}
