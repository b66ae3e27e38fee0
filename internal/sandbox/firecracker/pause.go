package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Pause and usage (docs/lifecycle.md). A pause is the API's PATCH /vm
// {"state":"Paused"}: the vCPUs halt, and everything in the guest with
// them. (The guest's clock is KVM's, which runs on meanwhile: nothing to
// set after the resume.) A pause to disk is a full snapshot of the paused
// VM, its state and memory moved out of the jail into
// overlays/<id>/.suspended (laid out as a snapshot's vm/ part; the
// overlay disk stays where it is), and Firecracker is killed; the resume
// loads it into a fresh Firecracker, as a restore does. Usage is the
// Firecracker process's, and, while the guest runs, what its agent says.

var (
	_ lifecycle.Freezer    = (*runtime)(nil)
	_ lifecycle.Meter      = (*runtime)(nil)
	_ lifecycle.GuestMeter = (*runtime)(nil)
	_ lifecycle.DiskPauser = (*runtime)(nil)
)

// apiWait bounds a pause's or a resume's API call.
const apiWait = 30 * time.Second

// patchVM sets neuron id's VM state.
func (r *runtime) patchVM(ctx context.Context, lay layout.Layout, id string, s VMState) error {
	j, err := r.jailOf(lay, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	c := NewClient(j.host(jailAPISock))
	defer c.Close()
	return c.PatchVM(ctx, s)
}

// Freeze pauses the VM.
func (r *runtime) Freeze(ctx context.Context, lay layout.Layout, id string, _ *sandbox.State) error {
	return r.patchVM(ctx, lay, id, VMPaused)
}

// Thaw resumes the VM.
func (r *runtime) Thaw(ctx context.Context, lay layout.Layout, id string, _ *sandbox.State) error {
	return r.patchVM(ctx, lay, id, VMResumed)
}

// Usage is what the host sees of the VM: its Firecracker process.
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

// SaveMachine pauses the VM, has Firecracker write a full snapshot, moves
// it out of the jail, and kills Firecracker. Until the kill, a failure
// resumes the VM.
func (r *runtime) SaveMachine(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) (err error) {
	j, err := r.jailOf(lay, id)
	if err != nil {
		return err
	}
	dir := suspendDir(lay, id)
	tmp := dir + ".partial"
	os.RemoveAll(dir)
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp) // gone after the rename; a partial save otherwise
	if err := os.MkdirAll(filepath.Join(tmp, "vm"), 0o700); err != nil {
		return err
	}
	meta := vmMeta{Neuron: id, Name: "suspended", Created: time.Now().UTC(), Firecracker: strings.TrimPrefix(firecrackerVersion(ctx, r.cfg), "v")}
	if st.Policy != nil {
		meta.Policy = *st.Policy
	}
	meta.RootDisk = r.cfg.RootDisk
	if meta.Policy.Image != "" {
		meta.RootDisk = meta.Policy.Image
	}
	if meta.RootDiskStamp, err = diskStamp(meta.RootDisk); err != nil {
		return err
	}
	for _, b := range r.bridges.of(id) {
		b.hold()
		defer b.release()
	}
	c := NewClient(j.host(jailAPISock))
	defer c.Close()
	if err := c.PatchVM(ctx, VMPaused); err != nil {
		return fmt.Errorf("pausing the VM: %w", err)
	}
	if err := r.saveMachine(ctx, c, j, tmp); err != nil {
		return errors.Join(err, c.PatchVM(context.WithoutCancel(ctx), VMResumed))
	}
	if err := store.WriteJSON(filepath.Join(tmp, "vm", "vm.json"), &meta, 0o600); err != nil {
		return errors.Join(err, c.PatchVM(context.WithoutCancel(ctx), VMResumed))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return errors.Join(err, c.PatchVM(context.WithoutCancel(ctx), VMResumed))
	}
	// Its memory is on disk: Firecracker goes (it takes no other signal).
	killWait(st.PID, 5*time.Second)
	if store.Alive(st.PID, st.PIDStart) {
		return fmt.Errorf("the VM's Firecracker (pid %d) did not exit after its machine was saved", st.PID)
	}
	return nil
}

// saveMachine has the paused VM's Firecracker write a full snapshot and
// moves it, with the config disk the guest read, into dir.
func (r *runtime) saveMachine(ctx context.Context, c *Client, j jail, dir string) error {
	os.Remove(j.host(jailSnapState))
	os.Remove(j.host(jailSnapMem))
	if err := c.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: "Full", SnapshotPath: jailSnapState, MemFilePath: jailSnapMem}); err != nil {
		return fmt.Errorf("snapshot of the VM: %w", err)
	}
	if err := moveOut(j.host(jailSnapState), filepath.Join(dir, "vm", "vmstate")); err != nil {
		return fmt.Errorf("taking the VM state out of the jail: %w", err)
	}
	if err := moveOut(j.host(jailSnapMem), filepath.Join(dir, "vm", "mem")); err != nil {
		return fmt.Errorf("taking the VM memory out of the jail: %w", err)
	}
	if err := sparseCopy(j.host(jailConfig), filepath.Join(dir, "vm", "config.img")); err != nil {
		return fmt.Errorf("copying the config disk: %w", err)
	}
	return os.Chmod(filepath.Join(dir, "vm", "config.img"), 0o600)
}

// LoadMachine has neuron id's next start load the machine SaveMachine
// saved (a restore plan, as RestoreVM makes), once it is sure this host
// can: the same Firecracker and the same root disk. done drops the plan
// and, once the guest runs with its clock and RNG renewed, the saved
// machine.
func (r *runtime) LoadMachine(ctx context.Context, lay layout.Layout, id string) (func(context.Context, error) error, error) {
	dir := suspendDir(lay, id)
	var meta vmMeta
	if err := store.ReadJSON(filepath.Join(dir, "vm", "vm.json"), &meta); err != nil {
		return nil, fmt.Errorf("the saved machine: %w", err)
	}
	for _, f := range []string{"vmstate", "mem", "config.img"} {
		if _, err := os.Stat(filepath.Join(dir, "vm", f)); err != nil {
			return nil, fmt.Errorf("the saved machine is incomplete: %w", err)
		}
	}
	if c := r.check(ctx); !c.OK {
		return nil, &sandbox.UnavailableError{Mode: Mode, Reason: strings.TrimPrefix(c.Summary, "cannot run here: ")}
	}
	if v := strings.TrimPrefix(firecrackerVersion(ctx, r.cfg), "v"); v != meta.Firecracker {
		return nil, fmt.Errorf("it was saved by Firecracker v%s; this host runs v%s, which cannot load it", meta.Firecracker, v)
	}
	if stamp, err := diskStamp(meta.RootDisk); err != nil || stamp != meta.RootDiskStamp {
		return nil, fmt.Errorf("it was saved over the root disk %s (%s), which has changed since (a rebuilt image?)", meta.RootDisk, meta.RootDiskStamp)
	}
	r.restores.Set(id, &restorePlan{dir: dir})
	return func(ctx context.Context, started error) error {
		defer r.restores.Set(id, nil)
		if started != nil {
			return nil // kept, for another try
		}
		_, err := r.resyncGuest(ctx, lay, id)
		os.RemoveAll(dir)
		return err
	}, nil
}

// DiscardMachine deletes neuron id's saved machine.
func (r *runtime) DiscardMachine(lay layout.Layout, id string) {
	os.RemoveAll(suspendDir(lay, id))
	os.RemoveAll(suspendDir(lay, id) + ".partial")
}
