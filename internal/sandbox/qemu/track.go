package qemu

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// A neuron is its QEMU process: alive while it is, found among the host's
// processes by the marker in its -name when its state file is lost, and
// stopped by asking the guest to power off first.

// Alive reports whether neuron st's VM runs: its QEMU process, or, for a
// state without one, a QEMU of this home for the neuron.
func (r *runtime) Alive(lay layout.Layout, st *sandbox.State) (bool, error) {
	if st.PID > 0 {
		return store.Alive(st.PID, st.PIDStart), nil
	}
	running, err := r.Running(lay)
	for _, x := range running {
		if x.ID == st.ID {
			return true, err
		}
	}
	return false, err
}

// Stop powers the guest off cleanly (it ends its processes and syncs its
// disks: what the agent wrote is on the overlay disk), then makes sure no
// QEMU of the neuron is left.
func (r *runtime) Stop(lay layout.Layout, id string, st *sandbox.State) {
	// Before and after: a snapshot of the paused VM that finished while it
	// was being stopped may have kept its state meanwhile.
	dropPausedState(lay, id)
	defer dropPausedState(lay, id)
	var pids []int
	if st != nil && st.PID > 0 && store.Alive(st.PID, st.PIDStart) {
		pids = append(pids, st.PID)
	}
	running, _ := r.Running(lay)
	for _, x := range running {
		if x.ID == id && (len(pids) == 0 || x.PID != pids[0]) {
			pids = append(pids, x.PID)
		}
	}
	if len(pids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := control(ctx, lay.ChannelDir(Mode, id), &boot.CtlRequest{Op: boot.OpPoweroff})
	cancel()
	grace := 10 * time.Second
	if err != nil {
		grace = 0 // the guest cannot be asked: stop QEMU
	}
	for _, pid := range pids {
		stopProcess(pid, grace)
	}
}

// stopProcess waits up to grace for pid to exit, then SIGTERMs it (QEMU
// exits at once) and SIGKILLs it if it must.
func stopProcess(pid int, grace time.Duration) {
	gone := func(d time.Duration) bool {
		for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
			if !store.Alive(pid, 0) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	if gone(grace) {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	if gone(3 * time.Second) {
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	gone(2 * time.Second)
}

// Running lists this home's QEMU processes by the marker in their -name.
func (r *runtime) Running(lay layout.Layout) ([]lifecycle.Running, error) {
	prefix := Marker(lay, "")
	found := store.FindProcesses(func(argv []string) (string, bool) {
		for i := 0; i+1 < len(argv); i++ {
			if argv[i] == "-name" {
				id, ok := strings.CutPrefix(strings.TrimPrefix(argv[i+1], "guest="), prefix)
				return id, ok && id != ""
			}
		}
		return "", false
	})
	out := make([]lifecycle.Running, 0, len(found))
	for _, f := range found {
		out = append(out, lifecycle.Running{ID: f.Of, PID: f.PID})
	}
	return out, nil
}
