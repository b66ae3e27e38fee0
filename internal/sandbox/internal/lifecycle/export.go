package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/archive"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/store"
)

var _ sandbox.Exporter = (*Manager)(nil)

// Export writes neuron id as one archive to w (docs/export.md): its
// record, its data (the data root's entries but the host's records), and
// with opts.Snapshots its snapshots. A running neuron is paused for the
// copy and resumed after it; a paused or stopped one is read as it is.
func (m *Manager) Export(ctx context.Context, id string, w io.Writer, opts sandbox.ExportOptions) (*archive.Stats, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	rec := archive.Record{ID: id, Mode: m.rt.Mode(), Created: st.CreatedAt, Labels: st.Labels, UID: recordedUID(m.lay, id)}
	if size, ok := disk.Size(m.lay, id); ok {
		rec.DiskBytes = size
	}
	if st.Policy != nil && st.Status != sandbox.StatusStopped {
		if rec.Policy, err = json.Marshal(st.Policy); err != nil {
			return nil, err
		}
	}
	var trees []archive.Tree
	if opts.Snapshots {
		unlock, err := store.LockSnapshots(ctx, m.lay.SnapshotsDir(id))
		if err != nil {
			return nil, err
		}
		defer unlock()
		snaps, err := store.ListSnapshots(m.lay.SnapshotsDir(id))
		if err != nil {
			return nil, err
		}
		for _, s := range snaps {
			rec.Snapshots = append(rec.Snapshots, s.Name)
			trees = append(trees, archive.Tree{Name: "snapshots/" + s.Name, Dir: filepath.Join(m.lay.SnapshotsDir(id), s.Name)})
		}
	}
	var stats archive.Stats
	err = m.still(ctx, st, "export", func(root string) error {
		trees = append([]archive.Tree{{Name: "data", Dir: root, Skip: store.HostRecord}}, trees...)
		stats, err = archive.Write(ctx, w, rec, trees)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("export of %s: %w", id, err)
	}
	return &stats, nil
}

// still runs f on the data root of neuron st with the neuron still: a
// running neuron is paused meanwhile and resumed after, whatever f did
// (a mode that cannot pause runs f as it goes).
func (m *Manager) still(ctx context.Context, st *sandbox.State, why string, f func(root string) error) error {
	if st.Status == sandbox.StatusRunning {
		_, err := m.Pause(ctx, st.ID, sandbox.PauseOptions{Reason: why})
		switch {
		case err == nil:
			defer m.Resume(context.WithoutCancel(ctx), st.ID)
		case errors.Is(err, sandbox.ErrAlreadyPaused), errors.As(err, new(*sandbox.UnsupportedError)):
		default:
			return fmt.Errorf("pausing %s for the %s: %w", st.ID, why, err)
		}
	}
	root, err := m.DataRoot(ctx, st.ID)
	if err != nil {
		return err
	}
	return f(root)
}

// Import makes neuron id, stopped, from the archive ar was opened on: the
// id is claimed (O_EXCL, locked, marked) first, the archive extracted
// into a staging directory inside it (reserving its share of the room as
// its data comes: importRoom) and verified whole against its manifest,
// and checked for what the host opens by name (checkStructure), and only
// then moved into place, with its labels; anything wrong leaves nothing.
// An archive with snapshots is refused. Its files are given to the new
// neuron's uid. A create starts it (with the options it names).
func (m *Manager) Import(ctx context.Context, id string, ar *archive.Reader) (*sandbox.State, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	rec := ar.Record()
	if err := ids.Validate(rec.ID); err != nil {
		// Only named in messages, events and the import's mark, but an
		// export always holds a valid one.
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("the archive's record names no neuron: %v", err)}
	}
	if rec.Mode != m.rt.Mode() {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("the archive is of a %s neuron, not %s", rec.Mode, m.rt.Mode())}
	}
	lset := labels.Set(rec.Labels)
	if err := lset.Validate(); err != nil {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("the archive's labels: %v", err)}
	}
	if len(rec.Snapshots) > 0 {
		// A snapshot's directory is the host's record (snapshot.json: its
		// name, size, limits, image) beside a tree a restore copies by name;
		// from an archive, each would have to be checked as untrusted input
		// first, and none is yet.
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("the archive carries snapshots (%s): an import does not take snapshots; export without them (no --snapshots), or restore them where they were made",
			strings.Join(rec.Snapshots, ", "))}
	}
	making, err := makingRecord("an import of "+rec.ID, 0)
	if err != nil {
		return nil, err
	}
	// The id claimed under the room lock, reserving nothing yet: its
	// data reserves room as it comes (importRoom.grant).
	var lock *store.Lock
	var room0 Room
	maxEntries := 0 // the extractor's own bound
	if err := m.withRoom(ctx, "", func(r Room) error {
		// Each entry takes an inode: it is charged the filesystem's bytes
		// per inode at least (the room granted bounds the inodes too), and
		// an import has half of those free at most (the reserve kept).
		room0 = r
		if r.Inodes >= 0 {
			if maxEntries = int(min(r.Inodes/2, math.MaxInt32)); maxEntries == 0 {
				return &sandbox.CapacityError{Reason: fmt.Sprintf("no room to import into: %s has no inodes free (keeping 5%% and at least 10,000)", m.lay.Overlays)}
			}
		}
		var err error
		lock, err = m.claim(id, making)
		return err
	}); err != nil {
		return nil, err
	}
	room := &importRoom{m: m, id: id, rec: making, copies: 1}
	if rec.DiskBytes > 0 {
		room.copies = 2
	}
	done := false
	defer func() {
		if !done {
			m.discard(id)
		}
		lock.Release()
	}()
	if err := os.WriteFile(filepath.Join(m.overlay(id), ".mode"), []byte(m.rt.Mode()+"\n"), 0o600); err != nil {
		return nil, err
	}
	owners, err := m.importOwners(id, rec.UID)
	if err != nil {
		return nil, err
	}
	stage := filepath.Join(m.overlay(id), ".import")
	if err := os.Mkdir(stage, 0o700); err != nil {
		return nil, err
	}
	stats, err := ar.Extract(ctx, stage, archive.ExtractOptions{Owners: owners, MaxBytes: rec.DiskBytes, MaxEntries: maxEntries,
		Grant: room.grant(ctx), EntryCost: room0.BytesPerInode})
	if errors.Is(err, archive.ErrTooLarge) {
		why := ""
		if rec.DiskBytes > 0 {
			why = fmt.Sprintf("; its data goes onto its disk of %d MiB", rec.DiskBytes>>20)
		}
		if maxEntries > 0 {
			why += fmt.Sprintf("; %d entries at most, half the inodes free in %s (keeping 5%% and at least 10,000)", maxEntries, m.lay.Overlays)
		}
		return nil, &sandbox.CapacityError{Reason: fmt.Sprintf("the archive holds more than an import may take (%v%s)", err, why)}
	}
	if err != nil {
		return nil, err
	}
	if err := m.checkStructure(id, filepath.Join(stage, "data")); err != nil {
		return nil, err
	}
	root := m.overlay(id)
	if rec.DiskBytes > 0 {
		if err := disk.Ensure(ctx, m.lay, id, rec.DiskBytes); err != nil {
			return nil, fmt.Errorf("its disk of %d MiB: %w", rec.DiskBytes>>20, err)
		}
		if err := disk.Mount(m.lay, id); err != nil {
			return nil, err
		}
		root = disk.Dir(m.lay, id)
	}
	if err := moveEntries(ctx, filepath.Join(stage, "data"), root); err != nil {
		return nil, fmt.Errorf("import of %s: %w", id, err)
	}
	if err := os.RemoveAll(stage); err != nil {
		return nil, err
	}
	if err := store.WriteJSON(m.specFile(id), &spec{Labels: lset.Clone()}, 0o600); err != nil {
		return nil, err
	}
	if err := os.Remove(m.forkingFile(id)); err != nil {
		return nil, err
	}
	done = true
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	m.event(ctx, events.Created, st, fmt.Sprintf("import of %s (%d files, %d bytes)", rec.ID, stats.Files, stats.Bytes))
	return st, nil
}

