package nsbox_test

// Security regression tests: from inside a real neuron, everything a
// neuron must not do is tried, and must fail.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// neuron is one running neuron for a test.
type neuron struct {
	t   *testing.T
	m   *lifecycle.Manager
	env sandbox.Env
	st  *sandbox.State
	c   *link.Client
	ctx context.Context
}

func newNeuron(t *testing.T, id string, opts sandbox.CreateOptions) *neuron {
	t.Helper()
	return newNeuronWith(t, id, opts, nil)
}

// envInNewHome is env with a fresh short home.
func envInNewHome(t *testing.T) sandbox.Env {
	t.Helper()
	e := env(t)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e.Layout = lay
	return e
}

// newNeuronWith is newNeuron, with change applied to the mode's Env.
func newNeuronWith(t *testing.T, id string, opts sandbox.CreateOptions, change func(*sandbox.Env)) *neuron {
	t.Helper()
	requireNsbox(t)
	e := envInNewHome(t)
	if change != nil {
		change(&e)
	}
	m := nsbox.New(e)
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
	return &neuron{t: t, m: m, env: e, st: st, c: c, ctx: ctx}
}

// sh runs a shell command inside and returns its result.
func (n *neuron) sh(script string) *link.ExecResult {
	n.t.Helper()
	res, err := n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: script}, Timeout: time.Minute})
	if err != nil {
		n.t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// processes counts the neuron's processes, as the host sees them: those
// whose environment carries the neuron's mark, and its PID 1.
func (n *neuron) processes() int {
	mark := []byte("NSYS_CORTEX_NEURON=" + n.st.ID + "\x00")
	count := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(b, mark) {
			count++
		}
	}
	return count + 1
}

// cgroupPidsMaxHits reads how often the neuron's pids ceiling refused a fork.
func (n *neuron) cgroupPidsMaxHits() int {
	var dirs []string
	b, _ := os.ReadFile(filepath.Join(n.st.OverlayPath, ".cgroups"))
	json.Unmarshal(b, &dirs)
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "pids.events")); err == nil {
			var hits int
			fmt.Sscanf(string(b), "max %d", &hits)
			return hits
		}
	}
	return 0
}

// cgroupPids is how many tasks the neuron's pids cgroup holds now (-1
// without one): the dead a bomb leaves count until they are reaped.
func (n *neuron) cgroupPids() int {
	var dirs []string
	b, _ := os.ReadFile(filepath.Join(n.st.OverlayPath, ".cgroups"))
	json.Unmarshal(b, &dirs)
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "pids.current")); err == nil {
			if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return v
			}
		}
	}
	return -1
}

// install copies the escape program into the neuron.
func (n *neuron) install() {
	n.t.Helper()
	bin, err := sandboxtest.BuildEscape()
	if err != nil {
		n.t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.c.WriteFile(n.ctx, "escape", data, &link.WriteOptions{Mode: 0o755}); err != nil {
		n.t.Fatal(err)
	}
}

func TestEscapesFail(t *testing.T) {
	n := newNeuron(t, "sec", sandbox.CreateOptions{})
	n.install()
	planted := filepath.Join(sandboxtest.ShortTempDir(t), "planted-secret")
	os.WriteFile(planted, []byte("host secret"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	host := exec.Command("sleep", "300")
	host.Start()
	defer func() { host.Process.Kill(); host.Wait() }()
	port := ln.Addr().(*net.TCPAddr).Port
	// $PPID of the shell is the agent.
	res := n.sh(fmt.Sprintf("./escape -file %s -port %d -pid %d -agent $PPID", planted, port, host.Process.Pid))
	var results map[string]string
	if err := json.Unmarshal(res.Stdout, &results); err != nil || len(results) < 20 {
		t.Fatalf("escape program: %v\nstdout %s\nstderr %s", err, res.Stdout, res.Stderr)
	}
	for attempt, outcome := range results {
		if !strings.HasPrefix(outcome, "denied") {
			t.Errorf("%s: %s", attempt, outcome)
		} else {
			t.Logf("%-28s %s", attempt, outcome)
		}
	}
	if _, err := os.Stat("/usr/bin/cortex-escape-test"); err == nil {
		t.Fatal("the neuron wrote into the host's /usr")
	}
}

func TestIdentity(t *testing.T) {
	n := newNeuron(t, "who", sandbox.CreateOptions{})
	out := string(n.sh("id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; hostname; echo made > owned; ls /proc | grep -c '^[0-9]'").Stdout)
	lines := strings.Fields(out)
	want := []string{"1000", "1000", "CapPrm:", "0000000000000000", "CapEff:", "0000000000000000", "NoNewPrivs:", "1", "Seccomp:", "2", "who"}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Fatalf("inside: %q, want %q at %d", out, w, i)
		}
	}
	// A file the agent makes is not root's on the host.
	upper := filepath.Join(n.st.OverlayPath, "upper", "root", "home", "agent", "workspace", "owned")
	st, err := os.Stat(upper)
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Fatal("a file made in the neuron belongs to root on the host")
	} else if os.Getuid() == 0 && uid < 1_000_000 {
		t.Fatalf("as root, the neuron should run as a high unprivileged uid, not %d", uid)
	}
	// Only the neuron's own processes are visible.
	if procs, _ := strconv.Atoi(lines[len(lines)-1]); procs > 10 {
		t.Fatalf("%d processes visible in the neuron", procs)
	}
}

