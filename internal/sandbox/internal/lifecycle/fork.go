package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/store"
)

var _ sandbox.Forker = (*Manager)(nil)

// ErrIDTaken is the class of a fork or an import onto an id that has data
// already.
var ErrIDTaken = errdefs.New(errdefs.Exists, "it makes a new neuron, and that id has data already (destroy it with --wipe, or pick another)")

// Fork makes neurons dsts copies of neuron src's data, as it is at one
// instant (docs/fork.md): src, when running, is paused for the copy and
// resumed after it. Each fork's directory is claimed first (made with
// O_EXCL, so no other create or fork can take the id meanwhile), given
// the source's disk ceiling and, when neurons run as uids of their own,
// its own uid; the copy shares data with the source where the filesystem
// can (reflinks) and gives the source's uid's files to the fork's. Each
// fork then starts under the source's policy (the defaults when the
// source is stopped), its labels the source's unless opts names others.
func (m *Manager) Fork(ctx context.Context, src string, dsts []string, opts sandbox.ForkOptions) ([]*sandbox.State, error) {
	st, unlock, err := m.forkBegin(ctx, src, dsts)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Each new id is claimed (its directory made, O_EXCL) and locked at
	// once: until its neuron starts, no other create may start one on
	// data being copied, and a fork cut short says so (.forking).
	var claimed []string
	locks := map[string]*store.Lock{}
	release := func() {
		for _, id := range claimed {
			m.discard(id)
			locks[id].Release()
		}
	}
	if err := m.claimForks(ctx, src, dsts, func(id string, lock *store.Lock) {
		claimed, locks[id] = append(claimed, id), lock
	}); err != nil {
		release()
		return nil, err
	}
	roots, owners, err := m.prepareForks(ctx, src, dsts)
	if err != nil {
		release()
		return nil, err
	}
	at := time.Now().UTC()
	copied, err := m.copyForks(ctx, st, roots, owners)
	if err != nil {
		release()
		return nil, err
	}
	labels := st.Labels
	if opts.Labels != nil {
		labels = opts.Labels
	}
	create := sandbox.CreateOptions{}
	if p := st.Policy; p != nil && st.Status != sandbox.StatusStopped {
		create.Network, create.Limits, create.Image, create.NestedUserns = p.Network, p.Limits, p.Image, p.NestedUserns
	}
	var out []*sandbox.State
	for i, id := range dsts {
		sp := spec{Labels: labels.Clone(), ForkedFrom: src, ForkedAt: &at}
		if err := store.WriteJSON(m.specFile(id), &sp, 0o600); err != nil {
			release()
			return out, fmt.Errorf("fork %s of %s: %w", id, src, err)
		}
		os.Remove(m.forkingFile(id)) // whole now
		fst, err := m.createHeld(ctx, id, create, locks[id])
		if err != nil {
			release()
			return out, fmt.Errorf("fork %s of %s: %w%s", id, src, err, made(out))
		}
		claimed = claimed[1:] // it is a neuron now: kept, and its lock is its own
		m.event(ctx, events.Created, fst, fmt.Sprintf("fork of %s (%d files, %d bytes, %d of them shared)", src, copied[i].Files, copied[i].Bytes, copied[i].Cloned))
		out = append(out, fst)
	}
	return out, nil
}

// claimForks claims fork ids dsts of src (claim), each with its share of
// the room reserved (withRoom), handing each to got; it refuses forks
// whose copies would not fit where neurons are kept (keeping the
// reserve, less what imports and forks in flight reserved) before any is
// claimed, and before anything is paused: on a filesystem that shares
// copied data the copies take next to nothing, elsewhere each takes what
// its source's data takes.
func (m *Manager) claimForks(ctx context.Context, src string, dsts []string, got func(string, *store.Lock)) error {
	each := m.diskBytes(ctx, src)
	return m.withRoom(ctx, "", func(r Room) error {
		if r.Shares {
			each = 0 // no check: a small filesystem that shares still has room for copies
		} else if need := each * int64(len(dsts)); need > r.Left() {
			return &sandbox.CapacityError{Reason: fmt.Sprintf("%d fork(s) of %s would take %d MiB, and %s", len(dsts), src, need>>20, r.describe(m.lay.Overlays))}
		}
		rec, err := makingRecord("a fork of "+src, each)
		if err != nil {
			return err
		}
		for _, id := range dsts {
			lock, err := m.claim(id, rec)
			if err != nil {
				return err
			}
			got(id, lock)
		}
		return nil
	})
}