// checkStructure refuses imported data (at dir) that would have the
// host follow it: above and at the directories the mode keeps the
// neuron's files in (DataPather; none for a VM, whose data is its disk
// image), the host makes and opens paths by name as root (nsbox's
// upper/root, where it writes the neuron's /etc/hosts and makes its
// home; a VM's overlay.ext4, which it gives to the VMM read-write). An
// export holds only directories and regular files there; an archive
// with a symbolic link, a FIFO or a device there was made to point the
// host elsewhere. Below them everything is the neuron's own, links
// included, and the host reads it by descriptor.
func (m *Manager) checkStructure(id, dir string) error {
	var roots []string
	if dp, ok := m.rt.(DataPather); ok {
		for _, p := range dp.DataPaths(m.lay, id) {
			roots = append(roots, filepath.Clean(p.Rel))
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			if !d.IsDir() { // the archive's reader refuses it first
				return &sandbox.InvalidError{Reason: fmt.Sprintf("the archive's data/ is a %s, not a directory: not an export of nsys-cortex", kindOf(d.Type()))}
			}
			return nil
		}
		isRoot := slices.Contains(roots, rel)
		switch {
		case isRoot && !d.IsDir():
			return &sandbox.InvalidError{Reason: fmt.Sprintf("the archive's data/%s, where the neuron's files go, is a %s, not a directory: not an export of nsys-cortex", rel, kindOf(d.Type()))}
		case isRoot:
			return filepath.SkipDir // the neuron's own from here down
		case !d.IsDir() && !d.Type().IsRegular():
			return &sandbox.InvalidError{Reason: fmt.Sprintf("the archive's data/%s is a %s where the host keeps its own directories and files, which it opens by name: not an export of nsys-cortex", rel, kindOf(d.Type()))}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no data at all
	}
	return err
}

// kindOf names a file type for a person.
func kindOf(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeDevice != 0:
		return "device"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t.IsRegular():
		return "regular file"
	}
	return "special file"
}