func TestNoHostSecrets(t *testing.T) {
	for k, v := range map[string]string{"OPENAI_API_KEY": "sk-leak", "AWS_SECRET_ACCESS_KEY": "leak", "GITHUB_TOKEN": "leak", "SSH_AUTH_SOCK": "/leak"} {
		t.Setenv(k, v)
	}
	n := newNeuron(t, "env", sandbox.CreateOptions{Env: []string{"GRANTED=yes"}})
	out := string(n.sh("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'").Stdout)
	if strings.Contains(out, "leak") || !strings.Contains(out, "GRANTED=yes") || !strings.Contains(out, "HOME=/home/agent") {
		t.Fatalf("environment inside:\n%s", out)
	}
}

func TestNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	probe := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", port)
	none := newNeuron(t, "netnone", sandbox.CreateOptions{})
	if res := none.sh("bash -c '" + probe + "' 2>&1; ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1"); res.ExitCode == 0 && strings.Contains(string(res.Stdout), "hello") {
		t.Fatalf("network none reached the host's loopback: %q", res.Stdout)
	} else if ifaces := strings.Fields(string(res.Stdout)); len(ifaces) == 0 || ifaces[len(ifaces)-1] != "lo" {
		t.Logf("interfaces: %q", res.Stdout)
	}
	full := newNeuron(t, "netfull", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}})
	if res := full.sh("bash -c '" + probe + "'"); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hello") {
		t.Fatalf("network full could not reach the host: %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// The abstract socket namespace is the network namespace's: a neuron with
// network full shares the host's, and without Landlock's scoping it
// reached every abstract socket of the host (a desktop's X server, a
// container runtime's). Where the kernel scopes (ABI 6), it reaches none.
func TestAbstractSocketsOfTheHost(t *testing.T) {
	name := fmt.Sprintf("cortex-test-%d", os.Getpid())
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	full := newNeuron(t, "abstract", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}})
	full.install()
	out := strings.TrimSpace(string(full.sh("./escape -abstract " + name).Stdout))
	abi, _, e := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1)
	if e != 0 || abi < 6 {
		t.Skipf("the kernel cannot scope abstract sockets (Landlock ABI %d, %v): the neuron got %q", abi, e, out)
	}
	if !strings.HasPrefix(out, "denied:") {
		t.Fatalf("a full-network neuron connected to the host's abstract socket @%s: %q", name, out)
	}
	// The neuron's own abstract sockets work as ever.
	if res := full.sh("./escape -abstract nosuch"); !strings.Contains(string(res.Stdout), "denied") {
		t.Fatalf("%q", res.Stdout)
	}
}

// A neuron's mountinfo shows no path of the host's: overlay layers are
// named by descriptor, /usr/local is an overlay, not a bind. (The channel
// directory's bind still shows where it is: its line is the one left.)
func TestMountinfoHidesHostPaths(t *testing.T) {
	n := newNeuron(t, "mounts", sandbox.CreateOptions{})
	out := string(n.sh("cat /proc/self/mountinfo").Stdout)
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, n.env.Layout.Home) && !strings.Contains(line, " /run/nsys-cortex ") {
			t.Errorf("mountinfo shows a host path: %s", line)
		}
	}
	if !strings.Contains(out, " /usr/local ") {
		t.Fatalf("no /usr/local mount:\n%s", out)
	}
}

