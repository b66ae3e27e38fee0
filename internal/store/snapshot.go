package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Snapshot describes a saved copy of a neuron's overlay.
type Snapshot struct {
	Name    string    `json:"name"`
	Neuron  string    `json:"neuron"`
	Created time.Time `json:"created"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
}

// snapshotName is what a snapshot may be called: it is a directory name.
var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckSnapshotName fails for a name that is not a safe directory name.
func CheckSnapshotName(name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("snapshot name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// ErrSnapshotExists and ErrSnapshotNotFound are the snapshot errors a
// caller may act on.
var (
	ErrSnapshotExists   = errors.New("snapshot exists")
	ErrSnapshotNotFound = errors.New("no such snapshot")
)

// owned reports whether a top-level overlay entry belongs to the lifecycle
// (state records and locks), not to the neuron: snapshots neither save nor
// restore it.
func owned(name string) bool { return strings.HasPrefix(name, ".neuron") }

// CreateSnapshot copies the overlay directory into dir/name: every file
// byte for byte with its mode, owner (when this process may set it), times,
// extended attributes (overlayfs keeps opaque-directory marks there),
// symlinks, device nodes (overlayfs whiteouts) and hard links.
func CreateSnapshot(dir, name, neuron, overlay string) (*Snapshot, error) {
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
	if err := os.Mkdir(filepath.Join(tmp, "data"), 0o700); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(overlay)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", neuron, err)
	}
	for _, e := range entries {
		if owned(e.Name()) {
			continue
		}
		if err := cp.copy(filepath.Join(overlay, e.Name()), filepath.Join(tmp, "data", e.Name())); err != nil {
			return nil, fmt.Errorf("snapshot of %s: %w", neuron, err)
		}
	}
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
		var s Snapshot
		if err := ReadJSON(filepath.Join(dir, e.Name(), "snapshot.json"), &s); err != nil {
			continue // not a finished snapshot
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// RestoreSnapshot makes the overlay directory what it was when snapshot
// name was taken. The neuron must be stopped. The copy is made beside the
// overlay first; the overlay's entries are swapped only once it is
// complete, so a failed restore leaves the overlay as it was.
func RestoreSnapshot(dir, name, overlay string) (*Snapshot, error) {
	if err := CheckSnapshotName(name); err != nil {
		return nil, err
	}
	src := filepath.Join(dir, name)
	var s Snapshot
	if err := ReadJSON(filepath.Join(src, "snapshot.json"), &s); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("snapshot %q: %w", name, ErrSnapshotNotFound)
		}
		return nil, err
	}
	stage, err := os.MkdirTemp(filepath.Dir(overlay), "."+filepath.Base(overlay)+".restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	cp := newCopier()
	data := filepath.Join(src, "data")
	entries, err := os.ReadDir(data)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := cp.copy(filepath.Join(data, e.Name()), filepath.Join(stage, e.Name())); err != nil {
			return nil, fmt.Errorf("restore of %q: %w", name, err)
		}
	}
	// Swap: move the current entries aside, then the restored ones in. If
	// any rename fails, everything moved is put back before returning, so
	// the overlay is as it was; only a complete swap removes the old
	// entries.
	old, err := os.MkdirTemp(filepath.Dir(overlay), "."+filepath.Base(overlay)+".old-")
	if err != nil {
		return nil, err
	}
	current, err := os.ReadDir(overlay)
	if err != nil {
		os.Remove(old)
		return nil, err
	}
	var asideNames, inNames []string
	undo := func(cause error) error {
		var errs []error
		for _, n := range inNames {
			errs = append(errs, os.Rename(filepath.Join(overlay, n), filepath.Join(stage, n)))
		}
		for _, n := range asideNames {
			errs = append(errs, os.Rename(filepath.Join(old, n), filepath.Join(overlay, n)))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("restore of %q failed (%w) and putting the overlay back failed too: its entries are in %s: %v", name, cause, old, err)
		}
		os.Remove(old)
		return fmt.Errorf("restore of %q: %w (the overlay is unchanged)", name, cause)
	}
	for _, e := range current {
		if owned(e.Name()) {
			continue
		}
		if err := os.Rename(filepath.Join(overlay, e.Name()), filepath.Join(old, e.Name())); err != nil {
			return nil, undo(err)
		}
		asideNames = append(asideNames, e.Name())
	}
	for _, e := range entries {
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(overlay, e.Name())); err != nil {
			return nil, undo(err)
		}
		inNames = append(inNames, e.Name())
	}
	os.RemoveAll(old)
	return &s, nil
}

// copier copies trees, keeping hard links as links.
type copier struct {
	links map[[2]uint64]string // (dev, ino) of a multiply linked file -> its copy
	root  bool
	files int
	bytes int64
}

func newCopier() *copier { return &copier{links: map[[2]uint64]string{}, root: os.Geteuid() == 0} }

func (c *copier) copy(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: src, Err: err}
	}
	mode := st.Mode & unix.S_IFMT
	if mode != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, ok := c.links[key]; ok {
			return os.Link(first, dst)
		}
		c.links[key] = dst
	}
	switch mode {
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := c.copy(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case unix.S_IFREG:
		if err := c.copyFile(src, dst); err != nil {
			return err
		}
		c.files++
		c.bytes += st.Size
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("copy %s: a device node (an overlay whiteout?) needs privilege to recreate: %w", src, err)
		}
	case unix.S_IFSOCK:
		return nil // a socket is not data
	default:
		return fmt.Errorf("copy %s: unknown file type %o", src, mode)
	}
	return c.attrs(src, dst, &st)
}

func (c *copier) copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil { // copy_file_range where the kernel can
		out.Close()
		return err
	}
	return out.Close()
}

// attrs copies owner, extended attributes, mode and times, in the order
// that keeps each (chown clears set-id bits; mode after it).
func (c *copier) attrs(src, dst string, st *unix.Stat_t) error {
	if c.root {
		if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if err := copyXattrs(src, dst); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs copies the extended attributes this process may read and set.
func copyXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		return nil // none, or a filesystem without them
	}
	buf := make([]byte, size)
	n, err := unix.Llistxattr(src, buf)
	if err != nil {
		return nil
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		vs, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			continue // not readable by us (trusted.* without privilege)
		}
		val := make([]byte, vs)
		if vs, err = unix.Lgetxattr(src, name, val); err != nil {
			continue
		}
		if err := unix.Lsetxattr(dst, name, val[:vs], 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("copy %s: xattr %s: %w", src, name, err)
		}
	}
	return nil
}
