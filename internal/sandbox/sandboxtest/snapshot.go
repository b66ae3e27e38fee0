package sandboxtest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunSnapshotter runs the conformance suite of the snapshot capability
// (sandbox.Snapshotter: whole neurons, memory and processes with their
// files) against every mode that has it. Its checks are the interface's
// doc comment, one by one.
func RunSnapshotter(t *testing.T, cfg Config) {
	if cfg.New == nil || cfg.Env == nil {
		t.Fatal("sandboxtest: Config needs New and Env")
	}
	t.Run("SnapshotRestore", func(t *testing.T) { testSnapshotRestore(t, newFixture(t, cfg)) })
	t.Run("Refusals", func(t *testing.T) { testSnapshotRefusals(t, newFixture(t, cfg)) })
	t.Run("Paused", func(t *testing.T) { testSnapshotPaused(t, newFixture(t, cfg)) })
}

// snapshotter returns the fixture's new manager and its snapshot side, or
// fails: a mode that runs this suite has one.
func (f *fixture) snapshotter() (sandbox.Manager, sandbox.Snapshotter) {
	f.t.Helper()
	m := f.manager()
	s, ok := m.(sandbox.Snapshotter)
	if !ok {
		f.t.Fatalf("%s mode's manager is no sandbox.Snapshotter", m.Mode())
	}
	return m, s
}

// connect connects to neuron id and waits for its agent's first answer.
func (f *fixture) connect(m sandbox.Manager, id string) *link.Client {
	f.t.Helper()
	c, err := m.Connect(f.ctx, id)
	if err != nil {
		f.t.Fatalf("connect %s: %v", id, err)
	}
	if _, err := c.Health(f.ctx); err != nil {
		f.t.Fatalf("the agent of %s: %v", id, err)
	}
	return c
}