func asErr[T error](err error, target *T) bool {
	for err != nil {
		if e, ok := err.(T); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// What an agent installs into the root (/usr/local, /opt, its home) and
// writes anywhere writable survives destroy and create; the base does not
// change; --wipe removes it all.
func TestRootPersistence(t *testing.T) {
	n := newNeuron(t, "persist", sandbox.CreateOptions{})
	base := filepath.Join(n.env.Layout.ImagesDir(), "nsbox-base", "etc", "passwd")
	before, _ := os.ReadFile(base)
	for _, step := range []string{
		"mkdir -p /usr/local/lib/python3/site-packages/pkg",
		"echo installed > /usr/local/lib/python3/site-packages/pkg/__init__.py",
		`printf '#!/bin/sh\necho tool ran\n' > /usr/local/bin/mytool`,
		"chmod +x /usr/local/bin/mytool",
		"echo opt > /opt/data",
		"mkdir -p ~/.config",
		"echo cfg > ~/.config/app",
		"echo tmp > /tmp/scratch",
	} {
		if res := n.sh(step); res.ExitCode != 0 {
			t.Fatalf("%s: %d %s", step, res.ExitCode, res.Stderr)
		}
	}
	n.sh("echo intruder::0:0::/:/bin/sh >> /etc/passwd") // lands in the neuron's layer, if anywhere
	if err := n.m.Destroy(n.ctx, "persist", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.m.Create(n.ctx, "persist", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := n.m.Connect(n.ctx, "persist")
	if err != nil {
		t.Fatal(err)
	}
	n.c = c
	out := string(n.sh("cat /usr/local/lib/python3/site-packages/pkg/__init__.py; mytool; cat /opt/data ~/.config/app; test -e /tmp/scratch || echo fresh-tmp").Stdout)
	if out != "installed\ntool ran\nopt\ncfg\nfresh-tmp\n" {
		t.Fatalf("after recreate: %q", out)
	}
	if after, _ := os.ReadFile(base); !bytes.Equal(before, after) {
		t.Fatal("the shared base root changed")
	}
	if err := n.m.Destroy(n.ctx, "persist", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.st.OverlayPath); !os.IsNotExist(err) {
		t.Fatal("--wipe left the overlay")
	}
}

// A fork bomb and a memory hog stop at their ceilings; the host stays fine.
// Without a usable cgroup (an unprivileged host user without delegation),
// processes are capped by RLIMIT_NPROC and a memory limit is refused.
func TestCeilings(t *testing.T) {
	requireNsbox(t)
	e := env(t)
	e.Layout.Home, e.Layout.Overlays = sandboxtest.ShortTempDir(t), sandboxtest.ShortTempDir(t)
	withCgroups := checkItem(t, e, "cgroups").OK
	limits := sandbox.Limits{Pids: 64}
	if withCgroups {
		limits.MemoryBytes = 128 << 20
	} else {
		m := nsbox.New(e)
		defer m.Close()
		_, err := m.Create(context.Background(), "nomem", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 128 << 20}})
		var ue *sandbox.UnenforceableError
		if !asErr(err, &ue) {
			t.Fatalf("a memory limit without cgroups: %v, want UnenforceableError", err)
		}
	}
	n := newNeuron(t, "bomb", sandbox.CreateOptions{Limits: limits})
	n.install()
	rest := n.cgroupPids() // tasks (threads too) of the neuron at rest
	start := time.Now()
	bombShell := fmt.Sprintf("exec 2>>bomb.err; bomb() { bomb | bomb & }; bomb # of test process %d", os.Getpid())
	bomb, err := n.c.ProcStart(n.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: bombShell}})
	if err != nil {
		t.Fatal(err)
	}
	// The bomb has run into the ceiling: a fork was refused (the shells
	// say so on stderr, which the host reads in the neuron's upper layer:
	// the agent, whose uid the bomb shares without cgroups, may not
	// answer meanwhile), and with cgroups the pids controller counted it.
	errs := filepath.Join(n.st.OverlayPath, "upper", "root", n.st.Workdir, "bomb.err")
	refused := func() bool {
		st, err := os.Stat(errs)
		return err == nil && st.Size() > 0 && (!withCgroups || n.cgroupPidsMaxHits() > 0)
	}
	waittest.For(t, time.Minute, "the fork bomb to reach the process ceiling", refused)
	count := n.processes()
	if count <= 0 || count > 64 {
		t.Fatalf("the fork bomb reached %d processes (limit 64)", count)
	}
	if withCgroups {
		if hits := n.cgroupPidsMaxHits(); hits == 0 {
			t.Fatal("the bomb never reached the process ceiling: the test proves nothing")
		} else {
			t.Logf("fork bomb refused %d forks at the ceiling; %d processes after %s", hits, count, time.Since(start))
		}
	}
	// End the bomb: its shells (found by their command line: without
	// cgroups the agent, which shares their uid, may have been restarted
	// meanwhile and not know them) are killed until none is left.
	bombers := func() []int {
		return sandboxtest.Processes(func(argv []string) bool { return slices.Contains(argv, bombShell) })
	}
	if !waittest.Until(time.Minute, func() bool {
		n.c.ProcSignal(n.ctx, bomb.PID, "KILL")
		pids := bombers()
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0
	}) {
		t.Fatalf("the bomb's shells outlived their kill: %v", bombers())
	}
	// Its dead count against the ceiling (the uid's, or the cgroup's)
	// until they are reaped, which a busy machine makes slow: with a
	// cgroup, wait until it holds about what the neuron held at rest.
	if withCgroups {
		waittest.For(t, time.Minute, "the bomb's processes to be reaped", func() bool { return n.cgroupPids() <= rest+8 })
	}
	waittest.For(t, time.Minute, "the neuron to run commands after the bomb", func() bool {
		res, err := n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "true"}, Timeout: time.Minute})
		return err == nil && res.ExitCode == 0
	})
	logFile := filepath.Join(n.env.Layout.LogsDir(), "neurons", "bomb.log")
	if withCgroups {
		// The agent lived through it: its threads count against the same
		// ceiling, so it took the spare ones it started with
		// (agent.SpareThreads) instead of crashing for a new one.
		if b, _ := os.ReadFile(logFile); bytes.Contains(b, []byte("the agent ended")) {
			t.Errorf("the agent died at the process ceiling; the neuron's log:\n%s", b)
		}
	} else {
		if out := strings.Fields(string(n.sh("grep 'Max processes' /proc/self/limits").Stdout)); len(out) < 4 || out[2] != "64" {
			t.Fatalf("RLIMIT_NPROC inside: %q, want 64", out)
		}
	}
	if withCgroups {
		// The agent's commands are the kernel's first choice at the
		// ceiling, so the agent outlives the hog.
		// (A fork may still be refused for a moment after the bomb.)
		var adj *link.ExecResult
		waittest.For(t, time.Minute, "a command to read its OOM score adjustment", func() bool {
			adj = n.sh("cat /proc/self/oom_score_adj")
			return adj.ExitCode == 0
		})
		if strings.TrimSpace(string(adj.Stdout)) != "1000" {
			t.Fatalf("a command's oom_score_adj: %q, want 1000", adj.Stdout)
		}
		var hog *link.ExecResult
		waittest.For(t, time.Minute, "the memory hog to start (not refused at the process ceiling)", func() bool {
			hog = n.sh("./escape -hog 536870912")
			// Refused at the process ceiling, the shell could not fork
			// ("Cannot fork", exit 2) or exec it (126), or the hog's
			// runtime a thread.
			refused := hog.ExitCode == 126 || bytes.Contains(hog.Stderr, []byte("Cannot fork")) ||
				bytes.Contains(hog.Stderr, []byte("failed to create new OS thread"))
			return !refused
		})
		if hog.ExitCode == 0 || strings.Contains(string(hog.Stdout), "allocated") {
			t.Fatalf("a 512 MiB allocation under a 128 MiB ceiling succeeded: %+v %q", hog.ExecResult, hog.Stdout)
		}
		t.Logf("memory hog ended with %d %s %.300q", hog.ExitCode, hog.Signal, hog.Stderr)
		// The neuron's log says so (its PID 1 watches the cgroup's OOM
		// counter), and a neuron beside it never noticed.
		waittest.For(t, 30*time.Second, "the neuron's log to say the kernel killed at the ceiling", func() bool {
			b, _ := os.ReadFile(logFile)
			return strings.Contains(string(b), "killed") && strings.Contains(string(b), "at its memory ceiling (128 MiB)")
		})
		b, _ := os.ReadFile(logFile)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "memory ceiling") {
				t.Logf("the neuron's log: %s", l)
			}
		}
		by := newNeuron(t, "bystander", sandbox.CreateOptions{})
		if res := by.sh("echo fine"); string(res.Stdout) != "fine\n" {
			t.Errorf("a neuron beside the hog: %q", res.Stdout)
		}
	}
	// The neuron still works, and so does the host. (Without cgroups the
	// process ceiling is the uid's, which every rootless neuron of this
	// user shares, other tests' too: a fork may be refused for a moment
	// while their processes come and go.)
	waittest.For(t, time.Minute, "the neuron to answer after the ceilings", func() bool {
		res, err := n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo alive"}, Timeout: time.Minute})
		return err == nil && string(res.Stdout) == "alive\n"
	})
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot start a process: %v", err)
	}
}

