package qemu

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// A snapshot of a running VM neuron, in snapshots/<id>/<name>/:
//
//	snapshot.json       what store.ListSnapshots reads, and the machine
//	data/overlay.ext4   the overlay disk (sparse) — where a plain overlay
//	                    snapshot keeps the overlay's files, so a cold
//	                    restore of the disk alone works too
//	vm/state            the machine's RAM and devices (QMP migrate to a descriptor)
//	vm/vmlinux, vm/initramfs.cpio, vm/rootfs.ext4
//	                    the files the VM booted from (hard links): the
//	                    state loads only into the machine it was saved from
const (
	snapMeta      = "snapshot.json"
	snapOverlay   = "data/overlay.ext4"
	snapState     = "vm/state"
	snapKernel    = "vm/vmlinux"
	snapInitramfs = "vm/initramfs.cpio"
	snapRootDisk  = "vm/rootfs.ext4"
	// snapSecret is the channel secret the saved agent holds (owner-only,
	// beside the machine's state, which holds it too).
	snapSecret = "vm/channel"
)

// SnapshotInfo describes a VM snapshot (its Mode is qemu).
type SnapshotInfo struct {
	store.Snapshot
	// The machine: the state loads into the same one only.
	KVM       bool  `json:"kvm"`
	MemoryMiB int64 `json:"memoryMiB"`
	CPUs      int   `json:"cpus"`
	// Policy is what the neuron ran under; a restore runs under it again.
	Policy sandbox.Policy `json:"policy"`
	// StateBytes is the size of the saved machine state.
	StateBytes int64 `json:"stateBytes"`
	// Took is how long the VM was paused for the snapshot.
	Took time.Duration `json:"tookNs"`
	// Stopped is the host's clock when the VM stopped: the guest's clock
	// stood still from then, and a restore moves it on by the time since.
	Stopped time.Time `json:"stopped,omitzero"`
}

// bootFiles are what a VM boots from.
type bootFiles struct {
	Kernel, Initramfs, RootDisk string
}

// bootFilesIn are the boot files pinned in dir: a running VM's channel
// directory's boot/, a snapshot's or a saved machine's vm/.
func bootFilesIn(dir string) bootFiles {
	return bootFiles{filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initramfs.cpio"), filepath.Join(dir, "rootfs.ext4")}
}

// pin links the files into dir and returns the links.
func (b bootFiles) pin(dir string) (bootFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return b, err
	}
	out := bootFilesIn(dir)
	for _, f := range [][2]string{{b.Kernel, out.Kernel}, {b.Initramfs, out.Initramfs}, {b.RootDisk, out.RootDisk}} {
		if f[0] == f[1] {
			continue
		}
		os.Remove(f[1])
		if err := vmimage.LinkOrCopy(f[0], f[1]); err != nil {
			return b, fmt.Errorf("the VM's boot files: %w", err)
		}
	}
	return out, nil
}

// restoreJob is a snapshot the next start of a neuron resumes.
type restoreJob struct {
	dir  string
	meta SnapshotInfo
	// secret is the channel secret the saved agent holds, or, for a
	// restore under another id than the snapshot's (a fork), the fresh
	// one rebind gives it.
	secret string
	// rebind is the identity the restored machine takes (nil: its own).
	rebind *boot.Rebind
	// clock has the outcome of the check of the resumed guest's clock,
	// which runs while its agent greets the host; nil until it starts.
	clock chan error
	// resumed is closed once the guest has heard it was restored (and has
	// ended the channel sessions of its snapshot), or the resume failed:
	// this process's relay opens its port only then, so its session is
	// one the restored guest made.
	resumed chan struct{}
}

func (j *restoreJob) file(name string) string { return filepath.Join(j.dir, name) }

func (j *restoreJob) bootFiles() bootFiles {
	return bootFilesIn(j.file("vm"))
}

