package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Pause and usage (docs/lifecycle.md). A pause is QMP's stop: the vCPUs
// halt, and with them everything in the guest, its agent too; cont runs
// them again, and the guest's clock, which stood still, is set from the
// host's. A pause to disk saves the stopped machine's state beside the
// neuron's overlay disk (overlays/<id>/.suspended, laid out as a
// snapshot's vm/ part) and QEMU exits; the resume boots a QEMU that loads
// it, as a restore does. Usage is the QEMU process's, and, while the guest
// runs, what its agent says of it.

var (
	_ lifecycle.Freezer    = (*runtime)(nil)
	_ lifecycle.Meter      = (*runtime)(nil)
	_ lifecycle.GuestMeter = (*runtime)(nil)
	_ lifecycle.DiskPauser = (*runtime)(nil)
)

// qmpWait bounds a pause's or a resume's QMP exchange: QMP serves one
// client at a time, and a snapshot may hold it.
const qmpWait = 30 * time.Second

// qmpDo runs one QMP command on neuron id's QEMU.
func qmpDo(ctx context.Context, lay layout.Layout, id, cmd string) error {
	ctx, cancel := context.WithTimeout(ctx, qmpWait)
	defer cancel()
	q, err := dialQMP(ctx, qmpSocket(lay.ChannelDir(Mode, id)))
	if err != nil {
		return err
	}
	defer q.Close()
	return q.run(ctx, cmd, nil, nil)
}

// Freeze halts the VM's vCPUs.
func (r *runtime) Freeze(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error {
	return qmpDo(ctx, lay, id, "stop")
}

// Thaw runs the vCPUs again, then sets the guest's clock, which stood
// still while they were halted, through the control port (the guest's
// PID 1, not its agent). A clock that cannot be set leaves the guest
// running, and its log says why.
func (r *runtime) Thaw(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error {
	if err := qmpDo(ctx, lay, id, "cont"); err != nil {
		return err
	}
	dropPausedState(lay, id) // the machine runs: what a paused snapshot kept is old
	cctx, cancel := context.WithTimeout(ctx, clockTimeout)
	defer cancel()
	if err := setClock(cctx, lay.ChannelDir(Mode, id)); err != nil {
		logf(lay, id, "resumed, but the guest's clock was not set: %v", err)
	}
	return nil
}

// logf adds a line of the host's to neuron id's log.
func logf(lay layout.Layout, id, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(lay.LogsDir(), "neurons", id+".log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	lifecycle.HostLine(f, format, args...)
}

// Usage is what the host sees of the VM: its QEMU process.
func (r *runtime) Usage(_ context.Context, _ layout.Layout, _ string, st *sandbox.State) (sandbox.Metrics, error) {
	return vmguest.VMMUsage(st), nil
}

// GuestUsage adds the guest's processes and memory, as its agent says.
func (r *runtime) GuestUsage(u *sandbox.Metrics, g *protocol.SystemUsage) { vmguest.FoldGuest(u, g) }

// suspendDir is where neuron id's machine is saved while it is paused to
// disk: a host record beside its overlay disk.
func suspendDir(lay layout.Layout, id string) string {
	return filepath.Join(lay.OverlayDir(id), ".suspended")
}

// SaveMachine stops the VM, saves its state (RAM and devices) and the
// files it booted from into suspendDir, and ends QEMU. The overlay disk
// stays where it is: the migration's end flushed it, and nothing else
// writes it. On an error before QEMU is told to quit, the VM runs on.
func (r *runtime) SaveMachine(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error {
	if st.Policy == nil {
		return fmt.Errorf("its state holds no policy: the machine's shape is unknown")
	}
	chanDir := lay.ChannelDir(Mode, id)
	dir := suspendDir(lay, id)
	tmp := dir + ".partial"
	os.RemoveAll(dir)
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp) // gone after the rename; a partial save otherwise
	if err := os.MkdirAll(filepath.Join(tmp, "vm"), 0o700); err != nil {
		return err
	}
	q, err := dialQMP(ctx, qmpSocket(chanDir))
	if err != nil {
		return err
	}
	defer q.Close()
	if err := q.run(ctx, "stop", nil, nil); err != nil {
		return err
	}
	stopped := time.Now()
	if err := r.saveMachine(ctx, q, st, chanDir, tmp, stopped); err != nil {
		// The VM runs on (cont also takes back the disks a finished
		// migration handed over).
		return errors.Join(err, q.run(context.WithoutCancel(ctx), "cont", nil, nil))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return errors.Join(err, q.run(context.WithoutCancel(ctx), "cont", nil, nil))
	}
	// QEMU exits: its memory goes back to the host. The answer to quit
	// may be lost as it exits; its going is what counts.
	q.run(ctx, "quit", nil, nil)
	stopProcess(st.PID, 10*time.Second)
	if store.Alive(st.PID, st.PIDStart) {
		return fmt.Errorf("QEMU (pid %d) did not exit after its machine was saved", st.PID)
	}
	return nil
}

// saveMachine writes the stopped VM's state, its boot files and what a
// restore needs to know of the machine into dir.
func (r *runtime) saveMachine(ctx context.Context, q *qmp, st *sandbox.State, chanDir, dir string, stopped time.Time) error {
	f, err := os.OpenFile(filepath.Join(dir, snapState), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = q.saveState(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("saving the machine: %w", err)
	}
	if _, err := bootFilesIn(filepath.Join(chanDir, "boot")).pin(filepath.Join(dir, "vm")); err != nil {
		return err
	}
	info := SnapshotInfo{Snapshot: store.Snapshot{Name: "suspended", Neuron: st.ID, Created: stopped.UTC(), Mode: Mode},
		Policy: *st.Policy, MemoryMiB: st.Policy.Limits.MemoryBytes >> 20, CPUs: int(st.Policy.Limits.CPUs),
		KVM: runsKVM(st.PID), Stopped: stopped.UTC()}
	if fi, err := os.Stat(filepath.Join(dir, snapState)); err == nil {
		info.StateBytes = fi.Size()
	}
	return store.WriteJSON(filepath.Join(dir, snapMeta), &info, 0o600)
}

// LoadMachine has neuron id's next start load the machine SaveMachine
// saved (a restore job, as Restore makes); done drops the job and, once
// the guest runs with its clock set, the saved machine.
func (r *runtime) LoadMachine(ctx context.Context, lay layout.Layout, id string) (func(context.Context, error) error, error) {
	job := &restoreJob{dir: suspendDir(lay, id), resumed: make(chan struct{})}
	if err := store.ReadJSON(job.file(snapMeta), &job.meta); err != nil {
		return nil, fmt.Errorf("the saved machine: %w", err)
	}
	for _, f := range []string{snapState, snapKernel, snapInitramfs, snapRootDisk} {
		if _, err := os.Stat(job.file(f)); err != nil {
			return nil, fmt.Errorf("the saved machine is incomplete: %w", err)
		}
	}
	r.restores.Set(id, job)
	return func(ctx context.Context, started error) error {
		defer r.restores.Set(id, nil)
		if started != nil {
			return nil // kept, for another try
		}
		var err error
		if job.clock != nil {
			err = <-job.clock
		}
		os.RemoveAll(job.dir)
		if err != nil {
			return fmt.Errorf("the guest's clock: %w", err)
		}
		return nil
	}, nil
}

// DiscardMachine deletes neuron id's saved machine.
func (r *runtime) DiscardMachine(lay layout.Layout, id string) {
	os.RemoveAll(suspendDir(lay, id))
	os.RemoveAll(suspendDir(lay, id) + ".partial")
}