// importOwners maps the archive's owners to the new neuron's: its
// source's uid (and every other but root's) to the new neuron's own uid,
// where neurons run as uids of their own; nil otherwise.
func (m *Manager) importOwners(id string, from int) (archive.Owners, error) {
	if os.Geteuid() != 0 || from <= 0 {
		return nil, nil
	}
	uid, _, err := AgentIdentity(m.lay, id)
	if err != nil {
		return nil, err
	}
	return func(o int) int {
		if o == 0 {
			return 0
		}
		return uid
	}, nil
}

// moveEntries moves the entries of directory from into directory to:
// renamed where they share a filesystem; where they do not (a disk of
// its own), the rest are copied (from is the caller's to remove). Names
// of the host's records (store.HostRecord) are left behind: an export
// holds none, so an archive that does was made to plant them (a .mode
// that points elsewhere, a state file naming a host process as the
// neuron's agent), and the host reads them by name.
func moveEntries(ctx context.Context, from, to string) error {
	ents, err := os.ReadDir(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no data at all
	}
	if err != nil {
		return err
	}
	moved := map[string]bool{}
	for _, e := range ents {
		if store.HostRecord(e.Name()) {
			continue
		}
		err := os.Rename(filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		if errors.Is(err, unix.EXDEV) {
			_, err = store.CopyTree(ctx, from, to, store.CopyOptions{Skip: func(n string) bool { return moved[n] || store.HostRecord(n) }})
			return err
		}
		if err != nil {
			return err
		}
		moved[e.Name()] = true
	}
	return nil
}