// resume loads the state into the VM just started (paused, -incoming
// defer), runs it, and has the guest set its clock and reseed its RNG:
// every restore of one snapshot gets the present time and randomness of
// its own.
func (j *restoreJob) resume(ctx context.Context, chanDir string) error {
	defer close(j.resumed)
	q, err := dialQMP(ctx, qmpSocket(chanDir))
	if err != nil {
		return err
	}
	defer q.Close()
	state, err := os.Open(j.file(snapState))
	if err != nil {
		return err
	}
	defer state.Close()
	if err := q.loadState(ctx, state); err != nil {
		return fmt.Errorf("loading snapshot %s: %w", j.meta.Name, err)
	}
	if err := q.run(ctx, "cont", nil, nil); err != nil {
		return err
	}
	// The guest's clock stood still from the snapshot's stop until now.
	var advance time.Duration
	if !j.meta.Stopped.IsZero() {
		advance = max(time.Since(j.meta.Stopped), time.Nanosecond)
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	cc, err := dialCtl(ctx, chanDir)
	if err != nil {
		return err
	}
	if _, err := cc.do(ctx, &boot.CtlRequest{Op: boot.OpRestored, Time: time.Now(), Advance: advance, Seed: seed, Rebind: j.rebind}); err != nil {
		cc.Close()
		return fmt.Errorf("after loading snapshot %s: %w", j.meta.Name, err)
	}
	// The clock is checked, and set again while off, while the agent
	// greets the host (Restore waits for both): a snapshot of older
	// makings has no stop time, and the time in the request was old when
	// the guest, just resumed, read it (under TCG its code is translated
	// anew first).
	j.clock = make(chan error, 1)
	go func() {
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), clockTimeout)
		defer cancel()
		j.clock <- cc.setClock(ctx)
	}()
	return nil
}

var _ sandbox.Snapshotter = (*Manager)(nil)

// Snapshot is SnapshotVM for sandbox.Snapshotter: the record alone.
func (m *Manager) Snapshot(ctx context.Context, id, name string) (*store.Snapshot, error) {
	info, err := m.SnapshotVM(ctx, id, name)
	if err != nil {
		return nil, err
	}
	return &info.Snapshot, nil
}

// SnapshotVM saves neuron id whole as snapshot name: its memory and
// processes, its devices, and its overlay disk. A running VM is stopped
// while the state is written and the disk copied, then runs on; hosts stay
// connected. A paused VM is saved as it stands and stays paused: its
// vCPUs never run for it (see snapshotPaused).
func (m *Manager) SnapshotVM(ctx context.Context, id, name string) (*SnapshotInfo, error) {
	if err := ids.Validate(id); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if (st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused) || st.Policy == nil {
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status) + ": a VM snapshot saves a running or paused neuron",
			Hint: "nsys-cortex create " + id + " starts it"}
	}
	// No pause, resume or destroy meanwhile (Get, which may take the lock
	// to apply a deadline, came first).
	unlock, err := m.LockRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dir := m.lay.SnapshotsDir(id)
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, fmt.Errorf("snapshot %q of %s: %w", name, id, store.ErrSnapshotExists)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, "."+name+".partial-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // gone after the rename; a partial one otherwise
	for _, d := range []string{"data", "vm"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o700); err != nil {
			return nil, err
		}
	}
	info := &SnapshotInfo{Snapshot: store.Snapshot{Name: name, Neuron: id, Files: 1, Mode: Mode},
		Policy: *st.Policy, MemoryMiB: st.Policy.Limits.MemoryBytes >> 20, CPUs: int(st.Policy.Limits.CPUs),
		KVM: runsKVM(st.PID)}
	chanDir := m.lay.ChannelDir(Mode, id)
	if st.Status == sandbox.StatusPaused && !store.Alive(st.PID, st.PIDStart) {
		err = m.snapshotSuspended(id, tmp, info)
	} else {
		err = m.snapshotVMM(ctx, st, chanDir, tmp, info)
	}
	if err != nil {
		return nil, err
	}
	if err := m.keepSecret(id, filepath.Join(tmp, snapSecret)); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Join(tmp, snapState)); err == nil {
		info.StateBytes = fi.Size()
	}
	var ov syscall.Stat_t
	if err := syscall.Stat(filepath.Join(tmp, snapOverlay), &ov); err != nil {
		return nil, err
	}
	info.Bytes = ov.Blocks * 512 // the copy is sparse
	if err := store.WriteJSON(filepath.Join(tmp, snapMeta), info, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	return info, nil
}