// forkBegin checks a fork's ids, takes src's fork lock (one fork of a
// source at a time, across processes: the pause of one must not end in
// the middle of another's copy) and returns src's state and the lock's
// release.
func (m *Manager) forkBegin(ctx context.Context, src string, dsts []string) (*sandbox.State, func(), error) {
	if err := validID(src); err != nil {
		return nil, nil, err
	}
	if err := checkForks(src, dsts); err != nil {
		return nil, nil, err
	}
	if err := m.rt.Allow(); err != nil {
		return nil, nil, err
	}
	unlock, err := m.forkLock(ctx, src)
	if err != nil {
		return nil, nil, err
	}
	st, err := m.Get(ctx, src)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return st, unlock, nil
}

// forkLock takes neuron src's fork lock (a host record in its
// directory), waiting while another fork of it holds it, until ctx ends.
func (m *Manager) forkLock(ctx context.Context, src string) (func(), error) {
	if err := m.known(src); err != nil {
		return nil, err
	}
	return store.NewLock(filepath.Join(m.overlay(src), ".fork.lock")).Wait(ctx, 10*time.Millisecond)
}

// made says which forks of a call were made before one failed.
func made(out []*sandbox.State) string {
	if len(out) == 0 {
		return ""
	}
	ids := make([]string, len(out))
	for i, st := range out {
		ids[i] = st.ID
	}
	return " (made before it, and kept: " + strings.Join(ids, ", ") + ")"
}

// forkRecord marks the directory of a neuron being made from another's
// data (.forking: a fork, an import): one cut short (its process killed)
// leaves it, and Create refuses the partial data it marks.
type forkRecord struct {
	// Src says what it is made from ("a fork of X", "an import of X").
	Src      string `json:"src"`
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart"`
	// Reserve is what it reserved of the room where neurons are kept
	// (withRoom), in bytes, while its process lives.
	Reserve int64 `json:"reserve,omitempty"`
}

func (m *Manager) forkingFile(id string) string { return filepath.Join(m.overlay(id), ".forking") }

// forking returns the record of a fork of id cut short: its mark, left by
// a process that is gone.
func (m *Manager) forking(id string) (forkRecord, bool) {
	var f forkRecord
	if err := store.ReadJSON(m.forkingFile(id), &f); err != nil {
		return f, false
	}
	return f, !store.Alive(f.PID, f.PIDStart)
}

// makingRecord is the .forking record of a neuron this process makes
// from src ("a fork of X", "an import of X"), reserving that many bytes
// of the room. Without this process's start time a record could be
// taken for a later process that reuses its pid: refused.
func makingRecord(src string, reserve int64) (forkRecord, error) {
	start, ok := store.ProcStart(os.Getpid())
	if !ok {
		return forkRecord{}, fmt.Errorf("%s: this process's start time cannot be read from /proc", src)
	}
	return forkRecord{Src: src, PID: os.Getpid(), PIDStart: start, Reserve: reserve}, nil
}

// claim makes new neuron id's directory (O_EXCL: an id with data is
// refused), takes its ownership lock and marks it as being made (its
// .forking record rec: what from, by which process, and what it reserves
// of the room, within withRoom).
func (m *Manager) claim(id string, rec forkRecord) (*store.Lock, error) {
	src := rec.Src
	// An import may be a home's first neuron, as a create may (which
	// makes the overlays' directory as it makes the neuron's own in it).
	if err := os.MkdirAll(m.lay.Overlays, 0o700); err != nil {
		return nil, fmt.Errorf("%s as %s: %w", src, id, err)
	}
	if err := os.Mkdir(m.overlay(id), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%s as %s: %w", src, id, ErrIDTaken)
		}
		return nil, fmt.Errorf("%s as %s: %w", src, id, err)
	}
	lock := m.lockFor(id)
	got, err := lock.TryExclusive()
	if err == nil && !got {
		err = errors.New("its lock is taken")
	}
	if err != nil {
		// The directory was made above, but its lock is another's: a
		// create of the id that took it meanwhile (it makes the directory
		// if it is not there). Only an empty directory is removed; one
		// with anything in it is the lock holder's.
		os.Remove(m.overlay(id))
		return nil, fmt.Errorf("%s as %s: %w", src, id, err)
	}
	if err := store.WriteJSON(m.forkingFile(id), &rec, 0o600); err != nil {
		os.RemoveAll(m.overlay(id)) // while the lock is held: no one else's yet
		lock.Release()
		return nil, fmt.Errorf("%s as %s: %w", src, id, err)
	}
	return lock, nil
}

