package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// The API calls of a cold boot, in order: nothing else, and in particular
// no network interface.
var goldenCreate = []string{
	"PUT /logger", "PUT /metrics", "PUT /machine-config", "PUT /boot-source",
	"PUT /drives/cortex-root", "PUT /drives/cortex-overlay", "PUT /drives/cortex-config", "PUT /vsock", "PUT /actions",
}

// A snapshot: pause, snapshot, resume.
var goldenSnapshot = []string{"PATCH /vm", "PUT /snapshot/create", "PATCH /vm"}

// A restore, in a fresh process: only the logger and metrics before the
// load, then resume.
var goldenRestore = []string{"PUT /logger", "PUT /metrics", "PUT /snapshot/load", "PATCH /vm"}

func body(t *testing.T, c interface{ String() string }, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: body %s: %v", c, raw, err)
	}
	return m
}

func exec1(t *testing.T, ctx context.Context, c *link.Client, shell string) string {
	t.Helper()
	res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: shell}})
	if err != nil {
		t.Fatalf("exec %q: %v", shell, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s", shell, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func inode(t *testing.T, p string) (uint64, *syscall.Stat_t) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return s.Ino, s
}

// Create boots a VM through the jailer with exactly the golden API calls,
// the agent answers on the real channel over the fake vsock, and Destroy
// leaves no process, jail or cgroup behind, only the overlay.
func TestCreateExecDestroy(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	t.Setenv("GITHUB_TOKEN", "the host's, never the neuron's")
	st, err := f.mgr.Create(ctx, "demo", sandbox.CreateOptions{Env: []string{"GREETING=hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != sandbox.StatusRunning || st.Mode != Mode || st.Workdir != Workspace || st.PID <= 0 || st.Pending {
		t.Fatalf("state: %+v", st)
	}
	want := &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkNone}, Limits: sandbox.Limits{MemoryBytes: DefaultMemory, CPUs: DefaultCPUs, DiskBytes: f.cfg.OverlaySize}}
	if !reflect.DeepEqual(st.Policy, want) {
		t.Fatalf("policy %+v, want %+v", st.Policy, want)
	}
	calls := f.calls("demo")
	if got := callNames(calls); !reflect.DeepEqual(got, goldenCreate) {
		t.Fatalf("API calls:\n got %q\nwant %q", got, goldenCreate)
	}
	mc := body(t, calls[2], calls[2].Body)
	if mc["vcpu_count"] != 1.0 || mc["mem_size_mib"] != 1024.0 {
		t.Errorf("machine config %v", mc)
	}
	bs := body(t, calls[3], calls[3].Body)
	if bs["boot_args"] != BootArgs(BootSpec{}) || bs["kernel_image_path"] != jailKernel || bs["initrd_path"] != jailInitrd {
		t.Errorf("boot source %v", bs)
	}
	if ov := body(t, calls[5], calls[5].Body); ov["is_read_only"] != false || ov["cache_type"] != "Writeback" || ov["path_on_host"] != jailOverlay {
		t.Errorf("overlay drive %v", ov)
	}
	if cd := body(t, calls[6], calls[6].Body); cd["is_read_only"] != true || cd["path_on_host"] != jailConfig {
		t.Errorf("config drive %v", cd)
	}

	c, err := f.mgr.Connect(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	// The agent's environment came on the config disk: what was granted,
	// nothing of the host's.
	if got := exec1(t, ctx, c, `echo "$GREETING from $PWD as $USER, token ${GITHUB_TOKEN:-unset}"`); got != "hello from "+Workspace+" as agent, token unset" {
		t.Fatalf("exec: %q", got)
	}
	if err := c.WriteFile(ctx, "notes.txt", []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(ctx, "notes.txt"); err != nil || string(b) != "kept" {
		t.Fatalf("read back %q %v", b, err)
	}

	// The VM: Firecracker is PID 1 of its own PID namespace, in a network
	// namespace of its own, with the cgroup limits of the policy.
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.PID))
	if !strings.Contains(string(status), "NSpid:\t"+strconv.Itoa(st.PID)+"\t1\n") {
		t.Errorf("firecracker is not PID 1 of a PID namespace of its own:\n%s", status)
	}
	mine, _ := os.Readlink("/proc/self/ns/net")
	theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", st.PID))
	if mine == theirs || theirs == "" {
		t.Errorf("firecracker shares this process's network namespace (%s)", theirs)
	}
	cg := filepath.Join(f.cfg.CgroupRoot, ParentCgroup, JailID(f.lay, "demo"))
	for file, want := range map[string]string{"memory.max": strconv.Itoa(DefaultMemory + vmmOverhead), "cpu.max": "100000 100000"} {
		if b, err := os.ReadFile(filepath.Join(cg, file)); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("cgroup %s: %q %v, want %q", file, b, err, want)
		}
	}

	// The jail: shared images hard-linked and not the jail's; the overlay
	// the jail's own.
	j := f.jail("demo")
	for src, p := range map[string]string{f.cfg.Kernel: jailKernel, f.cfg.RootDisk: jailRootDisk, f.cfg.Initrd: jailInitrd} {
		si, _ := inode(t, src)
		di, ds := inode(t, j.host(p))
		if si != di {
			t.Errorf("%s is not a hard link of %s", p, src)
		}
		if int(ds.Uid) == j.uid || ds.Mode&0o022 != 0 {
			t.Errorf("%s: the jail user %d could change a shared image (owner %d, mode %o)", p, j.uid, ds.Uid, ds.Mode&0o777)
		}
	}
	// The config disk: the guest's configuration, readable by the jail,
	// not its to change.
	raw, err := os.ReadFile(j.host(jailConfig))
	if err != nil {
		t.Fatal(err)
	}
	var gc GuestConfig
	if err := json.Unmarshal([]byte(strings.TrimRight(string(raw), "\x00")), &gc); err != nil || len(raw)%4096 != 0 || len(raw) < configDiskMin {
		t.Fatalf("config disk (%d bytes): %v", len(raw), err)
	}
	if gc.ID != "demo" || gc.Workdir != Workspace || gc.VsockPort != AgentVsockPort || gc.CtlVsockPort != CtlVsockPort || gc.NestedUserns || gc.Ports != -1 {
		t.Errorf("config %+v", gc)
	}
	if _, cs := inode(t, j.host(jailConfig)); cs.Uid != 0 || int(cs.Gid) != j.gid || cs.Mode&0o777 != 0o440 {
		t.Errorf("config disk owner %d:%d mode %o", cs.Uid, cs.Gid, cs.Mode&0o777)
	}
	oi, os1 := inode(t, overlayDisk(f.lay, "demo"))
	ji, _ := inode(t, j.host(jailOverlay))
	if oi != ji || int(os1.Uid) != j.uid || os1.Mode&0o777 != 0o600 {
		t.Errorf("overlay: linked %v, owner %d (jail %d), mode %o", oi == ji, os1.Uid, j.uid, os1.Mode&0o777)
	}
	if j.uid < 2_000_000_000 {
		t.Errorf("the jail runs as uid %d, not a neuron's own", j.uid)
	}

	if err := f.mgr.Destroy(ctx, "demo", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	// A destroy makes no API call: the guest is asked to power off on its
	// control port (and Firecracker exits with it).
	if got := callNames(f.calls("demo")); !reflect.DeepEqual(got, goldenCreate) {
		t.Fatalf("API calls after destroy:\n got %q\nwant %q", got, goldenCreate)
	}
	if store.Alive(st.PID, st.PIDStart) {
		t.Error("firecracker outlived destroy")
	}
	for _, gone := range []string{j.dir, cg, f.lay.ChannelDir(Mode, "demo")} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after destroy (%v)", gone, err)
		}
	}
	if ctl := f.ctl("demo"); len(ctl) != 1 || ctl[0].Op != OpPoweroff {
		t.Errorf("the guest was not asked to power off before its VM was killed: %+v", ctl)
	}
	if _, err := os.Stat(overlayDisk(f.lay, "demo")); err != nil {
		t.Fatalf("the overlay disk went with destroy: %v", err)
	}

	// Created again: the same overlay disk comes back, and what the guest
	// wrote on it.
	st2, err := f.mgr.Create(ctx, "demo", sandbox.CreateOptions{Limits: sandbox.Limits{Pids: 100}, NestedUserns: true})
	if err != nil {
		t.Fatal(err)
	}
	if i2, _ := inode(t, overlayDisk(f.lay, "demo")); i2 != oi {
		t.Error("a new overlay disk replaced the neuron's")
	}
	if st2.PID == st.PID || st2.Policy.Limits.Pids != 100 {
		t.Errorf("second VM: %+v", st2)
	}
	c, err = f.mgr.Connect(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got := exec1(t, ctx, c, "cat notes.txt"); got != "kept" {
		t.Errorf("the workspace after create: %q", got)
	}
	if raw, _ := os.ReadFile(j.host(jailConfig)); !strings.Contains(string(raw), `"pids":100,"nestedUserns":true`) {
		t.Errorf("the process ceiling and nested user namespaces are not on the config disk: %.300s", raw)
	}
}