// snapshotVMM saves the machine neuron st's QEMU runs into tmp. A running
// VM is stopped for it and runs on after. A paused one (QMP's stop) is
// saved as it is and left stopped; the migration that saved it hands its
// disks over ("postmigrate") until the resume's cont takes them back, and
// a second migration would abort QEMU, so the state saved is kept beside
// the overlay (pausedState) and a later snapshot before the resume, when
// neither memory nor disk can have changed, takes that.
func (m *Manager) snapshotVMM(ctx context.Context, st *sandbox.State, chanDir, tmp string, info *SnapshotInfo) error {
	q, err := dialQMP(ctx, qmpSocket(chanDir))
	if err != nil {
		return err
	}
	defer q.Close()
	var status struct {
		Status string `json:"status"`
	}
	if err := q.run(ctx, "query-status", nil, &status); err != nil {
		return err
	}
	kept := pausedState(m.lay, st)
	start := time.Now()
	info.Created = start.UTC()
	switch {
	case st.Status == sandbox.StatusRunning && status.Status == "running":
		if err := q.run(ctx, "stop", nil, nil); err != nil {
			return err
		}
		info.Stopped = time.Now().UTC()
		err := m.saveStopped(ctx, q, st.ID, tmp)
		// Whatever happened, the VM runs on (cont also takes back the
		// disks the finished migration handed over).
		cerr := q.run(context.WithoutCancel(ctx), "cont", nil, nil)
		info.Took = time.Since(start)
		if err != nil {
			return errors.Join(err, cerr)
		}
		if cerr != nil {
			return fmt.Errorf("snapshot of %s saved, but its VM did not run again: %w", st.ID, cerr)
		}
	case st.Status == sandbox.StatusPaused && status.Status == "paused":
		info.Stopped = pausedSince(st, start)
		os.Remove(kept)
		if err := m.saveStopped(ctx, q, st.ID, tmp); err != nil {
			return err
		}
		if err := vmimage.LinkOrCopy(filepath.Join(tmp, snapState), kept); err != nil {
			return fmt.Errorf("snapshot of %s: keeping the paused machine's state: %w", st.ID, err)
		}
	case st.Status == sandbox.StatusPaused && status.Status == "postmigrate":
		info.Stopped = pausedSince(st, start)
		if err := copyKept(kept, filepath.Join(tmp, snapState)); err != nil {
			return fmt.Errorf("snapshot of paused %s: %w (resume it, then snapshot it)", st.ID, err)
		}
		if err := vmimage.CopySparse(overlayDisk(m.lay, st.ID), filepath.Join(tmp, snapOverlay)); err != nil {
			return fmt.Errorf("snapshot of %s: the overlay disk: %w", st.ID, err)
		}
	default:
		return fmt.Errorf("snapshot of %s: it is %s but its VM is %s", st.ID, st.Status, status.Status)
	}
	_, err = bootFilesIn(filepath.Join(chanDir, "boot")).pin(filepath.Join(tmp, "vm"))
	return err
}

// snapshotSuspended makes snapshot tmp of a neuron paused to disk from
// the machine its pause saved: no QEMU starts for it.
func (m *Manager) snapshotSuspended(id, tmp string, info *SnapshotInfo) error {
	saved := suspendDir(m.lay, id)
	var meta SnapshotInfo
	if err := store.ReadJSON(filepath.Join(saved, snapMeta), &meta); err != nil {
		return fmt.Errorf("snapshot of %s, paused to disk: its saved machine: %w", id, err)
	}
	info.Created, info.Stopped, info.KVM = time.Now().UTC(), meta.Stopped, meta.KVM
	if err := copyKept(filepath.Join(saved, snapState), filepath.Join(tmp, snapState)); err != nil {
		return fmt.Errorf("snapshot of %s, paused to disk: %w", id, err)
	}
	if _, err := bootFilesIn(filepath.Join(saved, "vm")).pin(filepath.Join(tmp, "vm")); err != nil {
		return err
	}
	if err := vmimage.CopySparse(overlayDisk(m.lay, id), filepath.Join(tmp, snapOverlay)); err != nil {
		return fmt.Errorf("snapshot of %s: the overlay disk: %w", id, err)
	}
	return nil
}

