package docker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// privateDockerd is a docker daemon of the test's own, on its own socket
// and directories, so that restarting it stops no other test's
// containers.
type privateDockerd struct {
	t    *testing.T
	dir  string
	host string
	cmd  *exec.Cmd
}

func (d *privateDockerd) start() {
	d.t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command("dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=vfs",
		"--host", d.host, "--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "x"),
		"--pidfile", filepath.Join(d.dir, "dockerd.pid"))
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	if !waittest.Until(time.Minute, func() bool { return exec.Command("docker", "-H", d.host, "info").Run() == nil }) {
		b, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
		d.cmd.Process.Kill()
		d.cmd.Wait()
		d.t.Skipf("a second docker daemon does not start here:\n%s", b)
	}
}

func (d *privateDockerd) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-done
	}
}

// TestDockerdRestartDuringExec: the docker daemon restarted while an exec
// runs. The exec ends with a clear error (the neuron is not running), not
// a hang; the neuron's data stays; a create brings it back, and commands
// run in it again.
func TestDockerdRestartDuringExec(t *testing.T) {
	requireDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("a docker daemon of the test's own needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd is not installed")
	}
	d := &privateDockerd{t: t, dir: sandboxtest.ShortTempDir(t)}
	d.host = "unix://" + filepath.Join(d.dir, "d.sock")
	d.start()
	t.Cleanup(func() {
		exec.Command("sh", "-c", "docker -H "+d.host+" rm -f $(docker -H "+d.host+" ps -aq) 2>/dev/null").Run()
		d.stop()
	})
	if out, err := exec.Command("sh", "-c", "docker save "+testImage+" | docker -H "+d.host+" load").CombinedOutput(); err != nil {
		t.Fatalf("loading %s into the private daemon: %v %s", testImage, err, out)
	}
	t.Setenv("DOCKER_HOST", d.host)
	t.Setenv(docker.EnvTransport, "unix")
	m, _ := manager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, "rs", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(ctx, "rs")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "kept", []byte("data"), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: "sleep 600"}, Timeout: link.NoTimeout})
		done <- err
	}()
	waittest.For(t, 30*time.Second, "the sleep to start", func() bool {
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "ps | grep -q \"[s]leep 600\""}})
		return err == nil && res.ExitCode == 0
	})
	d.stop()
	select {
	case err := <-done:
		if !errdefs.IsNotRunning(err) {
			t.Errorf("the exec during the restart: %v, want a clear not-running error", err)
		}
		t.Logf("the exec ended with: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the exec hangs after the docker daemon stopped")
	}
	d.start()
	if _, err := m.Create(ctx, "rs", sandbox.CreateOptions{}); err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	c2, err := m.Connect(ctx, "rs")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c2.ReadFile(ctx, "kept"); err != nil || string(got) != "data" {
		t.Errorf("the data after the restart: %q %v", got, err)
	}
	if res, err := c2.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo back"}}); err != nil || string(res.Stdout) != "back\n" {
		t.Errorf("exec after the restart: %v %v", res, err)
	}
}
