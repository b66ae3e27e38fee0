package firecracker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/vsock"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// A VM snapshot is a directory snapshots/<id>/<name>/ laid out so that
// the store lists it beside its copies of files (and refuses to restore it
// as files):
//
//	snapshot.json        store.Snapshot: name, neuron, time, size, mode
//	data/overlay.ext4    the overlay disk as it was while the VM was paused
//	data/.mode, .uid     the overlay's markers
//	vm/vm.json           vmMeta: the VM's shape, policy, Firecracker version
//	vm/vmstate, vm/mem   Firecracker's snapshot (full) of the paused VM
//	vm/config.img        the config disk the VM had (its drives are restored as they were)

// vmMeta describes a VM snapshot.
type vmMeta struct {
	Neuron      string         `json:"neuron"`
	Name        string         `json:"name"`
	Created     time.Time      `json:"created"`
	Firecracker string         `json:"firecracker"`
	Policy      sandbox.Policy `json:"policy"`
	RootDisk    string         `json:"rootDisk"`
	// RootDiskStamp is the root disk's size and modification time: the
	// snapshot's page cache holds its blocks, so it must not have changed.
	RootDiskStamp string `json:"rootDiskStamp"`
	// Paused is how long the VM was paused for the snapshot.
	Paused time.Duration `json:"pausedNs"`
}

// restorePlan is a restore in progress: the create that Restore runs reads
// it in Start (load, not boot), and Stop (no power-off of a VM whose disk
// is being replaced).
type restorePlan struct {
	dir string // the snapshot's directory
	// secret is the channel secret the saved agent holds, or, for a
	// restore under another id than the snapshot's (a fork), the fresh
	// one rebind gives it.
	secret string
	// rebind is the identity the restored machine takes before any host
	// reaches its agent (nil: its own).
	rebind *boot.Rebind
}

// snapSecret is where a snapshot keeps its agent's channel secret
// (owner-only; the saved memory holds it too).
const snapSecret = "vm/channel"

var _ lifecycle.SecretKeeper = (*runtime)(nil)

// KeptSecret: a VM resumed from a snapshot runs the agent that was saved,
// which holds the secret it was started with.
func (r *runtime) KeptSecret(_ layout.Layout, id string) (string, bool) {
	if p := r.restores.Get(id); p != nil {
		return p.secret, true
	}
	return "", false
}

var _ sandbox.Snapshotter = (*Manager)(nil)

// Snapshot saves running neuron id as snapshot name: the VM is paused,
// Firecracker writes its state and memory, the overlay disk is copied
// while nothing changes it, and the VM resumes. Every host's channel to
// the agent drops across it (the vsock transport resets) and is dialled
// again after: requests in flight fail with NOT_RUNNING.
func (m *Manager) Snapshot(ctx context.Context, id, name string) (*store.Snapshot, error) {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	// A paused VM is snapshot as it is, and stays paused; one paused to
	// disk has no VM to snapshot.
	_, onDisk := os.Stat(suspendDir(m.rt.env.Layout, id))
	if st.Status != sandbox.StatusRunning && (st.Status != sandbox.StatusPaused || onDisk == nil) {
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status) + "; a VM snapshot needs a running or paused VM"}
	}
	lay := m.rt.env.Layout
	dir := lay.SnapshotsDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, fmt.Errorf("snapshot %q of %s: %w", name, id, store.ErrSnapshotExists)
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
	j, err := m.rt.jailOf(lay, id)
	if err != nil {
		return nil, err
	}
	meta := vmMeta{Neuron: id, Name: name, Created: time.Now().UTC(), Firecracker: strings.TrimPrefix(firecrackerVersion(ctx, m.rt.cfg), "v")}
	if st.Policy != nil {
		meta.Policy = *st.Policy
	}
	meta.RootDisk = m.rt.cfg.RootDisk
	if meta.Policy.Image != "" {
		meta.RootDisk = meta.Policy.Image
	}
	if meta.RootDiskStamp, err = diskStamp(meta.RootDisk); err != nil {
		return nil, err
	}
	secret, err := m.Secret(id)
	if err != nil {
		return nil, err
	}
	if err := m.rt.snapshotVM(ctx, lay, id, j, tmp, &meta, st.Status == sandbox.StatusPaused); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, snapSecret), []byte(secret+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := store.WriteJSON(filepath.Join(tmp, "vm", "vm.json"), &meta, 0o600); err != nil {
		return nil, err
	}
	s := &store.Snapshot{Name: name, Neuron: id, Created: meta.Created, Mode: Mode}
	for _, f := range []string{"data/overlay.ext4", "vm/vmstate", "vm/mem"} {
		if fi, err := os.Stat(filepath.Join(tmp, f)); err == nil {
			s.Files++
			s.Bytes += fi.Size()
		}
	}
	if err := store.WriteJSON(filepath.Join(tmp, "snapshot.json"), s, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	return s, nil
}

// snapshotVM pauses the VM, has Firecracker write its snapshot, copies
// the overlay disk, and resumes (unless it was paused before), with every
// bridge of this process held off the vsock meanwhile.
func (r *runtime) snapshotVM(ctx context.Context, lay layout.Layout, id string, j jail, into string, meta *vmMeta, paused bool) (err error) {
	for _, b := range r.bridges.of(id) {
		b.hold()
		defer b.release()
	}
	c := NewClient(j.host(jailAPISock))
	defer c.Close()
	if err := c.PatchVM(ctx, VMPaused); err != nil {
		return fmt.Errorf("pausing the VM: %w", err)
	}
	pausedAt := time.Now()
	defer func() {
		if paused {
			return // it stays as it was
		}
		if rerr := c.PatchVM(context.WithoutCancel(ctx), VMResumed); rerr != nil && err == nil {
			err = fmt.Errorf("resuming the VM after its snapshot: %w", rerr)
		}
		meta.Paused = time.Since(pausedAt)
	}()
	os.Remove(j.host(jailSnapState))
	os.Remove(j.host(jailSnapMem))
	if err := c.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: "Full", SnapshotPath: jailSnapState, MemFilePath: jailSnapMem}); err != nil {
		return fmt.Errorf("snapshot of the VM: %w", err)
	}
	if err := sparseCopy(overlayDisk(lay, id), filepath.Join(into, "data", "overlay.ext4")); err != nil {
		return fmt.Errorf("copying the overlay disk: %w", err)
	}
	for _, f := range []string{".mode", ".uid"} {
		if b, err := os.ReadFile(filepath.Join(lay.OverlayDir(id), f)); err == nil {
			if err := os.WriteFile(filepath.Join(into, "data", f), b, 0o600); err != nil {
				return err
			}
		}
	}
	if err := moveOut(j.host(jailSnapState), filepath.Join(into, "vm", "vmstate")); err != nil {
		return fmt.Errorf("taking the VM state out of the jail: %w", err)
	}
	if err := moveOut(j.host(jailSnapMem), filepath.Join(into, "vm", "mem")); err != nil {
		return fmt.Errorf("taking the VM memory out of the jail: %w", err)
	}
	if err := sparseCopy(j.host(jailConfig), filepath.Join(into, "vm", "config.img")); err != nil {
		return fmt.Errorf("copying the config disk: %w", err)
	}
	return os.Chmod(filepath.Join(into, "vm", "config.img"), 0o600)
}