// pausedState is where a snapshot of paused neuron st keeps the machine
// state it saved, for the next snapshot before a resume: a host record
// beside the overlay, named for the QEMU it came from, so a state of an
// earlier run never stands in for this one's.
func pausedState(lay layout.Layout, st *sandbox.State) string {
	return filepath.Join(lay.OverlayDir(st.ID), fmt.Sprintf(".paused-state-%d-%d", st.PID, st.PIDStart))
}

// dropPausedState removes what snapshots of a paused neuron kept: its VM
// has run (or gone) since.
func dropPausedState(lay layout.Layout, id string) {
	old, _ := filepath.Glob(filepath.Join(lay.OverlayDir(id), ".paused-state-*"))
	for _, f := range old {
		os.Remove(f)
	}
}

// pausedSince is when paused neuron st's guest clock stopped.
func pausedSince(st *sandbox.State, now time.Time) time.Time {
	if st.PausedAt != nil {
		return st.PausedAt.UTC()
	}
	return now.UTC()
}

// copyKept links or copies a machine state the host saved to dst.
func copyKept(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("the saved machine state: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return fmt.Errorf("the saved machine state %s is not a saved state", src)
	}
	return vmimage.LinkOrCopy(src, dst)
}

// keepSecret saves the running agent's channel secret where a restore of
// the snapshot finds it: the restored agent proves the same one.
func (m *Manager) keepSecret(id, path string) error {
	secret, err := m.Secret(id)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(secret+"\n"), 0o600)
}

// saveStopped writes the stopped VM's state and copies its overlay disk
// into tmp.
func (m *Manager) saveStopped(ctx context.Context, q *qmp, id, tmp string) error {
	state, err := os.OpenFile(filepath.Join(tmp, snapState), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = q.saveState(ctx, state)
	if cerr := state.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", id, err)
	}
	// The VM is stopped and its block layer flushed: the disk matches the
	// state just saved.
	if err := vmimage.CopySparse(overlayDisk(m.lay, id), filepath.Join(tmp, snapOverlay)); err != nil {
		return fmt.Errorf("snapshot of %s: the overlay disk: %w", id, err)
	}
	return nil
}

// runsKVM reports whether QEMU process pid runs with KVM.
func runsKVM(pid int) bool {
	argv := store.Cmdline(pid)
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == "-accel" {
			return argv[i+1] == "kvm"
		}
	}
	return false
}

// SnapshotsDir is where neuron id's snapshots are kept.
func (m *Manager) SnapshotsDir(id string) string { return m.lay.SnapshotsDir(id) }

// Snapshots lists neuron id's snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, id string) ([]store.Snapshot, error) {
	if err := ids.Validate(id); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	return store.ListSnapshots(m.lay.SnapshotsDir(id))
}

