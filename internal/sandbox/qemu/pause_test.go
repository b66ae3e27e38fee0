package qemu_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// TestLifecycle: the lifecycle suite on real VMs; a pause is QMP's stop,
// a pause to disk saves the machine and QEMU exits.
func TestLifecycle(t *testing.T) {
	sandboxtest.RunLifecycle(t, conformance(t))
}

// TestPauseToDisk: a VM paused to disk has no QEMU left, reads paused to
// every process, and a request resumes it from what was saved: the
// process that counted before counts on, from where it was. A pause in
// memory leaves the guest's clock right after the resume. Destroy of a
// neuron paused to disk discards what was saved.
func TestPauseToDisk(t *testing.T) {
	f := newVM(t)
	ctx := f.ctx
	st, c := f.create("disk", sandbox.CreateOptions{})
	counter, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: "i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done"}})
	if err != nil {
		t.Fatal(err)
	}
	// The counter renames its file into place, so a read never sees the
	// empty file between a truncation and a write.
	count := func(c *link.Client) int {
		t.Helper()
		n, err := strconv.Atoi(f.sh(c, "cat /tmp/count 2>/dev/null || echo 0"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waittest.For(t, time.Minute, "the counter to count", func() bool { return count(c) >= 3 })

	// In memory: the guest's clock, which stood still, is set again.
	if _, err := f.m.Pause(ctx, "disk", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	<-time.After(5 * time.Second) // the pause's length is what is measured: the guest's clock stands still meanwhile
	if _, err := f.m.Resume(ctx, "disk"); err != nil {
		t.Fatal(err)
	}
	guest, err := strconv.ParseInt(f.sh(c, "date +%s"), 10, 64) // busybox: whole seconds
	if err != nil {
		t.Fatal(err)
	}
	if off := time.Duration(guest-time.Now().Unix()) * time.Second; off.Abs() > 2*time.Second {
		t.Errorf("after a 5 s pause the guest's clock is %s off", off)
	}

	// To disk.
	before := count(c)
	if _, err := f.m.Pause(ctx, "disk", sandbox.PauseOptions{ToDisk: true}); err != nil {
		t.Fatal(err)
	}
	if pids := qemuProcesses(f.lay, "disk"); len(pids) > 0 || store.Alive(st.PID, st.PIDStart) {
		t.Fatalf("QEMU runs on while paused to disk: %v", pids)
	}
	saved := filepath.Join(f.lay.OverlayDir("disk"), ".suspended")
	if fi, err := os.Stat(filepath.Join(saved, "vm", "state")); err != nil || fi.Size() == 0 {
		t.Fatalf("the saved machine: %v", err)
	}
	other := qemu.New(sandbox.Env{Layout: f.lay, AgentBinary: env(t).AgentBinary})
	defer other.Close()
	got, err := other.Get(ctx, "disk")
	if err != nil || got.Status != sandbox.StatusPaused || got.PausedAt == nil {
		t.Fatalf("another process sees %+v, %v", got, err)
	}
	if all, _ := other.List(ctx); len(all) != 1 || all[0].Status != sandbox.StatusPaused {
		t.Fatalf("list: %+v", all)
	}
	if met, err := other.Metrics(ctx, "disk"); err != nil || met.Status != sandbox.StatusPaused || met.CPUSeconds != 0 || !strings.Contains(met.Source, "disk") {
		t.Errorf("metrics while paused to disk: %+v, %v", met, err)
	}
	if _, err := other.Create(ctx, "disk", sandbox.CreateOptions{Image: f.img}); !errdefs.IsExists(err) {
		t.Errorf("create of a neuron paused to disk: %v, want EXISTS", err)
	}
	if _, err := other.Pause(ctx, "disk", sandbox.PauseOptions{ToDisk: true}); !errors.Is(err, sandbox.ErrAlreadyPaused) {
		t.Errorf("pause of a neuron paused to disk: %v", err)
	}
	if _, err := c.Health(ctx); !errdefs.IsNotRunning(err) {
		t.Errorf("the pausing process's old channel: %v, want NOT_RUNNING", err)
	}
	// A snapshot of it is made from what was saved: no QEMU starts.
	if _, err := other.Snapshot(ctx, "disk", "ondisk"); err != nil {
		t.Fatalf("snapshot of a neuron paused to disk: %v", err)
	}
	if pids := qemuProcesses(f.lay, "disk"); len(pids) > 0 {
		t.Fatalf("the snapshot started QEMU: %v", pids)
	}
	if got, _ := other.Get(ctx, "disk"); got == nil || got.Status != sandbox.StatusPaused {
		t.Fatalf("after its snapshot: %+v", got)
	}

	// A request from another process resumes it.
	c2, err := other.Connect(ctx, "disk")
	if err != nil {
		t.Fatal(err)
	}
	// /tmp is the guest's tmpfs: a count at or past the one before the
	// pause is the saved memory's. (How far past depends on how long the
	// resumed guest ran before this read, which a loaded host stretches:
	// not checked.)
	after := count(c2)
	if after < before {
		t.Errorf("the counter was at %d before the pause, %d after: it did not count on from where it was", before, after)
	}
	waittest.For(t, 30*time.Second, "the counter to count on after the resume", func() bool { return count(c2) > after })
	procs, err := c2.ProcList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var running bool
	for _, p := range procs {
		running = running || (p.PID == counter.PID && p.Running)
	}
	if !running {
		t.Errorf("the counter (%d) is not among the running processes: %+v", counter.PID, procs)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("the saved machine outlived the resume: %v", err)
	}
	if got, _ := f.m.Get(ctx, "disk"); got == nil || got.Status != sandbox.StatusRunning || !got.CreatedAt.Equal(st.CreatedAt) {
		t.Errorf("after the resume: %+v (created %s before)", got, st.CreatedAt)
	}

	// The snapshot made while it was on disk brings back the counter as
	// it was then: a mark the resumed guest made in its tmpfs is not in
	// the restored memory (a count alone would measure time: CI once
	// read 140 after the restore's relay waited 15 s for the guest).
	f.sh(c2, "echo resumed > /tmp/mark")
	if _, err := f.m.Restore(ctx, "disk", "ondisk"); err != nil {
		t.Fatalf("restore of the snapshot made on disk: %v", err)
	}
	c3, err := f.m.Connect(ctx, "disk")
	if err != nil {
		t.Fatal(err)
	}
	if mark := f.sh(c3, "cat /tmp/mark 2>/dev/null || echo none"); mark != "none" {
		t.Errorf("restored from the snapshot made on disk, the guest holds the mark made after it (%q): its memory is not the snapshot's", mark)
	}
	if n := count(c3); n < before {
		t.Errorf("restored from the snapshot made on disk, the counter is at %d; it was %d at the pause", n, before)
	}

	// Paused to disk again, and destroyed: nothing saved is left.
	if _, err := f.m.Pause(ctx, "disk", sandbox.PauseOptions{ToDisk: true}); err != nil {
		t.Fatal(err)
	}
	if err := other.Destroy(ctx, "disk", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("destroy left the saved machine: %v", err)
	}
	if got, _ := f.m.Get(ctx, "disk"); got == nil || got.Status != sandbox.StatusStopped {
		t.Errorf("after destroy: %+v", got)
	}
	if pids := qemuProcesses(f.lay, "disk"); len(pids) > 0 {
		t.Errorf("QEMU after destroy: %v", pids)
	}
}
