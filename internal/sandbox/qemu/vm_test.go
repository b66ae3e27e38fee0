package qemu_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// vmFixture is one home with one manager over it.
type vmFixture struct {
	t   *testing.T
	m   *qemu.Manager
	lay layout.Layout
	img string
	ctx context.Context
}

func newVM(t *testing.T) *vmFixture {
	t.Helper()
	img := requireQEMU(t)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := qemu.New(e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	f := &vmFixture{t: t, m: m, lay: lay, img: img, ctx: ctx}
	t.Cleanup(func() {
		if t.Failed() {
			f.logTails()
		}
		sandboxtest.DestroyAll(m)
		m.Close()
		cancel()
		if pids := qemuProcesses(lay, ""); len(pids) > 0 {
			t.Errorf("QEMU processes left behind: %v", pids)
		}
	})
	return f
}

// logTails prints the end of each neuron's log (its guest's console and
// agent): a test that failed says why the guest went down.
func (f *vmFixture) logTails() {
	all, _ := f.m.List(context.Background())
	for _, st := range all {
		p, err := f.m.LogPath(context.Background(), st.ID)
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(p)
		// A Go program's crash says why first, then dumps its goroutines.
		var why []string
		for line := range strings.Lines(string(b)) {
			if strings.HasPrefix(line, "fatal error") || strings.HasPrefix(line, "runtime:") || strings.HasPrefix(line, "panic:") {
				why = append(why, line)
			}
		}
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		f.t.Logf("neuron %s's log: %s... ends:\n%s", st.ID, strings.Join(why, ""), b)
	}
}

func (f *vmFixture) create(id string, opts sandbox.CreateOptions) (*sandbox.State, *link.Client) {
	f.t.Helper()
	if opts.Image == "" {
		opts.Image = f.img
	}
	st, err := f.m.Create(f.ctx, id, opts)
	if err != nil {
		f.t.Fatalf("create %s: %v", id, err)
	}
	c, err := f.m.Connect(f.ctx, id)
	if err != nil {
		f.t.Fatalf("connect %s: %v", id, err)
	}
	return st, c
}

func (f *vmFixture) sh(c *link.Client, script string) string {
	f.t.Helper()
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Shell: script}})
	if err != nil {
		f.t.Fatalf("%s: %v", script, err)
	}
	if res.ExitCode != 0 {
		f.t.Fatalf("%s: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// qemuProcesses lists this home's live QEMU processes (of neuron id, or
// all with id ""), found by the marker in their -name.
func qemuProcesses(lay layout.Layout, id string) []int {
	return sandboxtest.Processes(func(argv []string) bool {
		for i := 0; i+1 < len(argv); i++ {
			if argv[i] == "-name" {
				name := strings.TrimPrefix(argv[i+1], "guest=")
				return (id == "" && strings.HasPrefix(name, qemu.Marker(lay, ""))) || name == qemu.Marker(lay, id)
			}
		}
		return false
	})
}

// TestDeath: a guest agent that dies, and a QEMU that is killed, both end
// the neuron at once: pending calls fail with NOT_RUNNING, no QEMU stays.
func TestDeath(t *testing.T) {
	f := newVM(t)
	ctx := f.ctx
	calls := 0
	pending := func(c *link.Client) chan error {
		calls++
		started := fmt.Sprintf("pending%d.started", calls) // the workspace outlives a death
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: "touch " + started + "; exec sleep 1000"}, Timeout: link.NoTimeout})
			done <- err
		}()
		waittest.For(t, time.Minute, "the pending exec to run", func() bool { return f.sh(c, "test -e "+started+" && echo yes || true") == "yes" })
		return done
	}
	expectDeath := func(what string, st *sandbox.State, done chan error, killed time.Time) {
		t.Helper()
		select {
		case err := <-done:
			if !errdefs.IsNotRunning(err) {
				t.Fatalf("%s: the pending exec: %v, want NOT_RUNNING", what, err)
			}
			t.Logf("%s: the pending exec failed %s after the kill", what, time.Since(killed).Round(time.Millisecond))
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the pending exec hangs", what)
		}
		var got *sandbox.State
		var err error
		ended := func() bool {
			got, err = f.m.Get(ctx, st.ID)
			return err == nil && got.Status == sandbox.StatusStopped && len(qemuProcesses(f.lay, st.ID)) == 0
		}
		if !waittest.Until(30*time.Second, ended) {
			t.Fatalf("%s: after 30 s: %+v %v, QEMU %v", what, got, err, qemuProcesses(f.lay, st.ID))
		}
	}
	st, c := f.create("mortal", sandbox.CreateOptions{})
	if err := c.WriteFile(ctx, "kept", []byte("synced"), nil); err != nil {
		t.Fatal(err)
	}
	done := pending(c)
	killed := time.Now()
	killGuestAgent(t, st)
	expectDeath("guest agent killed", st, done, killed)

	// Create replaces the corpse; the guest synced its disk going down.
	st, c = f.create("mortal", sandbox.CreateOptions{})
	if got, err := c.ReadFile(ctx, "kept"); err != nil || string(got) != "synced" {
		t.Fatalf("after the guest agent's death: %q %v", got, err)
	}
	done = pending(c)
	killed = time.Now()
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expectDeath("QEMU killed", st, done, killed)
}