// A VM that dies is NOT_RUNNING at once, and its jail is cleared.
func TestVMDeathIsNotRunning(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	st, err := f.mgr.Create(ctx, "dies", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "dies")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c, "true")
	// The fake's guest runs on the host: its command is found there.
	sleep := []string{"sleep", fmt.Sprint(60 + os.Getpid()%100000)}
	running := func() []int {
		return sandboxtest.Processes(func(argv []string) bool { return slices.Equal(argv, sleep) })
	}
	t.Cleanup(func() {
		for _, pid := range running() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	pending := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "exec " + strings.Join(sleep, " ")}, Timeout: link.NoTimeout})
		pending <- err
	}()
	waittest.For(t, 30*time.Second, "the pending exec to run", func() bool { return len(running()) > 0 })
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pending:
		if !errdefs.IsNotRunning(err) {
			t.Fatalf("the pending exec: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a pending request hangs after its VM died")
	}
	var got *sandbox.State
	stopped := func() bool {
		got, err = f.mgr.Get(ctx, "dies")
		return err == nil && got.Status == sandbox.StatusStopped
	}
	if !waittest.Until(30*time.Second, stopped) {
		t.Fatalf("still %+v %v", got, err)
	}
	if _, err := f.mgr.Connect(ctx, "dies"); !errdefs.IsNotRunning(err) {
		t.Fatalf("connect after death: %v", err)
	}
	// Its state is cleared first, its jail right after.
	if !waittest.Until(30*time.Second, func() bool { return !exists(f.jail("dies").dir) }) {
		t.Fatal("the dead VM's jail is left")
	}
}