// checkForks refuses a list of forks that cannot all be made.
func checkForks(src string, dsts []string) error {
	if len(dsts) == 0 {
		return &sandbox.InvalidError{Reason: "a fork needs the id of the new neuron"}
	}
	if len(dsts) > sandbox.MaxForks {
		return &sandbox.InvalidError{Reason: fmt.Sprintf("%d forks at once: at most %d", len(dsts), sandbox.MaxForks)}
	}
	seen := map[string]bool{}
	for _, id := range dsts {
		if err := validID(id); err != nil {
			return err
		}
		if id == src {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("a fork of %s needs a new id, not its own", src)}
		}
		if seen[id] {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("fork id %s is given twice", id)}
		}
		seen[id] = true
	}
	return nil
}

// prepareForks makes each claimed fork's place for its data (on a disk of
// its own like the source's, where the source has one) and its identity,
// and returns where each one's data goes and how owners map.
func (m *Manager) prepareForks(ctx context.Context, src string, dsts []string) ([]string, []map[uint32]uint32, error) {
	size, hasDisk := disk.Size(m.lay, src)
	srcUID := recordedUID(m.lay, src)
	roots := make([]string, len(dsts))
	owners := make([]map[uint32]uint32, len(dsts))
	for i, id := range dsts {
		if err := os.WriteFile(m.overlay(id)+"/.mode", []byte(m.rt.Mode()+"\n"), 0o600); err != nil {
			return nil, nil, err
		}
		roots[i] = m.overlay(id)
		if hasDisk {
			if err := disk.Ensure(ctx, m.lay, id, size); err != nil {
				return nil, nil, fmt.Errorf("fork %s: its disk: %w", id, err)
			}
			if err := disk.Mount(m.lay, id); err != nil {
				return nil, nil, fmt.Errorf("fork %s: its disk: %w", id, err)
			}
			roots[i] = disk.Dir(m.lay, id)
		}
		if srcUID > 0 && os.Geteuid() == 0 {
			uid, _, err := AgentIdentity(m.lay, id)
			if err != nil {
				return nil, nil, fmt.Errorf("fork %s: %w", id, err)
			}
			owners[i] = map[uint32]uint32{uint32(srcUID): uint32(uid)}
		}
	}
	return roots, owners, nil
}

// copyForks copies the source st's data into each root, with the source
// paused meanwhile when it runs (and resumed after, whatever happened).
// A mode that cannot pause copies a running source as it goes.
func (m *Manager) copyForks(ctx context.Context, st *sandbox.State, roots []string, owners []map[uint32]uint32) ([]store.CopyStats, error) {
	out := make([]store.CopyStats, len(roots))
	err := m.still(ctx, st, "fork", func(from string) error {
		for i, to := range roots {
			var err error
			if out[i], err = store.CopyTree(ctx, from, to, store.CopyOptions{Skip: store.HostRecord, Owners: owners[i]}); err != nil {
				return fmt.Errorf("fork of %s: %w", st.ID, err)
			}
		}
		return nil
	})
	return out, err
}

// discard removes what a new neuron that was never made left: its disk,
// its directory, its uid.
func (m *Manager) discard(id string) {
	uid := recordedUID(m.lay, id)
	disk.Unmount(m.lay, id)
	os.RemoveAll(m.overlay(id))
	ReleaseIdentity(m.lay, id, uid)
}

