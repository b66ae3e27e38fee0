package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/logline"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func manager(t *testing.T) (sandbox.Manager, layout.Layout) {
	t.Helper()
	requireDocker(t)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := docker.New(e)
	t.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m, lay
}

// A missing image fails create at once with a typed error saying what to
// do, not after the boot timeout. The boot timeout is far beyond the wait
// below: a create that waited for it never fails in time.
func TestMissingImage(t *testing.T) {
	t.Setenv(docker.EnvTransport, "unix")
	m, _ := manager(t)
	t.Setenv(docker.EnvImage, "nsys-cortex-neuron:no-such-tag")
	created := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), "noimage", sandbox.CreateOptions{BootTimeout: time.Hour})
		created <- err
	}()
	err := waittest.Recv(t, 2*time.Minute, "create with a missing image to fail", created)
	var inv *sandbox.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "nsys-cortex image build") {
		t.Fatalf("create with a missing image: %v, want an InvalidError pointing at image build", err)
	}
	if all, _ := m.List(context.Background()); len(all) != 0 {
		t.Errorf("a failed create left %+v", all)
	}
}

// A daemon that does not answer: create says so (typed), and a neuron that
// was running shows as unknown, its data untouched.
func TestDaemonDown(t *testing.T) {
	t.Setenv(docker.EnvTransport, "unix")
	m, lay := manager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, "before", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ := m.Connect(ctx, "before")
	if err := c.WriteFile(ctx, "kept", []byte("data"), nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
	other := docker.New(sandbox.Env{Layout: lay, AgentBinary: env(t).AgentBinary})
	defer other.Close()
	_, err := other.Create(ctx, "during", sandbox.CreateOptions{})
	var un *sandbox.UnavailableError
	if !errors.As(err, &un) || !strings.Contains(err.Error(), "docker daemon does not answer") {
		t.Fatalf("create with the daemon down: %v, want UnavailableError", err)
	}
	st, err := other.Get(ctx, "before")
	if err != nil || st.Status != sandbox.StatusUnknown {
		t.Fatalf("a neuron while the daemon is down: %+v %v, want status unknown", st, err)
	}
	os.Unsetenv("DOCKER_HOST")
	if got, err := os.ReadFile(filepath.Join(lay.OverlayDir("before"), "home", "workspace", "kept")); err != nil || string(got) != "data" {
		t.Fatalf("the data: %q %v", got, err)
	}
	if st, err := m.Get(ctx, "before"); err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("after the daemon is back: %+v %v", st, err)
	}
}

// The host of a tcp neuron must present its token: a host with another
// one is not let in, and is told why it could not connect.
func TestWrongToken(t *testing.T) {
	t.Setenv(docker.EnvTransport, "tcp")
	t.Setenv(docker.EnvNetwork, testNetwork)
	m, lay := manager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, "tok", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}); err != nil {
		t.Fatal(err)
	}
	// The token is the neuron's per-start secret, in the host's record of
	// it: another host that reads a wrong one presents a wrong token.
	record := filepath.Join(lay.OverlayDir("tok"), ".channel")
	secret, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, []byte(strings.Repeat("0", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := docker.New(sandbox.Env{Layout: lay, AgentBinary: env(t).AgentBinary})
	defer other.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second) // a host gives up sooner than the default
	defer cancel()
	_, err = other.Connect(cctx, "tok")
	if !errdefs.IsNotRunning(err) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("connect with a wrong token: %v", err)
	}
	// The container never saw the token in its environment.
	c, err := m.Connect(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, &link.ExecRequest{Command: shell("env; cat /proc/1/environ | tr '\\0' '\\n'")})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(res.Stdout, bytes.TrimSpace(secret)) || bytes.Contains(res.Stdout, []byte(boot.SecretEnv)) {
		t.Errorf("the secret is in the environment: %s", res.Stdout)
	}
}