// Snapshot pauses, snapshots and resumes the VM, and the channel comes
// back; Restore loads it into a fresh Firecracker, then sets the guest's
// clock and mixes fresh entropy in. (What every mode's snapshots must do
// is TestSnapshotterFake's; this is what the VMM is asked and keeps.)
func TestSnapshotRestore(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	st, err := f.mgr.Create(ctx, "snap", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c, "echo before > state.txt")
	snap, err := f.mgr.Snapshot(ctx, "snap", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name != "s1" || snap.Neuron != "snap" || snap.Files != 3 {
		t.Errorf("snapshot %+v", snap)
	}
	calls := f.calls("snap")
	if got := callNames(calls[len(goldenCreate):]); !reflect.DeepEqual(got, goldenSnapshot) {
		t.Fatalf("snapshot calls:\n got %q\nwant %q", got, goldenSnapshot)
	}
	if b := body(t, calls[len(calls)-2], calls[len(calls)-2].Body); b["snapshot_type"] != "Full" {
		t.Errorf("snapshot create %v", b)
	}
	dir := filepath.Join(f.lay.SnapshotsDir("snap"), "s1")
	for file, size := range map[string]int64{"vm/mem": 256 << 20, "vm/vmstate": -1, "vm/config.img": configDiskMin, "data/overlay.ext4": f.cfg.OverlaySize} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil || (size >= 0 && fi.Size() != size) || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", file, fi, err)
		}
	}
	if j := f.jail("snap"); exists(j.host(jailSnapMem)) || exists(j.host(jailSnapState)) {
		t.Error("the snapshot's files were left in the jail")
	}
	// The channel drops across the snapshot and is dialled again.
	waitExec(t, ctx, c, "echo after > state.txt")

	r, err := f.mgr.RestoreVM(ctx, "snap", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State.PID == st.PID || r.State.Status != sandbox.StatusRunning || store.Alive(st.PID, st.PIDStart) {
		t.Fatalf("restore did not replace the VM: %+v (old pid %d)", r.State, st.PID)
	}
	all := f.calls("snap")
	if got := callNames(all[len(goldenCreate)+len(goldenSnapshot):]); !reflect.DeepEqual(got, goldenRestore) {
		t.Fatalf("restore calls:\n got %q\nwant %q", got, goldenRestore)
	}
	if b := body(t, all[len(all)-2], all[len(all)-2].Body); b["mem_backend"] == nil || b["resume_vm"] != nil {
		t.Errorf("snapshot load %v", b)
	}
	if !r.Resync.Clock || !r.Resync.Seed || r.Resync.Skew > time.Second || r.Resync.Skew < -time.Second {
		t.Errorf("resync %+v", r.Resync)
	}
	// The restored guest was told the time (now, not the snapshot's) and
	// given 32 fresh random bytes; the VM it replaced was not powered off
	// (its disk was being replaced anyway).
	ctl := f.ctl("snap")
	if len(ctl) != 1 || ctl[0].Op != OpRestored || ctl[0].SeedLen != 32 || time.Since(ctl[0].Time) > time.Minute || time.Since(ctl[0].Time) < 0 {
		t.Errorf("control requests: %+v", ctl)
	}
	c2, err := f.mgr.Connect(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c2, "true")

	// A rebuilt root disk does not match the snapshot's memory.
	later := time.Now().Add(time.Hour)
	os.Chtimes(f.cfg.RootDisk, later, later)
	if _, err := f.mgr.Restore(ctx, "snap", "s1"); err == nil || !strings.Contains(err.Error(), "not that disk any more") {
		t.Errorf("restore over a changed root disk: %v", err)
	}
	if got, _ := f.mgr.Get(ctx, "snap"); got.Status != sandbox.StatusRunning {
		t.Errorf("a refused restore stopped the neuron: %+v", got)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// waitExec runs a command, waiting for the channel to come back first.
func waitExec(t *testing.T, ctx context.Context, c *link.Client, shell string) {
	t.Helper()
	var err error
	ran := func() bool {
		_, err = c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: shell}})
		if err != nil && !errdefs.IsNotRunning(err) {
			t.Fatalf("exec %q: %v", shell, err)
		}
		return err == nil
	}
	if !waittest.Until(30*time.Second, ran) {
		t.Fatalf("exec %q: %v", shell, err)
	}
}