func TestDestroyLeavesNothing(t *testing.T) {
	f := newVM(t)
	ctx := f.ctx
	st, c := f.create("gone", sandbox.CreateOptions{})
	if _, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: "sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	if len(qemuProcesses(f.lay, "gone")) != 1 {
		t.Fatalf("QEMU processes of the neuron: %v", qemuProcesses(f.lay, "gone"))
	}
	if err := f.m.Destroy(ctx, "gone", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if pids := qemuProcesses(f.lay, "gone"); len(pids) > 0 || sandboxAlive(st.PID) {
		t.Fatalf("QEMU still runs after destroy: %v (pid %d)", pids, st.PID)
	}
	if _, err := os.Stat(st.SocketDir); !os.IsNotExist(err) {
		t.Fatalf("the channel directory is left: %v", err)
	}
	disk := filepath.Join(st.OverlayPath, "overlay.ext4")
	if _, err := os.Stat(disk); err != nil {
		t.Fatalf("destroy without wipe lost the overlay disk: %v", err)
	}
	if err := f.m.Destroy(ctx, "gone", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st.OverlayPath); !os.IsNotExist(err) {
		t.Fatalf("wipe left the overlay: %v", err)
	}
}

func sandboxAlive(pid int) bool { return store.Alive(pid, 0) }

