package tools_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

const fakeVMMode = "fakevm"

// fakeVM is a real process-mode manager that snapshots whole neurons
// itself, as the microVM modes do: the boundary the kit routes on
// (sandbox.Snapshotter). Its snapshots hold a machine state and no files;
// its restore stops and starts the neuron, so a channel from before is
// dead after it.
type fakeVM struct {
	sandbox.Manager
	lay layout.Layout

	mu    sync.Mutex
	calls []string
}

var _ sandbox.Snapshotter = (*fakeVM)(nil)

func (f *fakeVM) Mode() string { return fakeVMMode }

func (f *fakeVM) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeVM) Snapshot(ctx context.Context, id, name string) (*store.Snapshot, error) {
	f.record("snapshot " + name)
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	dir := filepath.Join(f.lay.SnapshotsDir(id), name)
	if _, err := os.Lstat(dir); err == nil {
		return nil, store.ErrSnapshotExists
	}
	if err := os.MkdirAll(filepath.Join(dir, "vm"), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "vm", "state"), []byte("memory"), 0o600); err != nil {
		return nil, err
	}
	s := &store.Snapshot{Name: name, Neuron: id, Created: time.Now().UTC(), Files: 1, Bytes: 6, Mode: fakeVMMode}
	return s, store.WriteJSON(filepath.Join(dir, "snapshot.json"), s, 0o600)
}

func (f *fakeVM) Restore(ctx context.Context, id, name string) (*sandbox.State, error) {
	f.record("restore " + name)
	if err := f.Destroy(ctx, id, sandbox.DestroyOptions{}); err != nil {
		return nil, err
	}
	return f.Create(ctx, id, sandbox.CreateOptions{})
}

func (f *fakeVM) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func agentPID(t *testing.T, e *toolstest.Env) int {
	t.Helper()
	_, st, err := e.Set.FindExact(e.Ctx, e.State.ID)
	if err != nil {
		t.Fatal(err)
	}
	return st.PID
}

// On a neuron whose manager snapshots whole neurons, the snapshot tool
// goes through the manager (no copy of files is made), refuses a copy of
// files before touching the neuron, and reconnects after a restore.
func TestSnapshotOfAVMNeuronGoesThroughItsManager(t *testing.T) {
	var vm *fakeVM
	e := toolstest.NewOn(t, sandbox.Backend{Name: fakeVMMode, New: func(env sandbox.Env) (sandbox.Manager, error) {
		vm = &fakeVM{Manager: process.New(env), lay: env.Layout}
		return vm, nil
	}}, "standard")
	dir := e.Layout.SnapshotsDir(e.State.ID)
	contains(t, e.Call("snapshot", map[string]any{"action": "create", "name": "s1"}, false), `snapshot "s1" created: the whole VM`)
	if _, err := os.Stat(filepath.Join(dir, "s1", "data")); !os.IsNotExist(err) {
		t.Fatalf("the kit copied the VM neuron's files: %v", err)
	}
	contains(t, e.Call("snapshot", map[string]any{"action": "list"}, false), "s1", "whole VM")

	// A copy of files (as another mode took it) is not restored into it.
	if _, err := store.CreateSnapshot(dir, "files", e.State.ID, e.State.OverlayPath); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, e)
	contains(t, e.Call("snapshot", map[string]any{"action": "restore", "name": "files"}, true), "is a copy of files")
	if got := agentPID(t, e); got != pid {
		t.Fatalf("a refused restore restarted the neuron: pid %d, was %d", got, pid)
	}

	contains(t, e.Call("snapshot", map[string]any{"action": "restore", "name": "s1"}, false), `restored snapshot "s1": the whole VM`, "processes")
	if got := vm.recorded(); !slices.Equal(got, []string{"snapshot s1", "restore s1"}) {
		t.Fatalf("manager calls %q", got)
	}
	if got := agentPID(t, e); got == pid {
		t.Fatal("the restore did not replace the neuron")
	}
	// The channel from before died with the restore: the kit connects anew.
	contains(t, e.Call("bash", map[string]any{"command": "echo alive"}, false), "alive")
}