// checkItem returns one item of nsbox's self-check.
func checkItem(t *testing.T, e sandbox.Env, name string) sandbox.CheckItem {
	for _, it := range nsbox.SelfCheck(context.Background(), e).Items {
		if it.Name == name {
			return it
		}
	}
	t.Fatalf("no self-check item %q", name)
	return sandbox.CheckItem{}
}

// Destroy leaves nothing of the neuron running.
func TestDestroyEndsEverything(t *testing.T) {
	n := newNeuron(t, "gone", sandbox.CreateOptions{})
	// Sleeps no other test runs: 700PPPPP1, 2 and 3 (PPPPP from this pid).
	prefix := fmt.Sprintf("sleep\x00700%05d", os.Getpid()%100000)
	sleep := func(i int) string { return fmt.Sprintf("sleep 700%05d%d", os.Getpid()%100000, i) }
	if _, err := n.c.ProcStart(n.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: "setsid " + sleep(1) + " & nohup " + sleep(2) + " & " + sleep(3)}}); err != nil {
		t.Fatal(err)
	}
	left := func(ofNeuron bool) int {
		left := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if s := string(b); strings.HasPrefix(s, prefix) || (ofNeuron && strings.Contains(s, "--id\x00gone\x00")) {
				if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); !bytes.Contains(st, []byte(") Z ")) {
					left++
				}
			}
		}
		return left
	}
	waittest.For(t, 30*time.Second, "the three sleeps to run", func() bool { return left(false) == 3 })
	if err := n.m.Destroy(n.ctx, "gone", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waittest.Until(30*time.Second, func() bool { return left(true) == 0 }) {
		t.Fatalf("%d processes of the neuron survived destroy", left(true))
	}
}