// TestPolicy: what qemu mode enforces inside the guest, and what it
// refuses rather than drop.
func TestPolicy(t *testing.T) {
	f := newVM(t)
	ctx := f.ctx
	for name, tc := range map[string]struct {
		opts  sandbox.CreateOptions
		check func(error) bool
	}{
		"egress, no allow-list": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress}}, errdefs.IsInvalid},
		"full":                  {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}, isUnenforceable},
		"allow none":            {sandbox.CreateOptions{Network: sandbox.Network{Allow: []string{"example.com"}}}, errdefs.IsInvalid},
		"half a CPU":            {sandbox.CreateOptions{Limits: sandbox.Limits{CPUs: 0.5}}, isUnenforceable},
		"tiny memory":           {sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 16 << 20}}, errdefs.IsInvalid},
		"ctx":                   {sandbox.CreateOptions{Ctx: "/tmp"}, isUnenforceable},
		"no image":              {sandbox.CreateOptions{Image: t.TempDir()}, errdefs.IsInvalid},
	} {
		opts := tc.opts
		if opts.Image == "" {
			opts.Image = f.img
		}
		if _, err := f.m.Create(ctx, "refused", opts); !tc.check(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := f.m.Get(ctx, "refused"); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused create left a neuron: %v", err)
	}
	st0, c := f.create("limits", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}})
	st := st0
	if st.Policy == nil || st.Policy.Network.Mode != sandbox.NetworkNone || st.Policy.Limits.MemoryBytes != 256<<20 ||
		st.Policy.Limits.Pids != 64 || st.Policy.Limits.CPUs != 1 {
		t.Fatalf("policy: %+v", st.Policy)
	}
	kb, err := strconv.Atoi(f.sh(c, "awk '/MemTotal/ {print $2}' /proc/meminfo"))
	if err != nil || kb > 256<<10 || kb < 150<<10 {
		t.Fatalf("MemTotal %d kB for a 256 MiB neuron (%v)", kb, err)
	}
	if got := f.sh(c, "nproc"); got != "1" {
		t.Fatalf("nproc: %s", got)
	}
	if got := f.sh(c, "ls /sys/class/net"); got != "lo" {
		t.Fatalf("network interfaces: %q, want lo only", got)
	}
	// vsock (Firecracker's channel) is loaded once the agent runs: its
	// modules were opened before the root was switched.
	if !waittest.Until(30*time.Second, func() bool {
		return f.sh(c, "test -d /sys/module/vmw_vsock_virtio_transport && echo yes || true") == "yes"
	}) {
		t.Fatal("the vsock modules were not loaded")
	}
	// Commands run as the unprivileged guest user: guest root is PID 1's.
	// pids.max is the ceiling and the agent's one thread that starts
	// commands; no per-user limit puts the agent under it again.
	if got := f.sh(c, "cat /sys/fs/cgroup/neuron/commands/pids.max /proc/self/cgroup /proc/sys/user/max_user_namespaces; ulimit -u; id -u; id -un; echo $HOME"); got != "65\n0::/neuron/commands\n0\nunlimited\n1000\nagent\n/home/agent" {
		t.Fatalf("pids.max, a command's cgroup, max_user_namespaces, RLIMIT_NPROC, uid, user, home: %q", got)
	}
	// The agent's own threads are outside the ceiling (its spare ones among
	// them): only the one it starts commands from is counted there.
	if n, err := strconv.Atoi(f.sh(c, "wc -l < /sys/fs/cgroup/neuron/cgroup.threads")); err != nil || n < 8 {
		t.Fatalf("%d of the agent's threads outside the process ceiling (%v), want 8 or more", n, err)
	}
	// A command cannot leave the ceiling's cgroup.
	if out := f.sh(c, "echo $$ > /sys/fs/cgroup/neuron/cgroup.procs 2>&1 || echo refused; echo $$ > /sys/fs/cgroup/cgroup.procs 2>&1 || echo refused; cat /proc/self/cgroup"); !strings.HasSuffix(out, "refused\n0::/neuron/commands") || strings.Count(out, "refused") != 2 {
		t.Fatalf("a command moved itself out of the process ceiling: %q", out)
	}
	for _, root := range []string{"cat /dev/vport*p* 2>&1 | head -c 200", "ls /run/cortex/channel >/dev/null && echo listed", "echo x > /etc/x 2>&1 || echo refused"} {
		out := f.sh(c, root)
		if strings.Contains(root, "/etc/x") && out != "refused" && !strings.Contains(out, "denied") {
			t.Errorf("%s: %q: an unprivileged command wrote /etc", root, out)
		}
		if strings.Contains(root, "vport") && !strings.Contains(out, "denied") && !strings.Contains(out, "No such") {
			t.Errorf("%s: %q: a command read a channel device", root, out)
		}
	}
	// QEMU itself is nobody on the host when the host process is root.
	if os.Getuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d", st0.PID), &st); err != nil || st.Uid == 0 {
			t.Fatalf("QEMU runs as uid %d (%v), not the neuron's own", st.Uid, err)
		}
	}
	// The pids ceiling holds: 80 processes do not start under 64 (the
	// shell then kills its whole group, giving the pids back).
	if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "for i in $(seq 80); do sleep 30 & done 2>/dev/null; kill -9 0"},
		Timeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// The killed processes give their pids back as the guest reaps them,
	// which under TCG takes a while: until then a new command cannot fork.
	var events string
	waittest.For(t, 30*time.Second, "a command to run after the fork bomb", func() bool {
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "cat /sys/fs/cgroup/neuron/commands/pids.events"}})
		if err != nil || res.ExitCode != 0 {
			return false
		}
		events = strings.TrimSpace(string(res.Stdout))
		return true
	})
	if events == "max 0" || !strings.HasPrefix(events, "max ") {
		t.Fatalf("80 processes under pids.max 64: pids.events %q", events)
	}
}

func isUnenforceable(err error) bool {
	var u *sandbox.UnenforceableError
	return errors.As(err, &u)
}

// wantRestored checks a neuron restored from a snapshot taken with
// state.txt "before", before later.txt was written, while process pid ran:
// the file is back, the later one gone, the process runs on.
func wantRestored(t *testing.T, ctx context.Context, c *link.Client, pid int) {
	t.Helper()
	if got, err := c.ReadFile(ctx, "state.txt"); err != nil || string(got) != "before" {
		t.Fatalf("state.txt after the restore: %q %v", got, err)
	}
	if ok, err := c.Exists(ctx, "later.txt"); err != nil || ok {
		t.Fatalf("a file written after the snapshot is there after the restore: %v %v", ok, err)
	}
	procs, err := c.ProcList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PID == pid && p.Running {
			return
		}
	}
	t.Fatalf("the process that ran at the snapshot (%d) is not running after the restore: %+v", pid, procs)
}
