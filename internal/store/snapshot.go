package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Snapshot describes a saved neuron, as its snapshot.json records it.
// There are two kinds, in the same directory (snapshots/<id>/<name>/):
// a copy of the overlay's files (CreateSnapshot; Mode empty), which any
// mode that keeps its overlay as files restores; and a whole-neuron
// snapshot a mode took itself (sandbox.Snapshotter: a VM's memory, its
// processes and its disk image; Mode names the mode), which only that
// mode restores. CheckRestore tells which restore fits.
type Snapshot struct {
	Name    string    `json:"name"`
	Neuron  string    `json:"neuron"`
	Created time.Time `json:"created"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
	// Mode is the mode that took a whole-neuron snapshot; empty for a copy
	// of the overlay's files.
	Mode string `json:"mode,omitempty"`

	// vm marks a whole-VM snapshot whose record predates Mode (it has the
	// vm/ directory the VM modes keep their state in).
	vm bool
}

// Whole reports whether s is a whole-neuron snapshot a mode took itself
// (memory and processes too), not a copy of files.
func (s *Snapshot) Whole() bool { return s.Mode != "" || s.vm }

// Kind is "vm" for a whole-neuron snapshot, "files" for a copy of files.
func (s *Snapshot) Kind() string {
	if s.Whole() {
		return "vm"
	}
	return "files"
}

// snapshotName reports whether name may name a snapshot: it is a directory
// name, ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$. Checked by hand: the expression
// compiled at init cost every command 860 allocations (TestStartIsLight).
func snapshotName(name string) bool {
	if len(name) == 0 || len(name) > 64 || !isAlnum(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// CheckSnapshotName fails for a name that is not a safe directory name.
func CheckSnapshotName(name string) error {
	if !snapshotName(name) {
		return fmt.Errorf("snapshot name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ErrSnapshotExists and ErrSnapshotNotFound are the snapshot errors a
// caller may act on.
var (
	ErrSnapshotExists   = errdefs.New(errdefs.Exists, "snapshot exists")
	ErrSnapshotNotFound = errdefs.New(errdefs.NotFound, "no such snapshot")
	// ErrSnapshotMismatch: the snapshot is of the other kind than the
	// neuron restores (a VM's into a neuron of files, or files into a VM),
	// or of another VM mode.
	ErrSnapshotMismatch = errdefs.New(errdefs.Invalid, "the snapshot does not fit this neuron")
)

// ReadSnapshot returns the record of snapshot name in dir.
func ReadSnapshot(dir, name string) (*Snapshot, error) {
	if err := CheckSnapshotName(name); err != nil {
		return nil, err
	}
	s, err := readSnapshot(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %q: %w", name, ErrSnapshotNotFound)
	}
	return s, err
}

// readSnapshot reads the record of the snapshot in dir.
func readSnapshot(dir string) (*Snapshot, error) {
	var s Snapshot
	if err := ReadJSON(filepath.Join(dir, "snapshot.json"), &s); err != nil {
		return nil, err
	}
	if s.Mode == "" {
		fi, err := os.Stat(filepath.Join(dir, "vm"))
		s.vm = err == nil && fi.IsDir()
	}
	return &s, nil
}

// CheckRestore fails with ErrSnapshotMismatch unless a neuron of mode can
// restore s: one whose manager restores whole neurons itself (whole: a
// VM) takes only whole snapshots of its own mode; any other takes only
// copies of files. A whole snapshot from before records named their mode
// is left to the VM mode to check.
func CheckRestore(s *Snapshot, mode string, whole bool) error {
	switch {
	case !whole && s.Whole():
		this := ""
		if mode != "" {
			this = " (this one runs in mode " + mode + ")"
		}
		return fmt.Errorf("snapshot %q of %s is a whole-VM snapshot%s (memory, processes and a disk image), not a copy of files: "+
			"it is never copied into an overlay directory; only a neuron of the mode that took it restores it%s: %w",
			s.Name, s.Neuron, s.ofMode(), this, ErrSnapshotMismatch)
	case whole && !s.Whole():
		return fmt.Errorf("snapshot %q of %s is a copy of files (taken while the neuron ran in a mode that keeps its files as files): "+
			"a %s neuron's files are a disk image its VM writes, restored only from a VM snapshot of its own: %w",
			s.Name, s.Neuron, mode, ErrSnapshotMismatch)
	case whole && s.Mode != "" && s.Mode != mode:
		return fmt.Errorf("snapshot %q of %s was taken by mode %s: a %s neuron cannot load it: %w", s.Name, s.Neuron, s.Mode, mode, ErrSnapshotMismatch)
	}
	return nil
}

func (s *Snapshot) ofMode() string {
	if s.Mode == "" {
		return ""
	}
	return " of mode " + s.Mode
}

// RemoveSnapshot deletes snapshot name from dir.
func RemoveSnapshot(dir, name string) error {
	if err := CheckSnapshotName(name); err != nil {
		return err
	}
	p := filepath.Join(dir, name)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("snapshot %q: %w", name, ErrSnapshotNotFound)
	}
	// Renamed aside first, so a removal cut short leaves no part of a
	// snapshot that still lists or restores.
	tmp, err := os.MkdirTemp(dir, "."+name+".removing-")
	if err != nil {
		return err
	}
	if err := os.Rename(p, filepath.Join(tmp, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.RemoveAll(tmp)
}

// HostRecord reports whether a top-level entry of a neuron's overlay
// directory is one of the host's records about the neuron, not the
// neuron's data: its state file and lock (.neuron.json, .lock), its mode,
// uid and cgroups (.mode, .uid, .cgroups), its launch receipts. Snapshots
// neither save nor restore them, so a restore never takes back a record
// made after the snapshot (every such name starts with a dot, or is
// "receipts", the receipts' place before they moved). lost+found is the
// root of a neuron's disk of its own: the filesystem's, not the neuron's.
// work is overlayfs's work directory (nsbox): the kernel's scratch space,
// which the mode makes afresh and a rootless host cannot even read, so
// snapshots, forks and exports leave it out and a restore keeps it.
func HostRecord(name string) bool {
	return strings.HasPrefix(name, ".") || name == "receipts" || name == "lost+found" || name == "work"
}

// CreateSnapshot copies the overlay directory into dir/name: every file
// byte for byte with its mode, owner (when this process may set it), times,
// extended attributes (overlayfs keeps opaque-directory marks there),
// symlinks, device nodes (overlayfs whiteouts) and hard links.
func CreateSnapshot(dir, name, neuron, overlay string) (*Snapshot, error) {
	return CreateSnapshotWithin(dir, name, neuron, overlay, 0)
}

// CreateSnapshotWithin is CreateSnapshot that fails with a CapacityError,
// leaving nothing, once the copy holds more than limit bytes of data (0:
// no limit): a neuron's snapshots are capped (snapshots.max_bytes), and
// the cap must hold while one is made, not only before.
func CreateSnapshotWithin(dir, name, neuron, overlay string, limit int64) (*Snapshot, error) {
	if err := CheckSnapshotName(name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, fmt.Errorf("snapshot %q of %s: %w", name, neuron, ErrSnapshotExists)
	}
	tmp, err := os.MkdirTemp(dir, "."+name+".partial-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // gone after the rename; removes a partial copy otherwise
	cp := newCopier()
	cp.limit = limit
	if err := os.Mkdir(filepath.Join(tmp, "data"), 0o700); err != nil {
		return nil, err
	}
	if err := cp.copyEntries(overlay, filepath.Join(tmp, "data"), HostRecord); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", neuron, err)
	}
	faultpoint.Hit("snapshot.copied")
	s := &Snapshot{Name: name, Neuron: neuron, Created: time.Now().UTC(), Files: cp.files, Bytes: cp.bytes}
	if err := WriteJSON(filepath.Join(tmp, "snapshot.json"), s, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	return s, nil
}

// ListSnapshots returns the snapshots in dir, oldest first.
func ListSnapshots(dir string) ([]Snapshot, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		s, err := readSnapshot(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // not a finished snapshot
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// keptLabels names, in a neuron's snapshots directory, the labels the
// neuron had when it was wiped: its snapshots outlive it, and whoever may
// see them is decided by those labels (an API key's tenant), not by
// whoever takes the id next.
const keptLabels = ".labels.json"

// KeepLabels records, in snapshots directory dir, the labels of the
// neuron being wiped, when it leaves snapshots behind.
func KeepLabels(dir string, l map[string]string) error {
	if snaps, err := ListSnapshots(dir); err != nil || len(snaps) == 0 {
		return err
	}
	if l == nil {
		l = map[string]string{}
	}
	return WriteJSON(filepath.Join(dir, keptLabels), l, 0o600)
}

// KeptLabels returns the labels KeepLabels recorded in dir (ok false:
// none were).
func KeptLabels(dir string) (map[string]string, bool) {
	var l map[string]string
	if err := ReadJSON(filepath.Join(dir, keptLabels), &l); err != nil {
		return nil, false
	}
	if l == nil {
		l = map[string]string{}
	}
	return l, true
}

// RestoreSnapshot makes the overlay directory what it was when snapshot
// name was taken. The neuron must be stopped. The copy is made beside the
// overlay first; the overlay's entries are swapped only once it is
// complete, so a failed restore leaves the overlay as it was. A whole-VM
// snapshot is refused (ErrSnapshotMismatch): its data is a disk image,
// not the overlay's files.
func RestoreSnapshot(dir, name, overlay string) (*Snapshot, error) {
	if err := RecoverRestore(overlay); err != nil {
		return nil, err
	}
	s, err := ReadSnapshot(dir, name)
	if err != nil {
		return nil, err
	}
	if err := CheckRestore(s, "", false); err != nil {
		return nil, err
	}
	if err := restoreInto(filepath.Join(dir, name, "data"), overlay, name); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreInto makes directory to's entries (but its host records) what
// from's are. The copy is made in a staging directory inside to (its own
// filesystem), and the entries are swapped only once it is complete, so a
// failed restore leaves to as it was. An entry of to that is a mount point
// (a neuron's disk of its own) is not swapped but restored into, the same
// way: its contents are the neuron's, the mount is the host's.
func restoreInto(from, to, name string) error {
	var toSt unix.Stat_t
	if err := unix.Lstat(to, &toSt); err != nil {
		return err
	}
	mounts := map[string]bool{}
	current, err := os.ReadDir(to)
	if err != nil {
		return err
	}
	for _, e := range current {
		var st unix.Stat_t
		if e.IsDir() && unix.Lstat(filepath.Join(to, e.Name()), &st) == nil && st.Dev != toSt.Dev {
			mounts[e.Name()] = true
		}
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	stage, err := os.MkdirTemp(to, ".restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	// Host records in an older snapshot (receipts, before they were left
	// out) are not restored: the host's own are kept below.
	cp := newCopier()
	if err := cp.copyEntries(from, stage, func(n string) bool { return HostRecord(n) || mounts[n] }); err != nil {
		return fmt.Errorf("restore of %q: %w", name, err)
	}
	// Swap: move the current entries aside, then the restored ones in. If
	// any rename fails, everything moved is put back before returning, so
	// the directory is as it was; only a complete swap removes the old
	// entries. A process killed during the swap leaves a journal
	// (restoreJournal) from which RecoverRestore finishes it.
	old, err := os.MkdirTemp(to, ".old-")
	if err != nil {
		return err
	}
	j := journal{Stage: filepath.Base(stage), Old: filepath.Base(old)}
	for _, e := range current {
		if !HostRecord(e.Name()) && !mounts[e.Name()] {
			j.Aside = append(j.Aside, e.Name())
		}
	}
	for _, e := range entries {
		if !HostRecord(e.Name()) && !mounts[e.Name()] {
			j.In = append(j.In, e.Name())
		}
	}
	if err := WriteJSON(filepath.Join(to, restoreJournal), &j, 0o600); err != nil {
		os.Remove(old)
		return err
	}
	defer os.Remove(filepath.Join(to, restoreJournal))
	var asideNames, inNames []string
	undo := func(cause error) error {
		var errs []error
		for _, n := range inNames {
			errs = append(errs, os.Rename(filepath.Join(to, n), filepath.Join(stage, n)))
		}
		for _, n := range asideNames {
			errs = append(errs, os.Rename(filepath.Join(old, n), filepath.Join(to, n)))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("restore of %q failed (%w) and putting the overlay back failed too: its entries are in %s: %v", name, cause, old, err)
		}
		os.Remove(old)
		return fmt.Errorf("restore of %q: %w (the overlay is unchanged)", name, cause)
	}
	for _, e := range current {
		if HostRecord(e.Name()) || mounts[e.Name()] {
			continue
		}
		if err := os.Rename(filepath.Join(to, e.Name()), filepath.Join(old, e.Name())); err != nil {
			return undo(err)
		}
		asideNames = append(asideNames, e.Name())
		faultpoint.Hit("restore.swapping")
	}
	for _, e := range entries {
		if HostRecord(e.Name()) || mounts[e.Name()] {
			continue
		}
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return undo(err)
		}
		inNames = append(inNames, e.Name())
	}
	os.RemoveAll(old)
	for _, e := range entries {
		if mounts[e.Name()] && e.IsDir() {
			if err := restoreInto(filepath.Join(from, e.Name()), filepath.Join(to, e.Name()), name); err != nil {
				return err
			}
		}
	}
	return nil
}

// copier copies trees, keeping hard links as links. The source may be a
// live overlay, which the neuron writes while it is copied: it is read by
// descriptor (hostfs), one name at a time, never following a symlink, and
// what is copied is what the opened descriptor is (its fstat), so a file
// swapped for a symlink to a host file (renameat2 RENAME_EXCHANGE in a
// loop) is never read through. The destination is a directory of the
// host's own (a snapshot in the making, a restore's staging directory),
// which no neuron reaches.
type copier struct {
	links map[[2]uint64]string // (dev, ino) of a multiply linked file -> its copy
	root  bool
	// owners maps owners of the source (uids and gids alike) to those of
	// the copy; an owner not in it is kept.
	owners map[uint32]uint32
	files  int
	// cloned is the part of bytes shared with the source (FICLONE: the
	// filesystem's reflinks) rather than written again.
	cloned int64
	// bytes is the data copied: holes of sparse files are kept as holes,
	// and count nothing.
	bytes int64
	// limit, when positive, bounds bytes: past it the copy fails.
	limit int64
	// ctx, when set, ends the copy between entries and chunks.
	ctx context.Context
}

// ErrSnapshotTooLarge is the class of a copy that passed its limit.
var ErrSnapshotTooLarge = errdefs.New(errdefs.Capacity, "the snapshot would pass the cap on the neuron's snapshots (snapshots.max_bytes): remove some first")

func newCopier() *copier { return &copier{links: map[[2]uint64]string{}, root: os.Geteuid() == 0} }

// copyEntries copies the entries of the directory src (but those skip
// says to leave) into the existing directory dst.
func (c *copier) copyEntries(src string, dst string, skip func(string) bool) error {
	d, err := hostfs.Open(src)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Names()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if skip != nil && skip(name) {
			continue
		}
		if err := c.copy(d, name, filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

// changeRetries is how often an entry that changed kind between its lstat
// and its open is looked at again before the copy gives up.
const changeRetries = 3

// errChanged: the source changed under the copy (a name that was one kind
// of file is another by the time it is opened).
var errChanged = errors.New("changed while it was copied (try again, or stop the neuron first)")

// copy copies entry name of dir to dst. An entry that turns out to be of
// another kind when it is opened (a neuron swapping it) is looked at again:
// what is copied is always what was opened, never what a name led to.
func (c *copier) copy(dir *hostfs.Dir, name, dst string) error {
	var err error
	for range changeRetries {
		if err = c.copyOnce(dir, name, dst); !errors.Is(err, errChanged) {
			return err
		}
	}
	return err
}

func (c *copier) copyOnce(dir *hostfs.Dir, name, dst string) error {
	if c.ctx != nil && c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	st, err := dir.Lstat(name)
	if err != nil {
		return err
	}
	src := filepath.Join(dir.Path(), name)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := dir.Sub(name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, errChanged)
		}
		defer sub.Close()
		if st, err = sub.Stat(); err != nil {
			return err
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		names, err := sub.Names()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			if err := c.copy(sub, n, filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		if err := copyXattrs(int(sub.Fd()), src, dst); err != nil {
			return err
		}
	case unix.S_IFREG:
		in, fst, err := dir.OpenFile(name, unix.O_RDONLY, 0)
		if err != nil {
			if errors.Is(err, hostfs.ErrSymlink) || errors.Is(err, hostfs.ErrNotRegular) {
				return fmt.Errorf("copy %s: %w", src, errChanged)
			}
			return err
		}
		defer in.Close()
		st = fst
		if first, linked := c.linked(st, dst); linked {
			return os.Link(first, dst)
		}
		if err := c.copyFile(in, st.Size, dst); err != nil {
			return err
		}
		if err := copyXattrs(int(in.Fd()), src, dst); err != nil {
			return err
		}
		c.files++
	case unix.S_IFLNK:
		target, err := dir.Readlink(name)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, errChanged)
		}
		if first, linked := c.linked(st, dst); linked {
			return os.Link(first, dst)
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFIFO:
		// A character device can only be an overlayfs whiteout (0:0): a
		// neuron cannot make any other, and none is ever recreated.
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev != 0 {
			return fmt.Errorf("copy %s: a device node (%d:%d) that is not an overlay whiteout is never copied", src, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if first, linked := c.linked(st, dst); linked {
			return os.Link(first, dst)
		}
		if err := unix.Mknod(dst, st.Mode&(unix.S_IFMT|0o777), 0); err != nil {
			return fmt.Errorf("copy %s: a whiteout needs privilege to recreate: %w", src, err)
		}
	case unix.S_IFSOCK:
		return nil // a socket is not data
	default:
		return fmt.Errorf("copy %s: a file of type %o is never copied", src, st.Mode&unix.S_IFMT)
	}
	return c.attrs(dst, st)
}

// linked reports whether a multiply linked file was copied already, and
// where; otherwise it remembers dst as its copy.
func (c *copier) linked(st *unix.Stat_t, dst string) (string, bool) {
	if st.Nlink <= 1 {
		return "", false
	}
	key := [2]uint64{uint64(st.Dev), st.Ino}
	if first, ok := c.links[key]; ok {
		return first, true
	}
	c.links[key] = dst
	return "", false
}

// copyFile copies the size bytes of in to a new file dst, keeping its
// holes: only the ranges the kernel says hold data (SEEK_DATA, SEEK_HOLE)
// are read and written, so a sparse file a neuron made (truncate -s 2G)
// costs the snapshot what it costs the neuron, not its length in zeros.
func (c *copier) copyFile(in *os.File, size int64, dst string) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if c.clone(in, out, size) {
		return out.Close()
	}
	err = c.copyData(in, out, size)
	if err == nil {
		err = out.Truncate(size) // a hole at the end
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// clone makes out share in's data (FICLONE: a reflink on btrfs, XFS and
// the like) and reports whether it did. It counts the data the source
// holds against the limit, as a copy would: a clone is free only while
// neither side is written.
func (c *copier) clone(in, out *os.File, size int64) bool {
	var st unix.Stat_t
	if size == 0 || unix.Fstat(int(in.Fd()), &st) != nil {
		return false
	}
	held := min(size, st.Blocks*512)
	if c.limit > 0 && c.bytes+held > c.limit {
		return false // the copy below says so
	}
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) != nil {
		return false // not here (ext4, tmpfs, another filesystem): copied
	}
	c.bytes += held
	c.cloned += held
	return true
}

func (c *copier) copyData(in, out *os.File, size int64) error {
	for _, r := range DataRanges(int(in.Fd()), size) {
		if err := c.copyRange(in, out, r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

// copyRange copies n bytes at off from in to out, at the same offset: by
// copy_file_range where the kernel can, else through a buffer. A file the
// neuron shortens meanwhile is copied as far as it goes.
func (c *copier) copyRange(in, out *os.File, off, n int64) error {
	if c.limit > 0 && c.bytes+n > c.limit {
		return ErrSnapshotTooLarge
	}
	roff, woff := off, off
	for n > 0 {
		if c.ctx != nil && c.ctx.Err() != nil {
			return c.ctx.Err()
		}
		w, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 64<<20)), 0) // chunks: a cancel is heard between them
		if err != nil {
			break // EXDEV, ENOSYS, EINVAL...: the buffer below does the rest
		}
		if w == 0 {
			return nil // the end of the file, earlier than it was
		}
		c.bytes += int64(w)
		n -= int64(w)
	}
	if n == 0 {
		return nil
	}
	w, err := io.Copy(io.NewOffsetWriter(out, woff), io.NewSectionReader(in, roff, n))
	c.bytes += w
	return err
}

// attrs copies owner, mode and times, in the order that keeps each
// (chown clears set-id bits; mode after it). The extended attributes were
// copied with the contents.
func (c *copier) attrs(dst string, st *unix.Stat_t) error {
	if c.root {
		uid, gid := st.Uid, st.Gid
		if to, ok := c.owners[uid]; ok {
			uid = to
		}
		if to, ok := c.owners[gid]; ok {
			gid = to
		}
		if err := unix.Lchown(dst, int(uid), int(gid)); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs copies the extended attributes of the open file fd (a
// directory or a regular file; overlayfs keeps opaque-directory marks
// there) that this process may read and set onto dst. src names it in
// errors.
func copyXattrs(fd int, src, dst string) error {
	for _, x := range Xattrs(fd) {
		if err := unix.Lsetxattr(dst, x.Name, x.Value, 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("copy %s: xattr %s: %w", src, x.Name, err)
		}
	}
	return nil
}

// snapshotLockFile, in a neuron's snapshots directory, is the lock every
// snapshot operation that changes the neuron or its snapshots holds
// (ListSnapshots skips it: its name starts with a dot).
const snapshotLockFile = ".lock"

// LockSnapshots takes the lock of the snapshots in dir, waiting while
// another operation holds it, in this process or another (a daemon's API,
// a chat's checkpoint, a local CLI), until ctx ends. A restore must not
// swap the files a create is copying, nor two restores stop and start a
// neuron at once. The kernel drops the lock if its holder dies.
func LockSnapshots(ctx context.Context, dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err = NewLock(filepath.Join(dir, snapshotLockFile)).Wait(ctx, 50*time.Millisecond)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("waiting for another snapshot operation (%s): %w", dir, context.Cause(ctx))
	}
	return unlock, err
}

// restoreJournal, in an overlay, says that a restore was swapping its
// entries: which were to go aside, and the staging and aside directories.
const restoreJournal = ".restore-journal"

type journal struct {
	Stage string   `json:"stage"`
	Old   string   `json:"old"`
	Aside []string `json:"aside"`
	In    []string `json:"in"`
}

func validEntry(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsRune(n, '/')
}

// RecoverRestore finishes in overlay what a restore killed during its swap
// left (its journal says what), so that the overlay is the snapshot's, and
// removes what a restore killed earlier left (a staging directory; the
// overlay was not touched yet). A neuron's data is then never a mix of the
// two. Called before a neuron starts and before a restore.
func RecoverRestore(overlay string) error {
	b, err := os.ReadFile(filepath.Join(overlay, restoreJournal))
	if err == nil {
		var j journal
		if err := json.Unmarshal(b, &j); err != nil || !staging(j.Stage, ".restore-") || !staging(j.Old, ".old-") {
			return fmt.Errorf("%s: a restore's journal that does not read: %v", overlay, err)
		}
		stage, old := filepath.Join(overlay, j.Stage), filepath.Join(overlay, j.Old)
		staged := entryNames(stage)
		// Entries go aside first, then in: what has the name of an entry to
		// go aside is the old one, unless it is to come in and has (it is
		// no longer staged).
		for _, n := range j.Aside {
			if !validEntry(n) {
				return fmt.Errorf("%s: a restore's journal names %q", overlay, n)
			}
			if _, err := os.Lstat(filepath.Join(overlay, n)); err != nil {
				continue
			}
			if slices.Contains(j.In, n) && !slices.Contains(staged, n) {
				continue
			}
			if err := os.Rename(filepath.Join(overlay, n), filepath.Join(old, n)); err != nil {
				return fmt.Errorf("%s: finishing a restore: %w", overlay, err)
			}
		}
		for _, n := range entryNames(stage) {
			if err := os.Rename(filepath.Join(stage, n), filepath.Join(overlay, n)); err != nil {
				return fmt.Errorf("%s: finishing a restore: %w", overlay, err)
			}
		}
		if err := os.Remove(filepath.Join(overlay, restoreJournal)); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(overlay)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if staging(e.Name(), ".restore-") || staging(e.Name(), ".old-") {
			os.RemoveAll(filepath.Join(overlay, e.Name()))
		}
	}
	return nil
}

// staging reports whether name is a restore's directory: prefix and the
// random part os.MkdirTemp adds.
func staging(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	return ok && rest != "" && !strings.ContainsAny(rest, "/.")
}

func entryNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
