package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/image"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// testImage is the busybox image the tests run, built from this tree's
// agent when the tests start.
const testImage = "nsys-cortex-neuron:test"

// testNetwork is a user-defined network for the tcp transport (a daemon
// started with --bridge=none has no default one to publish ports from).
const testNetwork = "nsys-cortex-test"

var (
	agentBin string
	setup    = sync.OnceValue(prepareDocker)
)

func TestMain(m *testing.M) {
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	os.Setenv(docker.EnvImage, testImage)
	os.Exit(m.Run())
}

// prepareDocker builds the test image and the test network, or says why
// this machine cannot run docker mode.
func prepareDocker() error {
	if c := docker.SelfCheck(context.Background(), sandbox.Env{}); !c.Items[1].OK {
		return fmt.Errorf("%s", c.Items[1].Detail)
	}
	sum, err := image.AgentSum(agentBin)
	if err != nil {
		return err
	}
	if image.Current(context.Background(), testImage, sum) {
		return ensureNetwork()
	}
	dir, err := os.MkdirTemp("", "cximg")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var log strings.Builder
	if err := image.Build(context.Background(), image.Options{RootFS: dir, Agent: agentBin, Test: true, Tag: testImage, Log: &log}); err != nil {
		return fmt.Errorf("building %s: %v\n%s", testImage, err, log.String())
	}
	return ensureNetwork()
}

func ensureNetwork() error {
	if exec.Command("docker", "network", "inspect", testNetwork).Run() == nil {
		return nil
	}
	if out, err := exec.Command("docker", "network", "create", testNetwork).CombinedOutput(); err != nil {
		return fmt.Errorf("docker network create %s: %v %s", testNetwork, err, out)
	}
	return nil
}

// requireDocker skips (saying why) where no docker daemon answers; in CI
// one does (.ci/run starts it), and nothing may skip there.
func requireDocker(t *testing.T) {
	t.Helper()
	if err := setup(); err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("docker mode cannot run here: %v", err)
		}
		t.Skipf("docker mode cannot run here: %v", err)
	}
}

func env(t testing.TB) sandbox.Env {
	return sandbox.Env{AgentBinary: func() (string, error) { return agentBin, nil }}
}

func dockerKill(t *testing.T, st *sandbox.State) {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label=nsys-cortex.id="+st.ID).Output()
	if err != nil || len(strings.Fields(string(out))) != 1 {
		t.Fatalf("finding the container of %s: %q %v", st.ID, out, err)
	}
	if out, err := exec.Command("docker", "kill", strings.TrimSpace(string(out))).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
}

// escapeExempt: the container's PID 1 is the agent, in the container's
// own namespaces (it is nsbox's PID 1 that lives in the host's network).
var escapeExempt = map[string]string{sandboxtest.SeePID1: "PID 1 is the agent, in the container's own namespaces"}

// lacks is what docker mode's lifecycle does not have.
var lacks = map[string]string{"pause --to-disk": "a container's memory is the host's own: docker pause keeps it there"}

// conformance is docker mode's configuration of the shared suites.
var conformance = sandboxtest.Config{
	New:          func(e sandbox.Env) sandbox.Manager { return docker.New(e) },
	Env:          env,
	Kill:         dockerKill,
	Detached:     true,
	ChannelDir:   docker.ChannelDir,
	EscapeExempt: escapeExempt,
	Lacks:        lacks,
}

// tcpConformance is the same over the tcp transport (what Docker Desktop
// gets): the agent listens on a published port, the host dials with a
// token.
var tcpConformance = sandboxtest.Config{
	New:          func(e sandbox.Env) sandbox.Manager { return docker.New(e) },
	Env:          env,
	Kill:         dockerKill,
	Detached:     true,
	Options:      sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}},
	ChannelDir:   docker.ChannelDir,
	EscapeExempt: escapeExempt,
	Lacks:        lacks,
}

func TestConformance(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.Run(t, conformance)
}

// The same suite over the tcp transport.
func TestConformanceTCP(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "tcp")
	t.Setenv(docker.EnvNetwork, testNetwork)
	sandboxtest.Run(t, tcpConformance)
}

// The lifecycle suite, over both transports: docker pause freezes the
// container, its cgroup says what it uses.
func TestLifecycle(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.RunLifecycle(t, conformance)
}

func TestLifecycleTCP(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "tcp")
	t.Setenv(docker.EnvNetwork, testNetwork)
	sandboxtest.RunLifecycle(t, tcpConformance)
}

// neuron is one running docker neuron for a test.
type neuron struct {
	t   *testing.T
	m   sandbox.Manager
	st  *sandbox.State
	c   *link.Client
	lay layout.Layout
}