// Another host process sees the neuron and reaches its agent (through a
// bridge of its own), and can destroy it.
func TestAnotherProcess(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	if _, err := f.mgr.Create(ctx, "shared", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := f.manager()
	st, err := other.Get(ctx, "shared")
	if err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("the other process sees %+v %v", st, err)
	}
	list, err := other.List(ctx)
	if err != nil || len(list) != 1 || list[0].Status != sandbox.StatusRunning {
		t.Fatalf("list: %+v %v", list, err)
	}
	c, err := other.Connect(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if got := exec1(t, ctx, c, "echo $((6*7))"); got != "42" {
		t.Fatalf("exec: %q", got)
	}
	if err := other.Destroy(ctx, "shared", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mgr.Get(ctx, "shared"); !errdefs.IsNotFound(err) {
		t.Fatalf("after a wipe: %v", err)
	}
}

// Destroys leave no jail directory behind: the neuron's goes, and the
// jailer's directory above the jails once the last one has gone.
func TestDestroyLeavesNoJailDirectory(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"j1", "j2"} {
		if _, err := f.mgr.Create(f.ctx, id, sandbox.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	jails := filepath.Dir(f.jail("j1").dir)
	if err := f.mgr.Destroy(f.ctx, "j1", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(jails); err != nil || len(entries) != 1 {
		t.Fatalf("with j2 running, the jails: %v %v", entries, err)
	}
	if err := f.mgr.Destroy(f.ctx, "j2", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(f.cfg.ChrootBase); len(entries) != 0 {
		t.Fatalf("after the last wipe, %s holds %v", f.cfg.ChrootBase, entries)
	}
	// The next create makes it again.
	if _, err := f.mgr.Create(f.ctx, "j3", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// What the mode cannot enforce fails the create, before anything starts.
func TestPolicyRefusals(t *testing.T) {
	f := newFixture(t)
	for name, c := range map[string]struct {
		opts  sandbox.CreateOptions
		check func(error) bool
		says  string
	}{
		"egress":    {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress}}, errdefs.IsInvalid, "needs an allow-list"},
		"bad allow": {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"https://bad.example"}}}, errdefs.IsInvalid, `"https://bad.example"`},
		"full":      {sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}, isUnenforceable, "never bridges"},
		"allow":     {sandbox.CreateOptions{Network: sandbox.Network{Allow: []string{"x"}}}, errdefs.IsInvalid, "allow-list"},
		"ctx":       {sandbox.CreateOptions{Ctx: "/mnt/ctx"}, isUnenforceable, "/ctx"},
		"tiny":      {sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}, errdefs.IsInvalid, "128 MiB"},
		"cpus":      {sandbox.CreateOptions{Limits: sandbox.Limits{CPUs: 33}}, errdefs.IsInvalid, "at most 32"},
		"image":     {sandbox.CreateOptions{Image: "debian:12"}, errdefs.IsInvalid, "absolute path"},
		"negative":  {sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: -1}}, errdefs.IsInvalid, "negative"},
		"bad env":   {sandbox.CreateOptions{Env: []string{"NOEQUALS"}}, errdefs.IsInvalid, "KEY=VALUE"},
	} {
		_, err := f.mgr.Create(f.ctx, "p-"+strings.ReplaceAll(name, " ", "-"), c.opts)
		if err == nil || !c.check(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want a refusal saying %q", name, err, c.says)
		}
	}
	entries, _ := os.ReadDir(f.cfg.ChrootBase)
	if len(entries) != 0 {
		t.Errorf("a refused create left jails: %v", entries)
	}
}