// A full disk where neurons are kept: create fails with a capacity error,
// an upload into a running neuron fails without touching what was there,
// and nothing is lost.
func TestFullOverlayStore(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for the overlay store")
	}
	t.Setenv(docker.EnvTransport, "unix")
	requireDocker(t)
	base := sandboxtest.ShortTempDir(t)
	store := filepath.Join(base, "ov")
	os.MkdirAll(store, 0o755)
	if err := syscall.Mount("tmpfs", store, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(store, syscall.MNT_DETACH) })
	lay, err := layout.New(filepath.Join(base, "h"), store)
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := docker.New(e)
	ctx := context.Background()
	t.Cleanup(func() {
		m.Destroy(ctx, "full", sandbox.DestroyOptions{Wipe: true})
		m.Close()
	})
	if _, err := m.Create(ctx, "full", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ := m.Connect(ctx, "full")
	if err := c.WriteFile(ctx, "precious", []byte("keep me"), nil); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(store, "filler"), "bs=64k").CombinedOutput(); err == nil {
		t.Fatalf("the filler did not fill the disk: %s", out)
	}
	err = c.WriteFile(ctx, "precious", bytes.Repeat([]byte("x"), 1<<20), nil)
	if err == nil {
		t.Fatal("an upload into a full disk succeeded")
	}
	if pe := (*protocol.Error)(nil); !errors.As(err, &pe) || pe.Code != protocol.CodeTooLarge {
		t.Errorf("an upload into a full disk: %v, want TOO_LARGE", err)
	}
	if got, err := c.ReadFile(ctx, "precious"); err != nil || string(got) != "keep me" {
		t.Fatalf("after the failed upload: %q %v", got, err)
	}
	_, err = m.Create(ctx, "second", sandbox.CreateOptions{})
	var ce *sandbox.CapacityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("create on a full disk: %v, want CapacityError", err)
	}
	if _, err := os.Stat(lay.OverlayDir("second")); !os.IsNotExist(err) {
		t.Errorf("the failed create left %s: %v", lay.OverlayDir("second"), err)
	}
}

func shell(script string) protocol.Command { return protocol.Command{Shell: script} }

// The review's reproduction: a neuron makes its agent log as fast as it
// can (here, a flood of garbage connections to the tcp transport's port,
// each a line). The log stays within the agent's budget, and no line of
// it carries the neuron's escape sequences.
func TestAgentLogIsBounded(t *testing.T) {
	t.Setenv(docker.EnvTransport, "tcp")
	t.Setenv(docker.EnvNetwork, testNetwork)
	n := newNeuron(t, "flood", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}})
	tool, err := sandboxtest.BuildHostile()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := n.c.WriteFile(ctx, "hostile", b, &link.WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	n.sh(fmt.Sprintf("./hostile flood 127.0.0.1:%d 60000", docker.AgentPort))
	var log []byte
	waittest.Until(time.Minute, func() bool {
		// The log path is asked each time: that copies what the
		// detached container printed into the log.
		logPath, err := n.m.(sandbox.LogPather).LogPath(ctx, "flood")
		if err != nil {
			return false
		}
		log, _ = os.ReadFile(logPath)
		return bytes.Contains(log, []byte("log limit reached"))
	})
	if !bytes.Contains(log, []byte("log limit reached")) {
		t.Fatalf("the flood did not reach the agent's log budget (%d bytes logged)", len(log))
	}
	if len(log) > logline.DefaultBudget+1<<20 {
		t.Errorf("the neuron's log holds %d bytes, past the agent's budget of %d", len(log), logline.DefaultBudget)
	}
	if bytes.ContainsRune(log, 0x1b) {
		t.Error("the log holds an escape sequence of the neuron's")
	}
	// The neuron is fine for all that.
	if out := n.sh("echo still"); out != "still\n" {
		t.Fatalf("after the flood: %q", out)
	}
}

// An image docker has but cannot start the agent of (here, an empty one):
// the container is created, its start fails, and the create fails at once
// leaving no container behind, stopped or created.
func TestFailedStartLeavesNoContainer(t *testing.T) {
	t.Setenv(docker.EnvTransport, "unix")
	m, lay := manager(t)
	imp := exec.Command("docker", "import", "-", "nsys-cortex-neuron:empty-test")
	imp.Stdin = bytes.NewReader(make([]byte, 1024)) // an empty tar: two zero blocks
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	t.Setenv(docker.EnvImage, "nsys-cortex-neuron:empty-test")
	_, err := m.Create(context.Background(), "nostart", sandbox.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "cortex-agent") {
		t.Fatalf("create from an image without the agent: %v, want docker's error naming it", err)
	}
	name := docker.ContainerName(lay, "nostart")
	out, err := exec.Command("docker", "ps", "--all", "--quiet", "--filter", "name=^"+name+"$").Output()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("the failed create left container %s: %q %v", name, out, err)
	}
}