// A VM snapshot found beside a neuron of files (its id was a VM neuron
// once) is refused: its disk image is never copied into the overlay, and
// the neuron is not stopped.
func TestVMSnapshotIsNotRestoredAsFiles(t *testing.T) {
	e := newEnv(t, "standard")
	e.Put("keep.txt", "mine\n")
	snap := filepath.Join(e.Layout.SnapshotsDir(e.State.ID), "vm1")
	for _, d := range []string{"data", "vm"} {
		if err := os.MkdirAll(filepath.Join(snap, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(snap, "data", "overlay.ext4"), []byte("ext4"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &store.Snapshot{Name: "vm1", Neuron: e.State.ID, Created: time.Now().UTC(), Files: 1, Bytes: 4, Mode: "qemu"}
	if err := store.WriteJSON(filepath.Join(snap, "snapshot.json"), s, 0o600); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, e)
	contains(t, e.Call("snapshot", map[string]any{"action": "restore", "name": "vm1"}, true), "whole-VM snapshot of mode qemu", "never copied into an overlay")
	if got := agentPID(t, e); got != pid {
		t.Fatalf("a refused restore restarted the neuron: pid %d, was %d", got, pid)
	}
	if got := e.Get("keep.txt"); got != "mine\n" {
		t.Fatalf("keep.txt: %q", got)
	}
	if _, err := os.Stat(e.File("overlay.ext4")); !os.IsNotExist(err) {
		t.Fatalf("the disk image reached the workspace: %v", err)
	}
}

// Snapshots take the host's disk: past the home's caps (snapshots.max,
// snapshots.max_bytes) a new one is refused with a CapacityError that
// names the cap, and removing one makes room again. The agent's snapshot
// tool goes through the same check.
func TestSnapshotCaps(t *testing.T) {
	e := toolstest.NewTuned(t, process.Backend(), func(env *sandbox.Env) {
		env.MaxSnapshots, env.MaxSnapshotBytes = 2, 4<<20
	}, "trusted")
	n := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID)
	for _, name := range []string{"a", "b"} {
		if _, err := n.CreateSnapshot(e.Ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	_, err := n.CreateSnapshot(e.Ctx, "c")
	var ce *sandbox.CapacityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "snapshots.max") {
		t.Fatalf("a third snapshot past snapshots.max 2: %v", err)
	}
	if text := e.Call("snapshot", map[string]any{"action": "create", "name": "c"}, true); !strings.Contains(text, "snapshots.max") {
		t.Fatalf("the snapshot tool past the cap: %s", text)
	}
	if err := n.RemoveSnapshot(e.Ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// 5 MiB of data: the cap holds while a snapshot is made, not only
	// before: the copy stops at what is left of it, and leaves nothing.
	e.Put("big", strings.Repeat("x", 5<<20))
	if _, err := n.CreateSnapshot(e.Ctx, "c"); !errdefs.IsCapacity(err) || !strings.Contains(err.Error(), "snapshots.max_bytes") {
		t.Fatalf("a snapshot that would pass snapshots.max_bytes: %v", err)
	}
	e.Put("big", strings.Repeat("x", 3<<20))
	if _, err := n.CreateSnapshot(e.Ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveSnapshot(e.Ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// 3 MiB held: the next 3 MiB would pass 4 MiB.
	if _, err := n.CreateSnapshot(e.Ctx, "d"); !errdefs.IsCapacity(err) || !strings.Contains(err.Error(), "snapshots.max_bytes") {
		t.Fatalf("a snapshot past snapshots.max_bytes: %v", err)
	}
	all, err := n.Snapshots(e.Ctx)
	if err != nil || len(all) != 1 || all[0].Name != "c" {
		t.Fatalf("snapshots left: %+v %v", all, err)
	}
	// A sparse file of 2 GiB is what it holds (nothing), not its length.
	if out := e.Call("bash", map[string]any{"command": "rm big && truncate -s 2G sparse && echo made"}, false); !strings.Contains(out, "made") {
		t.Fatal(out)
	}
	if err := n.RemoveSnapshot(e.Ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if snap, err := n.CreateSnapshot(e.Ctx, "e"); err != nil || snap.Bytes > 1<<20 {
		t.Fatalf("a snapshot of a 2 GiB sparse file: %+v %v", snap, err)
	}
}

// A paused neuron is snapshotted as it is, without resuming it; a restore
// keeps its deadline and idle rule (a restore is no way around them); both
// are recorded as events. The kit's next call resumes it.
func TestSnapshotsOfAPausedNeuronAndTheirEvents(t *testing.T) {
	e := toolstest.New(t, "trusted")
	n := tools.NewSetNeuron(e.Set, e.Layout, e.State.ID)
	m, err := e.Set.Manager(e.State.Mode)
	if err != nil {
		t.Fatal(err)
	}
	e.Put("kept.txt", "v1\n")
	if _, err := m.(sandbox.Deadliner).SetTimeout(e.Ctx, e.State.ID, time.Hour, sandbox.OnTimeoutPause); err != nil {
		t.Fatal(err)
	}
	if _, err := m.(sandbox.Pauser).Pause(e.Ctx, e.State.ID, sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateSnapshot(e.Ctx, "p"); err != nil {
		t.Fatal(err)
	}
	st, err := n.State(e.Ctx)
	if err != nil || st.Status != sandbox.StatusPaused {
		t.Fatalf("after a snapshot: %v %v, want it still paused", st, err)
	}
	e.Put("kept.txt", "v2\n")
	if _, err := n.RestoreSnapshot(e.Ctx, "p"); err != nil {
		t.Fatal(err)
	}
	st, err = n.State(e.Ctx)
	if err != nil || st.Deadline == nil || time.Until(*st.Deadline) < 50*time.Minute || st.OnTimeout != sandbox.OnTimeoutPause {
		t.Fatalf("after a restore: %+v, %v: want its deadline kept", st, err)
	}
	if got := e.Get("kept.txt"); got != "v1\n" {
		t.Fatalf("kept.txt after the restore: %q", got)
	}
	if _, err := m.(sandbox.Pauser).Pause(e.Ctx, e.State.ID, sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if text := e.Call("bash", map[string]any{"command": "cat kept.txt"}, false); !strings.Contains(text, "v1") {
		t.Fatalf("the kit on a paused neuron: %s", text)
	}
	evs, err := events.Open(e.Layout).Read(events.Filter{Neurons: []string{e.State.ID}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		names = append(names, string(ev.Type))
	}
	if got := strings.Join(names, " "); got != "created started paused snapshot-created destroyed started snapshot-restored paused resumed" {
		t.Errorf("events: %s", got)
	}
}