func isUnenforceable(err error) bool {
	var u *sandbox.UnenforceableError
	return errors.As(err, &u)
}

// A boot whose agent never answers fails with why: the bridge's last
// attempt and Firecracker's log.
func TestBootTimeoutSaysWhy(t *testing.T) {
	f := newFixtureWith(t, func(c *fakefc.Config) { c.BootDelayMs = int(time.Hour / time.Millisecond) })
	_, err := f.mgr.Create(f.ctx, "mute", sandbox.CreateOptions{BootTimeout: 500 * time.Millisecond, NestedUserns: true})
	t.Logf("the boot error:\n%v", err)
	var be *sandbox.BootError
	if !errors.As(err, &be) || !strings.Contains(be.Reason, fmt.Sprintf("vsock port %d", AgentVsockPort)) ||
		!strings.Contains(be.Reason, "nothing listens") || !strings.Contains(be.Log, "Running Firecracker v"+PinnedVersion) {
		t.Fatalf("got %v", err)
	}
	if exists(jailDir(f.cfg.ChrootBase, f.cfg.Firecracker, JailID(f.lay, "mute"))) {
		t.Errorf("a failed boot left its jail")
	}
	if got, err := f.mgr.Get(f.ctx, "mute"); err == nil {
		t.Errorf("a new neuron that failed to boot is still known: %+v", got)
	}
}

// The conformance suite every backend passes, against the fake
// Firecracker (whose guest is a real agent, its home persisting per
// neuron as an overlay disk does). On a KVM host, TestConformanceKVM runs
// it against real VMs.
func TestConformanceFake(t *testing.T) {
	sandboxtest.Run(t, fakeConformance(t, nil))
}

// The snapshot capability's suite against the fake, whose snapshots hold
// no guest state (TestSnapshotterKVM looks for it in real VMs);
// TestSnapshotRestore checks what the fake records of the VMM's side.
func TestSnapshotterFake(t *testing.T) {
	sandboxtest.RunSnapshotter(t, fakeConformance(t, nil))
}