// Signals other than SIGTERM sent to PID 1 from inside do nothing (as a
// plain host user, PID 1 and the commands share a host uid, so the kernel
// lets them through to any handler PID 1 has).
func TestSignalsToPID1(t *testing.T) {
	n := newNeuron(t, "sigs", sandbox.CreateOptions{})
	n.sh("for s in QUIT HUP INT USR1 USR2 ALRM WINCH PIPE; do kill -$s 1 2>/dev/null; done; sleep 0.2")
	if res := n.sh("echo alive"); string(res.Stdout) != "alive\n" {
		t.Fatalf("after signals to PID 1: %q %q", res.Stdout, res.Stderr)
	}
	if st, err := n.m.Get(n.ctx, "sigs"); err != nil || st.Status != sandbox.StatusRunning || st.PID != n.st.PID {
		t.Fatalf("%+v %v", st, err)
	}
	if log, _ := os.ReadFile(filepath.Join(n.env.Layout.LogsDir(), "neurons", "sigs.log")); bytes.Contains(log, []byte("goroutine ")) {
		t.Fatalf("a signal made PID 1 dump its goroutines:\n%s", log)
	}
}

// Commands run as the agent's user and can kill it (kill -9 -1 is a common
// cleanup idiom): PID 1 starts it again and the host reconnects.
func TestAgentKilledFromInsideComesBack(t *testing.T) {
	n := newNeuron(t, "phoenix", sandbox.CreateOptions{})
	_, err := n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "kill -9 -1"}, Timeout: time.Minute})
	if !errdefs.IsNotRunning(err) {
		t.Fatalf("kill -9 -1: %v", err)
	}
	back := func() bool {
		var res *link.ExecResult
		res, err = n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo back"}})
		return err == nil && string(res.Stdout) == "back\n"
	}
	if !waittest.Until(30*time.Second, back) {
		t.Fatalf("the agent did not come back: %v", err)
	}
	if st, err := n.m.Get(n.ctx, "phoenix"); err != nil || st.Status != sandbox.StatusRunning || st.PID != n.st.PID {
		t.Fatalf("%+v %v", st, err)
	}
}