// shell runs script in the neuron and returns its output, trimmed.
func (f *fixture) shell(c *link.Client, script string) string {
	f.t.Helper()
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: sh(script)})
	if err != nil || res.ExitCode != 0 {
		f.t.Fatalf("%s: %v %+v", script, err, res)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// ticks reads the counter the snapshot test's background process keeps.
func (f *fixture) ticks(c *link.Client) int {
	f.t.Helper()
	n, err := strconv.Atoi(f.shell(c, "cat ticks"))
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// wantClock checks the neuron's clock, to a guest kernel's coarse tick:
// the mtime of a file written now is within 100 ms of the host's clock.
func wantClock(t *testing.T, c *link.Client, when string) {
	t.Helper()
	lo := time.Now()
	fi, err := c.WriteFileStat(context.Background(), "clock", []byte("now"), nil)
	hi := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if fi.ModTime.Before(lo.Add(-100*time.Millisecond)) || fi.ModTime.After(hi.Add(100*time.Millisecond)) {
		t.Fatalf("the neuron's clock %s: %s, the host's %s..%s", when, fi.ModTime.Format(time.StampMicro), lo.Format(time.StampMicro), hi.Format(time.StampMicro))
	}
}

func testSnapshotRestore(t *testing.T, f *fixture) {
	m, s := f.snapshotter()
	ctx := f.ctx
	st := f.create(m, "snap")
	c := f.connect(m, "snap")
	wantClock(t, c, "after a create")
	if err := c.WriteFile(ctx, "state.txt", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	// A background process that counts, in memory and in a file.
	bg, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("i=0; while :; do i=$((i+1)); echo $i > ticks.tmp && mv ticks.tmp ticks; sleep 0.1; done")})
	if err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 10*time.Second, "the counter to start", func() bool { ok, _ := c.Exists(ctx, "ticks"); return ok })
	before := f.ticks(c)

	snap, err := s.Snapshot(ctx, "snap", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name != "s1" || snap.Neuron != "snap" || snap.Mode != m.Mode() {
		t.Errorf("the snapshot's record: %+v", snap)
	}
	dir := f.env.Layout.SnapshotsDir("snap")
	if list, err := store.ListSnapshots(dir); err != nil || len(list) != 1 || list[0].Name != "s1" || list[0].Mode != m.Mode() {
		t.Errorf("the store does not list the snapshot as this mode's: %+v %v", list, err)
	}
	if _, err := store.RestoreSnapshot(dir, "s1", t.TempDir()); !errors.Is(err, store.ErrSnapshotMismatch) {
		t.Errorf("the store restored a whole-neuron snapshot as files: %v", err)
	}
	// The neuron runs on after the snapshot (its channel may drop and be
	// dialled again), and changes.
	waittest.For(t, 10*time.Second, "the agent after the snapshot", func() bool { _, err := c.Health(ctx); return err == nil })
	if f.cfg.NoGuestState == "" {
		if got := f.ticks(c); got < before {
			t.Fatalf("after the snapshot the counter went back: %d < %d", got, before)
		}
	}
	if err := c.WriteFile(ctx, "state.txt", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "later.txt", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	// The point of the test, not a wait for a condition: long enough that
	// a clock left as the snapshot saved it would be seconds behind.
	time.Sleep(2 * time.Second)

	restore := func() *link.Client {
		t.Helper()
		got, err := s.Restore(ctx, "snap", "s1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sandbox.StatusRunning || got.PID <= 0 {
			t.Fatalf("state after restore: %+v", got)
		}
		return f.connect(m, "snap")
	}
	c2 := restore()
	f.wantRestored(c2, bg.PID)
	wantClock(t, c2, "after a restore")
	random := func(c *link.Client) string { return f.shell(c, "od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'") }
	r1 := random(c2)
	c3 := restore()
	if r2 := random(c3); r1 == r2 || len(r1) != 64 {
		t.Fatalf("two restores of one snapshot share their random numbers: %s %s", r1, r2)
	}

	// A stopped neuron comes back too.
	if err := m.Destroy(ctx, "snap", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if store.Alive(st.PID, st.PIDStart) {
		t.Fatalf("the neuron's first process %d outlived two restores and a destroy", st.PID)
	}
	f.wantRestored(restore(), bg.PID)
}

// wantRestored checks a neuron restored from the snapshot taken with
// state.txt "before", before later.txt was written, while the counter pid
// ran: the file is back, the later one gone, the counter counts on.
func (f *fixture) wantRestored(c *link.Client, pid int) {
	t := f.t
	t.Helper()
	if f.cfg.NoGuestState != "" {
		t.Logf("not checked after the restore: its files and processes (%s)", f.cfg.NoGuestState)
		return
	}
	if got, err := c.ReadFile(f.ctx, "state.txt"); err != nil || string(got) != "before" {
		t.Fatalf("state.txt after the restore: %q %v", got, err)
	}
	if ok, err := c.Exists(f.ctx, "later.txt"); err != nil || ok {
		t.Fatalf("a file written after the snapshot is there after the restore: %v %v", ok, err)
	}
	procs, err := c.ProcList(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	running := false
	for _, p := range procs {
		running = running || (p.PID == pid && p.Running)
	}
	if !running {
		t.Fatalf("the process that ran at the snapshot (%d) is not running after the restore: %+v", pid, procs)
	}
	n := f.ticks(c)
	waittest.For(t, 10*time.Second, "the counter to count on after the restore", func() bool { return f.ticks(c) > n })
}

func testSnapshotRefusals(t *testing.T, f *fixture) {
	m, s := f.snapshotter()
	ctx := f.ctx
	st := f.create(m, "ref")
	if _, err := s.Snapshot(ctx, "ref", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "ref", "s1"); !errors.Is(err, store.ErrSnapshotExists) {
		t.Errorf("a second snapshot of the same name: %v, want ErrSnapshotExists", err)
	}
	if _, err := s.Snapshot(ctx, "ref", "../x"); !errdefs.IsInvalid(err) {
		t.Errorf("a bad snapshot name: %v, want InvalidError", err)
	}
	if _, err := s.Restore(ctx, "ref", "nope"); !errors.Is(err, store.ErrSnapshotNotFound) {
		t.Errorf("restore of an unknown snapshot: %v, want ErrSnapshotNotFound", err)
	}
	// A copy of files is no whole-neuron snapshot: refused before the
	// neuron is touched.
	if _, err := store.CreateSnapshot(f.env.Layout.SnapshotsDir("ref"), "files", "ref", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(ctx, "ref", "files"); !errdefs.IsInvalid(err) || !errors.Is(err, store.ErrSnapshotMismatch) {
		t.Errorf("restore of a copy of files: %v, want InvalidError and ErrSnapshotMismatch", err)
	}
	if got, err := m.Get(ctx, "ref"); err != nil || got.Status != sandbox.StatusRunning || got.PID != st.PID {
		t.Errorf("a refused restore touched the neuron: %+v %v", got, err)
	}
	if err := m.Destroy(ctx, "ref", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "ref", "s2"); !errdefs.IsNotRunning(err) {
		t.Errorf("snapshot of a stopped neuron: %v, want NotRunningError", err)
	}
}

// testSnapshotPaused: a paused neuron is snapshot as it stands, twice,
// and stays paused; the resume finds its processes where they were, and a
// restore of either snapshot brings back the machine as it was paused.
func testSnapshotPaused(t *testing.T, f *fixture) {
	m, s := f.snapshotter()
	pm, ok := m.(sandbox.Pauser)
	if !ok {
		t.Skipf("%s mode cannot pause", m.Mode())
	}
	ctx := f.ctx
	f.create(m, "psnap")
	c := f.connect(m, "psnap")
	if err := c.WriteFile(ctx, "state.txt", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	bg, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("i=0; while :; do i=$((i+1)); echo $i > ticks.tmp && mv ticks.tmp ticks; sleep 0.1; done")})
	if err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 10*time.Second, "the counter to start", func() bool { ok, _ := c.Exists(ctx, "ticks"); return ok })
	if _, err := pm.Pause(ctx, "psnap", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	paused := func(when string) {
		t.Helper()
		if got, err := m.Get(ctx, "psnap"); err != nil || got.Status != sandbox.StatusPaused {
			t.Fatalf("%s: %+v %v, want paused", when, got, err)
		}
	}
	// The second snapshot, with nothing run between, is the case a VM's
	// save-by-migration cannot do twice.
	for _, name := range []string{"p1", "p2"} {
		snap, err := s.Snapshot(ctx, "psnap", name)
		if err != nil {
			t.Fatalf("snapshot %s of a paused neuron: %v", name, err)
		}
		if snap.Name != name || snap.Mode != m.Mode() {
			t.Errorf("the snapshot's record: %+v", snap)
		}
		paused("after snapshot " + name)
	}
	if _, err := pm.Resume(ctx, "psnap"); err != nil {
		t.Fatalf("resume after two snapshots: %v", err)
	}
	waittest.For(t, 10*time.Second, "the agent after the resume", func() bool { _, err := c.Health(ctx); return err == nil })
	if f.cfg.NoGuestState != "" {
		t.Logf("not checked after the resume and restores: its files and processes (%s)", f.cfg.NoGuestState)
		return
	}
	n := f.ticks(c)
	waittest.For(t, 10*time.Second, "the counter to count on after the resume", func() bool { return f.ticks(c) > n })
	if err := c.WriteFile(ctx, "state.txt", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "later.txt", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"p2", "p1"} {
		got, err := s.Restore(ctx, "psnap", name)
		if err != nil {
			t.Fatalf("restore of %s: %v", name, err)
		}
		if got.Status != sandbox.StatusRunning {
			t.Fatalf("after the restore of %s: %+v", name, got)
		}
		f.wantRestored(f.connect(m, "psnap"), bg.PID)
	}
}