// The fork suite against the fake, whose snapshots hold the guest's
// files but not its processes (TestForkerKVM looks for them in real VMs).
func TestForkerFake(t *testing.T) {
	sandboxtest.RunForker(t, fakeConformance(t, nil))
}

// fakeConformance is the suites' configuration over a fixture of the
// fake, its configuration changed by fake (nil: none).
func fakeConformance(t testing.TB, fake func(*fakefc.Config)) sandboxtest.Config {
	f := newFixtureWith(t, fake)
	return sandboxtest.Config{
		New: func(e sandbox.Env) sandbox.Manager {
			cfg := f.cfg
			cfg.ChrootBase = filepath.Join(e.Layout.Home, "jail")
			m, err := New(e, WithConfig(cfg), WithKVMProbe(fakeKVM))
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		Env:          func(testing.TB) sandbox.Env { return f.env },
		Unconfined:   "the fake Firecracker runs its guest's agent on the host (TestConformanceKVM tries the escapes in real VMs)",
		NoDiskWrites: "the fake Firecracker's guest writes to a host directory, not to the overlay disk (TestConformanceKVM tries the ceiling on real VMs)",
		NoGuestState: "the fake Firecracker's guest is an agent on the host, which a restore starts afresh over the host directory it wrote to",
	}
}

// A fork's guest is its source's machine: its agent holds the source's id
// and secret until its PID 1 hands it the fork's. No host connection
// reaches that agent before then (the fork's bridges are held across the
// load), the fork serves its own id, and a guest that refuses the new
// identity (a hostile one) is no fork: the fork fails and leaves nothing.
func TestForkIdentity(t *testing.T) {
	// The control port answers late: a bridge that dialled meanwhile
	// would reach the agent first.
	f := newFixtureWith(t, func(c *fakefc.Config) { c.CtlDelayMs = 300 })
	ctx := f.ctx
	if _, err := f.mgr.Create(ctx, "src", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c, "echo from-src > f.txt")
	if _, err := f.mgr.Fork(ctx, "src", []string{"kid"}, sandbox.ForkOptions{}); err != nil {
		t.Fatal(err)
	}
	var rebinds []fakefc.CtlRecord
	for _, r := range f.ctl("kid") {
		if r.Rebind != "" {
			rebinds = append(rebinds, r)
		}
	}
	if len(rebinds) != 1 || rebinds[0].Rebind != "kid" || rebinds[0].Served != 0 || rebinds[0].SeedLen != 32 {
		t.Fatalf("the fork's guest was told %+v; want one rebind to kid, before any host connection reached its agent", rebinds)
	}
	kc, err := f.mgr.Connect(ctx, "kid")
	if err != nil {
		t.Fatal(err)
	}
	if got := exec1(t, ctx, kc, "echo $NSYS_CORTEX_NEURON; cat f.txt"); got != "kid\nfrom-src" {
		t.Fatalf("the fork: %q", got)
	}

	// A guest that will not take the fork's identity.
	h := newFixtureWith(t, func(c *fakefc.Config) { c.RefuseRebind = true })
	if _, err := h.mgr.Create(h.ctx, "src", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = h.mgr.Fork(h.ctx, "src", []string{"kid"}, sandbox.ForkOptions{})
	if err == nil || !strings.Contains(err.Error(), "giving the fork its identity") || !strings.Contains(err.Error(), "takes no new identity") {
		t.Fatalf("a fork whose guest refused its identity: %v", err)
	}
	if st, err := h.mgr.Get(h.ctx, "kid"); err == nil {
		t.Fatalf("the refused fork is still known: %+v", st)
	}
	if exists(h.lay.OverlayDir("kid")) || exists(jailDir(h.cfg.ChrootBase, h.cfg.Firecracker, JailID(h.lay, "kid"))) || exists(h.lay.SnapshotsDir("kid")) {
		t.Error("the refused fork left its data, its jail or its snapshots' directory")
	}
	if st, err := h.mgr.Get(h.ctx, "src"); err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("the source after a refused fork: %+v, %v", st, err)
	}
}