// Restored is a neuron brought back from a VM snapshot.
type Restored struct {
	State *sandbox.State
	// Resync says what was renewed in the guest after the restore.
	Resync ResyncReport
}

// Restore is RestoreVM for sandbox.Snapshotter: the neuron's state alone.
func (m *Manager) Restore(ctx context.Context, id, name string) (*sandbox.State, error) {
	r, err := m.RestoreVM(ctx, id, name)
	if err != nil {
		return nil, err
	}
	return r.State, nil
}

// RestoreVM brings neuron id back as snapshot name left it: a running
// neuron is destroyed first (its overlay is replaced by the snapshot's),
// then a fresh Firecracker loads the snapshot and resumes. The restored
// guest's clock is then set from the host's and its RNG reseeded with
// fresh host entropy, so two restores of one snapshot share neither.
func (m *Manager) RestoreVM(ctx context.Context, id, name string) (*Restored, error) {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	lay := m.rt.env.Layout
	snap, err := store.ReadSnapshot(lay.SnapshotsDir(id), name)
	if err != nil {
		return nil, fmt.Errorf("neuron %s: %w", id, err)
	}
	if err := store.CheckRestore(snap, Mode, true); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error(), Err: err}
	}
	dir := filepath.Join(lay.SnapshotsDir(id), name)
	var meta vmMeta
	if err := store.ReadJSON(filepath.Join(dir, "vm", "vm.json"), &meta); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err := fmt.Errorf("snapshot %q of %s has no Firecracker state (vm/vm.json): another VM mode's? %w", name, id, store.ErrSnapshotMismatch)
			return nil, &sandbox.InvalidError{Reason: err.Error(), Err: err}
		}
		return nil, err
	}
	if c := m.rt.check(ctx); !c.OK {
		return nil, &sandbox.UnavailableError{Mode: Mode, Reason: strings.TrimPrefix(c.Summary, "cannot run here: ")}
	}
	if v := strings.TrimPrefix(firecrackerVersion(ctx, m.rt.cfg), "v"); v != meta.Firecracker {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("VM snapshot %q was made by Firecracker v%s; this host runs v%s, which cannot load it", name, meta.Firecracker, v)}
	}
	root := m.rt.cfg.RootDisk
	if meta.Policy.Image != "" {
		root = meta.Policy.Image
	}
	if stamp, err := diskStamp(root); err != nil || root != meta.RootDisk || stamp != meta.RootDiskStamp {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("VM snapshot %q was taken over the root disk %s (%s); %s is not that disk any more "+
			"(a rebuilt image?), and the snapshot's memory would not match it", name, meta.RootDisk, meta.RootDiskStamp, root)}
	}
	b, err := os.ReadFile(filepath.Join(dir, snapSecret))
	secret := strings.TrimSpace(string(b))
	if err != nil || secret == "" {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("snapshot %q of %s was taken by an older nsys-cortex: its agent cannot prove "+
			"it is the neuron's agent, so it is not restored (take a new snapshot of a neuron created by this version)", name, id)}
	}
	plan := &restorePlan{dir: dir, secret: secret}
	if snap.Neuron != id {
		// Another neuron's machine (a fork): it serves this id, and proves
		// a secret of its own, not its source's (Start rebinds it).
		plan.rebind = &boot.Rebind{Neuron: id, Secret: protocol.NewSecret()}
		plan.secret = plan.rebind.Secret
	}
	m.rt.restores.Set(id, plan)
	defer m.rt.restores.Set(id, nil)
	// The policy is the host's, never the snapshot's: a running neuron's
	// network policy stays, a stopped one gets the default (none).
	var network sandbox.Network
	if st, err := m.Get(ctx, id); err == nil && st.Status != sandbox.StatusStopped {
		if st.Policy != nil && st.Status == sandbox.StatusRunning {
			network = st.Policy.Network
		}
		if err := m.Destroy(ctx, id, sandbox.DestroyOptions{}); err != nil {
			return nil, fmt.Errorf("stopping %s before its restore: %w", id, err)
		}
	}
	if err := os.MkdirAll(lay.OverlayDir(id), 0o700); err != nil {
		return nil, err
	}
	if err := copyAtomic(filepath.Join(dir, "data", "overlay.ext4"), overlayDisk(lay, id)); err != nil {
		return nil, fmt.Errorf("restoring the overlay disk: %w", err)
	}
	opts := sandbox.CreateOptions{Network: network, Limits: meta.Policy.Limits, Image: meta.Policy.Image, NestedUserns: meta.Policy.NestedUserns}
	st, err := m.Create(ctx, id, opts)
	if err != nil {
		return nil, err
	}
	report, err := m.rt.resyncGuest(ctx, lay, id)
	if err != nil {
		m.Destroy(context.WithoutCancel(ctx), id, sandbox.DestroyOptions{})
		return nil, fmt.Errorf("restored %s from %q, but could not bring its guest up to date, so it was stopped: %w", id, name, err)
	}
	return &Restored{State: st, Resync: report}, nil
}