// Restore makes neuron id what it was when snapshot name was taken:
// a running neuron is stopped, its overlay disk put back, and the saved
// machine resumed — its processes run on, its files are there, its clock
// is set to now and its RNG reseeded. Hosts connect again as after a
// create.
func (m *Manager) Restore(ctx context.Context, id, name string) (*sandbox.State, error) {
	if err := ids.Validate(id); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	snap, err := store.ReadSnapshot(m.lay.SnapshotsDir(id), name)
	if err != nil {
		return nil, fmt.Errorf("neuron %s: %w", id, err)
	}
	if err := store.CheckRestore(snap, Mode, true); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error(), Err: err}
	}
	job := &restoreJob{dir: filepath.Join(m.lay.SnapshotsDir(id), name), resumed: make(chan struct{})}
	if err := store.ReadJSON(filepath.Join(job.dir, snapMeta), &job.meta); err != nil {
		return nil, err
	}
	if job.meta.Mode != Mode {
		err := fmt.Errorf("snapshot %q of %s is another VM mode's: %w", name, id, store.ErrSnapshotMismatch)
		return nil, &sandbox.InvalidError{Reason: err.Error(), Err: err}
	}
	for _, f := range []string{snapState, snapOverlay, snapKernel, snapInitramfs, snapRootDisk} {
		if _, err := os.Stat(job.file(f)); err != nil {
			return nil, fmt.Errorf("snapshot %q of %s is incomplete: %w", name, id, err)
		}
	}
	if b, err := os.ReadFile(job.file(snapSecret)); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		job.secret = strings.TrimSpace(string(b))
		if snap.Neuron != id {
			// Another neuron's machine (a fork): it serves this id, and
			// proves a secret of its own, not its source's.
			job.rebind = &boot.Rebind{Neuron: id, Secret: protocol.NewSecret()}
			job.secret = job.rebind.Secret
		}
	} else {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("snapshot %q of %s was taken by an older nsys-cortex: its agent cannot prove "+
			"it is the neuron's agent, so it is not restored (take a new snapshot of a neuron created by this version)", name, id)}
	}
	m.restoreMu.Lock()
	defer m.restoreMu.Unlock()
	// The policy is the host's, never the snapshot's: a running neuron's
	// stays, a stopped one gets the defaults (network none), as a create
	// without flags would; the snapshot's network policy is not brought
	// back (a neuron tightened since would get its old egress again).
	var policy sandbox.Policy
	if st, err := m.Get(ctx, id); err == nil {
		if st.Policy != nil && st.Status == sandbox.StatusRunning {
			policy = *st.Policy
		}
		// A machine saved without the egress port cannot be given one:
		// refused before anything is stopped.
		if policy.Network.Mode == sandbox.NetworkEgress && job.meta.Policy.Network.Mode != sandbox.NetworkEgress {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("snapshot %q of %s was taken without network egress and the neuron now has egress: "+
				"a VM's devices are its snapshot's (destroy %s, then restore it: it comes back with no network)", name, id, id)}
		}
		if st.Status != sandbox.StatusStopped {
			if err := m.Destroy(ctx, id, sandbox.DestroyOptions{}); err != nil {
				return nil, err
			}
		}
	} else if !errdefs.IsNotFound(err) {
		return nil, err
	} else if _, serr := os.Stat(m.lay.OverlayDir(id)); serr == nil {
		return nil, err // the id's data belongs to another mode
	}
	if err := os.MkdirAll(m.lay.OverlayDir(id), 0o700); err != nil {
		return nil, err
	}
	if err := vmimage.CopySparse(job.file(snapOverlay), overlayDisk(m.lay, id)); err != nil {
		return nil, fmt.Errorf("restoring the overlay disk of %s: %w", id, err)
	}
	m.rt.restores.Set(id, job)
	defer m.rt.restores.Set(id, nil)
	// The machine is the snapshot's (its memory and vCPUs, in Start); its
	// image and nested-namespace setting are in its state already.
	p := job.meta.Policy
	st, err := m.Manager.Create(ctx, id, sandbox.CreateOptions{Network: policy.Network, Limits: p.Limits, Image: p.Image, NestedUserns: p.NestedUserns})
	if job.clock == nil { // the VM did not get as far as resuming
		return st, err
	}
	if cerr := <-job.clock; cerr != nil && err == nil {
		m.Manager.Destroy(context.WithoutCancel(ctx), id, sandbox.DestroyOptions{})
		return nil, fmt.Errorf("after loading snapshot %s: %w", name, cerr)
	}
	return st, err
}

// Fork forks neuron src through a whole-machine snapshot: each fork runs
// on with src's memory and processes (lifecycle.Manager.ForkWhole).
func (m *Manager) Fork(ctx context.Context, src string, dsts []string, opts sandbox.ForkOptions) ([]*sandbox.State, error) {
	return m.Manager.ForkWhole(ctx, m, src, dsts, opts)
}