func newNeuron(t *testing.T, id string, opts sandbox.CreateOptions) *neuron {
	t.Helper()
	requireDocker(t)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := docker.New(e)
	ctx := context.Background()
	st, err := m.Create(ctx, id, opts)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true})
		m.Close()
	})
	c, err := m.Connect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return &neuron{t: t, m: m, st: st, c: c, lay: lay}
}

func (n *neuron) sh(script string) string {
	n.t.Helper()
	res, err := n.c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: script}, Timeout: time.Minute})
	if err != nil {
		n.t.Fatalf("exec %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// From inside, the container is what RunArgs promises: no root, no
// capabilities, no privileges to gain, a read-only root, no network, two
// mounts of the host, none of the host's processes or secrets.
func TestBoundaryFromInside(t *testing.T) {
	t.Setenv(docker.EnvTransport, "unix")
	t.Setenv("NSYS_CORTEX_TEST_SECRET", "do-not-leak")
	n := newNeuron(t, "inside", sandbox.CreateOptions{Env: []string{"GRANTED=granted-value-42"}})
	checks := []struct{ what, script, want string }{
		{"not root", "id -u", "\n"},
		{"no capabilities", "grep CapEff /proc/self/status", "0000000000000000"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", "1"},
		{"a read-only root", "touch /usr/x 2>&1; touch /etc/x 2>&1", "Read-only file system"},
		{"a writable /tmp and home", "touch /tmp/x ~/x && echo ok", "ok"},
		{"only a loopback", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", "lo"},
		{"seccomp", "grep Seccomp: /proc/self/status", "2"},
	}
	for _, c := range checks {
		if got := n.sh(c.script); !strings.Contains(got, c.want) {
			t.Errorf("%s: `%s` gave %q, want %q", c.what, c.script, got, c.want)
		}
	}
	if got := strings.TrimSpace(n.sh("id -u")); got == "0" {
		t.Errorf("the neuron runs as root")
	}
	envInside := n.sh("env")
	if strings.Contains(envInside, "do-not-leak") {
		t.Errorf("a host secret reached the neuron: %s", envInside)
	}
	for _, want := range []string{"GRANTED=granted-value-42", "NSYS_CORTEX_NEURON=inside", "HOME=/home/agent"} {
		if !strings.Contains(envInside, want) {
			t.Errorf("the neuron's environment lacks %s:\n%s", want, envInside)
		}
	}
	// The container runs detached: no docker client stays on the host for
	// it (what the operator granted went through the client's env file,
	// never its command line: TestRunArgsPinned).
	if n.st.PID != 0 {
		t.Errorf("the neuron's state names a host process (pid %d)", n.st.PID)
	}
	if pids := clientsOf(docker.ContainerName(n.lay, n.st.ID)); len(pids) > 0 {
		t.Errorf("docker clients stay on the host for the neuron: %v", pids)
	}
	// Host mounts: the channel directory and the home, nothing else.
	mounts := n.sh("cat /proc/self/mountinfo")
	var binds []string
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[3] != "/" && !strings.HasPrefix(f[4], "/proc") && !strings.HasPrefix(f[4], "/dev") && !strings.HasPrefix(f[4], "/sys") {
			binds = append(binds, f[4])
		}
	}
	// Docker's own: the image's root, its init, and the three files it
	// writes for every container.
	docker := map[string]bool{"/": true, "/sbin/docker-init": true, "/etc/resolv.conf": true, "/etc/hostname": true, "/etc/hosts": true}
	ours := 0
	for _, b := range binds {
		switch {
		case b == "/run/nsys-cortex" || b == "/home/agent":
			ours++
		case !docker[b]:
			t.Errorf("a host path is mounted at %s (mounts: %v)", b, binds)
		}
	}
	if ours != 2 {
		t.Errorf("%d of the two mounts are there: %v", ours, binds)
	}
	if got := n.sh("ps -o pid,args | wc -l"); strings.TrimSpace(got) == "" {
		t.Error("ps printed nothing")
	}
	if got := n.sh("ps -o args"); strings.Contains(got, "dockerd") || strings.Contains(got, "go test") {
		t.Errorf("host processes are visible: %s", got)
	}
	if got := n.sh("ls /var/run/docker.sock /run/docker.sock 2>&1"); !strings.Contains(got, "No such file") {
		t.Errorf("the docker socket is reachable: %s", got)
	}
}

// Large files under the home are copied by the host itself (the home is a
// bind mount): they arrive owned by the container's uid, byte for byte,
// and what an agent's links point at outside the home still goes through
// the channel, where the container's own view decides.
func TestHostViewCopies(t *testing.T) {
	t.Setenv(docker.EnvTransport, "unix")
	n := newNeuron(t, "hostview", sandbox.CreateOptions{})
	ctx := context.Background()
	big := make([]byte, 3*protocol.ChunkSize+777)
	rand.Read(big)
	sum := fmt.Sprintf("%x", sha256.Sum256(big))
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := n.c.WriteFileFrom(ctx, "big", in, nil); err != nil {
		t.Fatal(err)
	}
	uid := strings.TrimSpace(n.sh("id -u"))
	if got := n.sh("stat -c '%u %a' big; sha256sum big"); !strings.Contains(got, uid+" 644\n") || !strings.Contains(got, sum) {
		t.Fatalf("inside the neuron: %q; want owner %s, mode 644, sha256 %s", got, uid, sum)
	}
	var out bytes.Buffer
	if _, err := n.c.ReadFileTo(ctx, "big", &out); err != nil || !bytes.Equal(out.Bytes(), big) {
		t.Fatalf("read back %d bytes: %v", out.Len(), err)
	}
	// A link to /tmp, the container's own tmpfs: through the channel.
	n.sh("ln -s /tmp/t tlink; ln -s ../../../etc esc")
	if err := n.c.WriteFile(ctx, "tlink", big, nil); err != nil {
		t.Fatal(err)
	}
	if got := n.sh("sha256sum /tmp/t"); !strings.Contains(got, sum) {
		t.Fatalf("through a link to /tmp: %q", got)
	}
	if got, err := n.c.ReadFile(ctx, "tlink"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read through a link to /tmp: %d bytes, %v", len(got), err)
	}
	// A link out of the home: the container's read-only root refuses, and
	// the host's /etc is never touched.
	err = n.c.WriteFile(ctx, "esc/cortex-planted", big, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodePermission {
		t.Fatalf("write through a link out of the home: %v, want PERMISSION", err)
	}
	if _, err := os.Stat("/etc/cortex-planted"); err == nil {
		os.Remove("/etc/cortex-planted")
		t.Fatal("a write through the neuron's link landed in the host's /etc")
	}
}

// clientsOf lists the host's processes whose command line names container
// name: docker clients attached to it.
func clientsOf(name string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), name) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// What the detached container's agent prints reaches the neuron's log once
// however often the log is read, and stays there after the container is
// gone. A socket in the channel directory that hangs up on the agent makes
// it log (a failed handshake).
func TestLogOfDetachedNeuron(t *testing.T) {
	n := newNeuron(t, "logged", sandbox.CreateOptions{Image: testImage})
	lp := n.m.(sandbox.LogPather)
	read := func() string {
		t.Helper()
		path, err := lp.LogPath(context.Background(), "logged")
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	hangUp := func(name string) net.Listener {
		t.Helper()
		// Made under a dot-name and renamed once it listens, as hosts do:
		// the agent removes a socket it finds nobody listening on.
		tmp := filepath.Join(n.st.SocketDir, "."+name)
		ln, err := net.Listen("unix", tmp)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		if err := os.Chmod(tmp, 0o777); err != nil { // the container's user may connect
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(n.st.SocketDir, name)); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln
	}
	ln := hangUp("hangup.sock")
	var log string
	waittest.For(t, 30*time.Second, "the agent's line in the neuron's log", func() bool {
		log = read()
		return strings.Contains(log, "hangup.sock")
	})
	ln.Close()
	for i := 0; i < 3; i++ {
		log = read()
	}
	// A line the log has not been read since is copied when the
	// container goes.
	ln = hangUp("later.sock")
	defer ln.Close()
	waittest.For(t, 30*time.Second, "the agent's second line at the daemon", func() bool {
		out, _ := exec.Command("docker", "logs", docker.ContainerName(n.lay, "logged")).CombinedOutput()
		return bytes.Contains(out, []byte("later.sock"))
	})
	if err := n.m.Destroy(context.Background(), "logged", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	after := read()
	if !strings.HasPrefix(after, log) || !strings.Contains(after[len(log):], "later.sock") || !strings.Contains(after[len(log):], "destroyed") {
		t.Errorf("after destroy the log is not what it was, the line printed since and one that says it was destroyed:\n%s", after)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, "cortex-agent[logged]") {
			if seen[line] {
				t.Errorf("the agent's line is in the log twice: %s", line)
			}
			seen[line] = true
		}
	}
	if len(seen) == 0 {
		t.Errorf("no line of the agent's in the log:\n%s", after)
	}
}

// Forks: the container's data is copied while docker pauses it.
func TestFork(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.RunForker(t, conformance)
}

func TestPorts(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.RunPorts(t, conformance)
}

func TestExport(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.RunExporter(t, conformance)
}

func TestDiff(t *testing.T) {
	requireDocker(t)
	t.Setenv(docker.EnvTransport, "unix")
	sandboxtest.RunDiffer(t, conformance)
}