// Neurons of one id under two homes (two users, two test runs) get cgroups
// of their own: neither shares the other's ceilings, and destroying one
// does not wait for the other.
func TestCgroupsPerHome(t *testing.T) {
	requireNsbox(t)
	e := env(t)
	e.Layout.Home, e.Layout.Overlays = sandboxtest.ShortTempDir(t), sandboxtest.ShortTempDir(t)
	if !checkItem(t, e, "cgroups").OK {
		t.Skip("no usable cgroups here: ceilings are rlimits, which are per process")
	}
	a := newNeuron(t, "twin", sandbox.CreateOptions{})
	b := newNeuron(t, "twin", sandbox.CreateOptions{})
	read := func(n *neuron) []string {
		var dirs []string
		raw, _ := os.ReadFile(filepath.Join(n.st.OverlayPath, ".cgroups"))
		json.Unmarshal(raw, &dirs)
		if len(dirs) == 0 {
			t.Fatalf("no cgroups recorded for %s", n.st.OverlayPath)
		}
		return dirs
	}
	da, db := read(a), read(b)
	for _, d := range da {
		for _, o := range db {
			if d == o {
				t.Fatalf("two neurons share cgroup %s", d)
			}
		}
	}
	if err := a.m.Destroy(a.ctx, "twin", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range da {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s outlived its neuron: %v", d, err)
		}
	}
	for _, d := range db {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the other neuron's cgroup %s: %v", d, err)
		}
	}
}