// ForkWhole forks through a whole-machine snapshot (the microVM modes,
// whose sn takes and restores them): src, running or paused, is saved
// once, and each fork is restored from a copy of that snapshot under its
// own id, so it runs on with src's memory and processes; its clock is set
// and its RNG reseeded as after any restore. The snapshot is removed
// after, from src and from every fork. A stopped src has no machine to
// save: it is refused.
func (m *Manager) ForkWhole(ctx context.Context, sn sandbox.Snapshotter, src string, dsts []string, opts sandbox.ForkOptions) ([]*sandbox.State, error) {
	st, unlock, err := m.forkBegin(ctx, src, dsts)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused {
		return nil, &sandbox.NotRunningError{ID: src, Reason: "a microVM is forked from a whole-machine snapshot, and a " + string(st.Status) + " one has no machine to save",
			Hint: "nsys-cortex create " + src + " --mode " + m.rt.Mode() + ", then fork it"}
	}
	// Each new id is claimed (made O_EXCL, locked, marked .forking) as a
	// file fork's is, and its lock is handed to the restore's create
	// (through ctx): no other process starts a neuron on it meanwhile, so
	// what a failed fork removes is its own.
	var claimed []string
	locks := map[string]*store.Lock{}
	release := func() {
		for _, id := range claimed {
			// A restore that got as far as starting stops what it started;
			// whatever is left is this fork's (no one else could take the id).
			m.Destroy(context.WithoutCancel(ctx), id, sandbox.DestroyOptions{Wipe: true})
			m.discard(id)
			os.Remove(m.lay.SnapshotsDir(id)) // the restore's copy went; its directory too, when empty
			locks[id].Release()
		}
	}
	labels := st.Labels
	if opts.Labels != nil {
		labels = opts.Labels
	}
	at := time.Now().UTC()
	rec, err := makingRecord("a fork of "+src, 0) // a machine's snapshot: its size is known only once it is taken
	if err != nil {
		return nil, err
	}
	for _, id := range dsts {
		lock, err := m.claim(id, rec)
		if err != nil {
			release()
			return nil, err
		}
		claimed, locks[id] = append(claimed, id), lock
		sp := spec{Labels: labels.Clone(), ForkedFrom: src, ForkedAt: &at}
		if err := errors.Join(os.WriteFile(m.overlay(id)+"/.mode", []byte(m.rt.Mode()+"\n"), 0o600),
			store.WriteJSON(m.specFile(id), &sp, 0o600)); err != nil {
			release()
			return nil, fmt.Errorf("fork %s of %s: %w", id, src, err)
		}
	}
	name := "fork-" + protocol.NewSecret()[:12]
	if _, err := sn.Snapshot(ctx, src, name); err != nil {
		release()
		return nil, fmt.Errorf("fork of %s: its snapshot: %w", src, err)
	}
	defer store.RemoveSnapshot(m.lay.SnapshotsDir(src), name)
	var out []*sandbox.State
	for _, id := range dsts {
		os.Remove(m.forkingFile(id)) // whole once restored; the lock keeps others off meanwhile
		fst, err := m.restoreFork(withClaim(ctx, id, locks[id]), sn, src, id, name)
		if err != nil {
			// The restore stopped what it started (under this claim's lock,
			// which the neuron held and gave back).
			release()
			return out, fmt.Errorf("fork %s of %s: %w", id, src, err)
		}
		claimed = claimed[1:] // a neuron now: its lock is its own
		m.event(ctx, events.Created, fst, "fork of "+src+" (a whole-machine snapshot)")
		out = append(out, fst)
	}
	return out, nil
}

// restoreFork restores fork id from a copy of src's snapshot name, then
// removes the copy.
func (m *Manager) restoreFork(ctx context.Context, sn sandbox.Snapshotter, src, id, name string) (*sandbox.State, error) {
	from, to := filepath.Join(m.lay.SnapshotsDir(src), name), filepath.Join(m.lay.SnapshotsDir(id), name)
	if err := os.MkdirAll(to, 0o700); err != nil {
		return nil, err
	}
	defer store.RemoveSnapshot(m.lay.SnapshotsDir(id), name)
	if _, err := store.CopyTree(ctx, from, to, store.CopyOptions{}); err != nil {
		return nil, err
	}
	return sn.Restore(ctx, id, name)
}

// claimKey carries, in a context, the lock of an id a whole-machine fork
// claimed, to the create its restore runs.
type claimKey struct{ id string }

func withClaim(ctx context.Context, id string, l *store.Lock) context.Context {
	return context.WithValue(ctx, claimKey{id}, l)
}

// claimedLock is the lock ctx carries for id (nil: none).
func claimedLock(ctx context.Context, id string) *store.Lock {
	l, _ := ctx.Value(claimKey{id}).(*store.Lock)
	return l
}
