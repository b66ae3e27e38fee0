package firecracker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
)

// The lifecycle suite against the fake Firecracker, whose guest halts on
// PATCH /vm {"state":"Paused"} as a VM's vCPUs do (its vsock carries
// nothing and its processes stop), and against real VMs on a KVM host.
func TestLifecycleFake(t *testing.T) {
	sandboxtest.RunLifecycle(t, fakeConformance(t, nil))
}

func TestLifecycleKVM(t *testing.T) {
	sandboxtest.RunLifecycle(t, kvmConformance(t))
}

// A pause is PATCH /vm, and so is its resume; a pause to disk is a full
// snapshot of the paused VM kept beside the overlay disk, then no
// Firecracker at all, and a resume loads it into a fresh one and renews
// the guest's clock and RNG; a destroy discards what was saved. A
// snapshot of a paused VM leaves it paused.
func TestPauseCalls(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	st, err := f.mgr.Create(ctx, "pz", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "pz")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c, "true")
	n := len(f.calls("pz"))
	if _, err := f.mgr.Pause(ctx, "pz", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	// A snapshot of a paused VM leaves it paused.
	if _, err := f.mgr.Snapshot(ctx, "pz", "while-paused"); err != nil {
		t.Fatal(err)
	}
	if got, err := f.mgr.Get(ctx, "pz"); err != nil || got.Status != sandbox.StatusPaused {
		t.Fatalf("after a snapshot of a paused VM: %+v, %v", got, err)
	}
	if _, err := f.mgr.Resume(ctx, "pz"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range f.calls("pz")[n:] {
		if c.Method == "PATCH" {
			got = append(got, fmt.Sprintf("%s %s %d", c, c.Body, c.Status))
		}
	}
	if !slices.Equal(got, []string{`PATCH /vm {"state":"Paused"} 204`, `PATCH /vm {"state":"Paused"} 204`, `PATCH /vm {"state":"Resumed"} 204`}) {
		t.Fatalf("state changes of a pause, a snapshot and a resume: %q", got)
	}
	if _, err := f.mgr.Pause(ctx, "pz", sandbox.PauseOptions{ToDisk: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.lay.OverlayDir("pz"), ".suspended", "vm", "mem")); err != nil {
		t.Fatalf("the saved machine: %v", err)
	}
	if store.Alive(st.PID, st.PIDStart) || len(f.mgr.rt.scan(f.lay)) != 0 {
		t.Fatalf("Firecracker runs on while paused to disk")
	}
	if got, err := f.manager().Get(ctx, "pz"); err != nil || got.Status != sandbox.StatusPaused || got.PausedAt == nil {
		t.Fatalf("another process sees %+v, %v", got, err)
	}
	if _, err := f.mgr.Resume(ctx, "pz"); err != nil {
		t.Fatal(err)
	}
	calls := strings.Join(callNames(f.calls("pz")), "\n")
	for _, want := range []string{"PUT /snapshot/create", "PUT /snapshot/load", "PATCH /vm"} {
		if !strings.Contains(calls, want) {
			t.Errorf("no %s among the calls:\n%s", want, calls)
		}
	}
	if ctl := f.ctl("pz"); !slices.ContainsFunc(ctl, func(r fakefc.CtlRecord) bool { return r.Op == "restored" && r.SeedLen >= 32 }) {
		t.Errorf("the resumed guest was not told it was restored: %+v", ctl)
	}
	if _, err := os.Stat(filepath.Join(f.lay.OverlayDir("pz"), ".suspended")); !os.IsNotExist(err) {
		t.Errorf("the saved machine outlived its resume: %v", err)
	}
	c, err = f.mgr.Connect(ctx, "pz")
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, c, "true")
	// Paused to disk again, then destroyed: nothing saved is left.
	if _, err := f.mgr.Pause(ctx, "pz", sandbox.PauseOptions{ToDisk: true}); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Destroy(ctx, "pz", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.lay.OverlayDir("pz"), ".suspended")); !os.IsNotExist(err) {
		t.Errorf("destroy left the saved machine: %v", err)
	}
	if got, err := f.mgr.Get(ctx, "pz"); err != nil || got.Status != sandbox.StatusStopped {
		t.Errorf("after destroy: %+v, %v", got, err)
	}
}