// With nested user namespaces allowed, a program may build a sandbox of
// its own (a user and mount namespace, mounts inside it), and every
// escape but creating the user namespace itself still fails.
func TestNestedUserns(t *testing.T) {
	plain := newNeuron(t, "flat", sandbox.CreateOptions{})
	if res := plain.sh("unshare --user --map-root-user true"); res.ExitCode == 0 {
		t.Fatal("a neuron without the policy created a user namespace")
	}
	n := newNeuron(t, "nest", sandbox.CreateOptions{NestedUserns: true})
	res := n.sh("unshare --user --map-root-user --mount sh -c 'mount -t tmpfs inner /mnt && touch /mnt/x && echo inner-mount-ok'")
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "inner-mount-ok") {
		t.Fatalf("an inner sandbox: %d %s %s", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The inner mount stayed inside: the neuron's /mnt is as it was.
	if res := n.sh("test -e /mnt/x"); res.ExitCode == 0 {
		t.Fatal("the inner mount leaked into the neuron")
	}
	n.install()
	planted := filepath.Join(sandboxtest.ShortTempDir(t), "planted-secret")
	os.WriteFile(planted, []byte("host secret"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host := exec.Command("sleep", "300")
	host.Start()
	defer func() { host.Process.Kill(); host.Wait() }()
	out := n.sh(fmt.Sprintf("./escape -file %s -port %d -pid %d -agent $PPID", planted, ln.Addr().(*net.TCPAddr).Port, host.Process.Pid))
	var results map[string]string
	if err := json.Unmarshal(out.Stdout, &results); err != nil || len(results) < 20 {
		t.Fatalf("escape program: %v\nstdout %s\nstderr %s", err, out.Stdout, out.Stderr)
	}
	for attempt, outcome := range results {
		if !strings.HasPrefix(outcome, "denied") && attempt != "unshare a user namespace" {
			t.Errorf("%s: %s", attempt, outcome)
		}
	}
}

// The review's reproduction: a neuron with 256 MiB of memory wrote 768 MiB
// to the host's root filesystem. With a disk ceiling its data is a
// filesystem of its own: a write past it fails with ENOSPC inside, the
// host's disk is untouched, and the data survives destroy and create,
// snapshots and restores.
func TestDiskCeiling(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a disk of its own is a loop mount: root only (rootless nsbox refuses --disk)")
	}
	n := newNeuron(t, "disk", sandbox.CreateOptions{Limits: sandbox.Limits{DiskBytes: 96 << 20}})
	if n.st.Policy.Limits.DiskBytes != 96<<20 {
		t.Fatalf("policy: %+v", n.st.Policy.Limits)
	}
	res := n.sh("dd if=/dev/zero of=big bs=1M count=200 2>&1; echo kept > small; sync")
	if !strings.Contains(string(res.Stdout), "No space left") {
		t.Fatalf("writing 200 MiB past a 96 MiB ceiling: %q", res.Stdout)
	}
	var st syscall.Stat_t
	img := filepath.Join(n.st.OverlayPath, ".disk.img")
	if err := syscall.Stat(img, &st); err != nil || st.Blocks*512 > 100<<20 {
		t.Fatalf("the image takes %d bytes of the host's (%v)", st.Blocks*512, err)
	}
	n.sh("rm -f big")
	ctx := context.Background()
	if err := n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.m.Create(ctx, "disk", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := n.m.Connect(ctx, "disk")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(ctx, "small"); err != nil || string(b) != "kept\n" {
		t.Fatalf("after destroy and create: %q %v", b, err)
	}
	// A snapshot holds the data, not the image; a restore puts it back
	// into the disk.
	root := func(id string) string {
		t.Helper()
		r, err := n.m.DataRoot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dir := n.env.Layout.SnapshotsDir("disk")
	if _, err := store.CreateSnapshot(dir, "s1", "disk", root("disk")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s1", "data", ".disk.img")); err == nil {
		t.Fatal("the snapshot holds the disk image")
	}
	if holds(filepath.Join(dir, "s1"), "kept") == "" {
		t.Fatal("the snapshot does not hold the data")
	}
	c.WriteFile(ctx, "small", []byte("changed\n"), nil)
	if err := n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RestoreSnapshot(dir, "s1", root("disk")); err != nil {
		t.Fatal(err)
	}
	read := func(id string) string {
		t.Helper()
		if _, err := n.m.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c, err := n.m.Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.ReadFile(ctx, "small")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("disk"); got != "kept\n" {
		t.Fatalf("after the restore: %q", got)
	}
	// A disk is never made smaller; a wipe unmounts and removes it.
	n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{})
	if _, err := n.m.Create(ctx, "disk", sandbox.CreateOptions{Limits: sandbox.Limits{DiskBytes: 64 << 20}}); err == nil || !strings.Contains(err.Error(), "smaller") {
		t.Fatalf("shrinking the disk: %v", err)
	}
	if err := n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.st.OverlayPath); !os.IsNotExist(err) {
		t.Fatalf("the wipe left %s: %v", n.st.OverlayPath, err)
	}
	// Snapshots outlive a wipe: one made on a disk restores into the same
	// id made again without one (this env has no default disk)...
	if _, err := n.m.Create(ctx, "disk", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{})
	if _, err := store.RestoreSnapshot(dir, "s1", root("disk")); err != nil {
		t.Fatal(err)
	}
	if got := read("disk"); got != "kept\n" {
		t.Fatalf("a disk's snapshot restored without one: %q", got)
	}
	// ...and one made without a disk restores onto one.
	if _, err := store.CreateSnapshot(dir, "s2", "disk", root("disk")); err != nil {
		t.Fatal(err)
	}
	n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{Wipe: true})
	if _, err := n.m.Create(ctx, "disk", sandbox.CreateOptions{Limits: sandbox.Limits{DiskBytes: 96 << 20}}); err != nil {
		t.Fatal(err)
	}
	n.m.Destroy(ctx, "disk", sandbox.DestroyOptions{})
	if _, err := store.RestoreSnapshot(dir, "s2", root("disk")); err != nil {
		t.Fatal(err)
	}
	if got := read("disk"); got != "kept\n" {
		t.Fatalf("a snapshot without a disk restored onto one: %q", got)
	}
	// A ceiling for data made without one is refused, not dropped.
	plain := newNeuron(t, "plain", sandbox.CreateOptions{})
	plain.m.Destroy(ctx, "plain", sandbox.DestroyOptions{})
	if _, err := plain.m.Create(ctx, "plain", sandbox.CreateOptions{Limits: sandbox.Limits{DiskBytes: 96 << 20}}); err == nil || !strings.Contains(err.Error(), "disk of its own") {
		t.Fatalf("a ceiling for data without a disk: %v", err)
	}
}

// holds returns the first regular file under dir holding needle ("").
func holds(dir, needle string) string {
	found := ""
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && found == "" && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(needle)) {
				found = p
			}
		}
		return nil
	})
	return found
}