// diskStamp identifies a disk image's content cheaply: size and mtime.
func diskStamp(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes, modified %s", st.Size(), st.ModTime().UTC().Format(time.RFC3339Nano)), nil
}

// resyncGuest brings a restored guest up to date through its control
// port.
func (r *runtime) resyncGuest(ctx context.Context, lay layout.Layout, id string) (ResyncReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	j, err := r.jailOf(lay, id)
	if err != nil {
		return ResyncReport{}, err
	}
	uds := j.host(jailVsock)
	return r.resync.Resync(ctx, func(ctx context.Context, req *CtlRequest) (*CtlReply, error) { return controlRetry(ctx, uds, req) })
}

// controlRetry is control, tried again while the guest's control port
// refuses: it listens once the VM runs (it was listening when the
// snapshot was taken).
func controlRetry(ctx context.Context, uds string, req *CtlRequest) (*CtlReply, error) {
	for {
		reply, err := control(ctx, uds, req)
		if err == nil || !vsock.Retryable(err) || ctx.Err() != nil {
			return reply, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// rebindGuest tells a fork's guest, just resumed from its source's
// snapshot, the identity it serves from now on (its PID 1 passes it to
// the agent, then sets the host name), with the clock and a fresh seed as
// any restore (the restore's resync sets them again and checks the
// clock).
func rebindGuest(ctx context.Context, j jail, rb *boot.Rebind) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	seed := make([]byte, 32)
	rand.Read(seed)
	if _, err := controlRetry(ctx, j.host(jailVsock), &CtlRequest{Op: OpRestored, Time: time.Now(), Seed: seed, Rebind: rb}); err != nil {
		return fmt.Errorf("giving the fork its identity: %w", err)
	}
	return nil
}

// powerOff asks neuron id's guest to end its processes, write its disks
// and reset, which ends its Firecracker; it reports whether the guest took
// the request (the caller waits for the exit, and kills what is left).
func (r *runtime) powerOff(lay layout.Layout, id string) bool {
	j, err := r.jailOf(lay, id)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = control(ctx, j.host(jailVsock), &CtlRequest{Op: OpPoweroff})
	return err == nil
}

// Fork forks neuron src through a whole-machine snapshot: each fork runs
// on with src's memory and processes (lifecycle.Manager.ForkWhole), under
// an identity of its own that Start gives its guest before any host
// reaches its agent.
func (m *Manager) Fork(ctx context.Context, src string, dsts []string, opts sandbox.ForkOptions) ([]*sandbox.State, error) {
	return m.Manager.ForkWhole(ctx, m, src, dsts, opts)
}
