//go:build linux

// Package hostfs is how host code touches a directory tree that a neuron
// can write, or whose shape a neuron decided: an overlay's upper layer
// while the neuron runs, a channel directory bound into it, a host
// directory a `cp` from a neuron fills. The neuron is hostile: between any
// two system calls it may swap a file for a symlink, a directory for a
// link to /root/.ssh, or rename entries around. So every operation here is
// relative to an open directory descriptor and takes one path element at a
// time, never follows a symlink (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), and
// checks what it opened with fstat on the descriptor, not by name. Only the
// directory a caller opens by path with Open is resolved normally: that
// path is the caller's own (a home directory, an operator's destination).
//
// The package is Linux-only, as the sandboxes are.
package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Dir is an open directory. Its methods take names of entries directly in
// it (single path elements, checked) and act on them without following a
// symlink.
type Dir struct {
	f    *os.File
	path string // for messages only; never used to resolve anything
}

// Open opens the directory at path, resolving it as the kernel does: the
// path is the caller's, not the neuron's.
func Open(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// OpenNoFollow opens the directory at path, failing if its last element is
// a symlink (the path up to it is the caller's).
func OpenNoFollow(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, notDirError("open", path, err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Path is the path d was opened as (for messages).
func (d *Dir) Path() string { return d.path }

// Fd is the directory's descriptor.
func (d *Dir) Fd() int { return int(d.f.Fd()) }

func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

// check refuses a name that is not a single path element.
func (d *Dir) check(op, name string) error {
	if err := protocol.CheckName(name); err != nil {
		return &fs.PathError{Op: op, Path: d.join(name), Err: fmt.Errorf("%w: %v", fs.ErrInvalid, err)}
	}
	return nil
}

// notDirError explains an open of a directory that found something else
// there: ELOOP (O_NOFOLLOW on a symlink) and ENOTDIR both mean "not a
// directory you may enter".
func notDirError(op, path string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return &fs.PathError{Op: op, Path: path, Err: ErrNotDir}
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// ErrNotDir: a name that should be a directory is something else (a
// symlink, a file). It is never followed.
var ErrNotDir = errors.New("exists and is not a directory (a symlink or a file), and is never followed")

// Sub opens the directory name in d; a symlink there is refused.
func (d *Dir) Sub(name string) (*Dir, error) {
	if err := d.check("open", name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(d.Fd(), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, notDirError("open", d.join(name), err)
	}
	return &Dir{f: os.NewFile(uintptr(fd), d.join(name)), path: d.join(name)}, nil
}

// MakeDir makes directory name in d with perm (unless it exists as a
// directory already) and opens it. Whatever else is there — a symlink
// above all — is refused, never entered.
func (d *Dir) MakeDir(name string, perm fs.FileMode) (*Dir, bool, error) {
	if err := d.check("mkdir", name); err != nil {
		return nil, false, err
	}
	created := true
	if err := unix.Mkdirat(d.Fd(), name, uint32(perm.Perm())); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return nil, false, &fs.PathError{Op: "mkdir", Path: d.join(name), Err: err}
		}
		created = false
	}
	sub, err := d.Sub(name)
	return sub, created, err
}

// Lstat describes name in d without following it.
func (d *Dir) Lstat(name string) (*unix.Stat_t, error) {
	if err := d.check("lstat", name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: d.join(name), Err: err}
	}
	return &st, nil
}

// OpenFile opens name in d with flags (O_NOFOLLOW, O_CLOEXEC and O_NOCTTY
// are added; O_NONBLOCK while opening, so a FIFO planted there cannot
// block it) and returns it with its fstat. Only a regular file is
// returned: anything else is refused after the open, by the descriptor's
// own type.
func (d *Dir) OpenFile(name string, flags int, perm fs.FileMode) (*os.File, *unix.Stat_t, error) {
	if err := d.check("open", name); err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(d.Fd(), name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, uint32(perm.Perm()))
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = ErrSymlink
		}
		return nil, nil, &fs.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, &fs.PathError{Op: "fstat", Path: d.join(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, nil, &fs.PathError{Op: "open", Path: d.join(name), Err: ErrNotRegular}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), d.join(name)), &st, nil
}

// ErrSymlink: a name that should be a file is a symlink, which is never
// followed.
var ErrSymlink = errors.New("is a symlink, which is never followed")

// ErrNotRegular: a name that should be a regular file is something else.
var ErrNotRegular = errors.New("is not a regular file")

// CreateTemp creates a new, empty file in d named prefix + a random
// suffix, mode perm, that did not exist before (O_EXCL: nothing planted at
// the name is opened), and returns it with its name.
func (d *Dir) CreateTemp(prefix string, perm fs.FileMode) (*os.File, string, error) {
	for range 100 {
		name := prefix + randomSuffix()
		if err := d.check("create", name); err != nil {
			return nil, "", err
		}
		f, _, err := d.OpenFile(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, perm)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, name, nil
	}
	return nil, "", &fs.PathError{Op: "create", Path: d.join(prefix + "*"), Err: fs.ErrExist}
}

// Rename renames old to new, both in d. A symlink at new is replaced, not
// followed (rename never follows its last element).
func (d *Dir) Rename(old, new string) error {
	return d.RenameTo(old, d, new)
}

// RenameTo renames old in d to new in to.
func (d *Dir) RenameTo(old string, to *Dir, new string) error {
	if err := d.check("rename", old); err != nil {
		return err
	}
	if err := to.check("rename", new); err != nil {
		return err
	}
	if err := unix.Renameat(d.Fd(), old, to.Fd(), new); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(old), New: to.join(new), Err: err}
	}
	return nil
}

// Symlink makes the symlink name in d pointing at target.
func (d *Dir) Symlink(target, name string) error {
	if err := d.check("symlink", name); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, d.Fd(), name); err != nil {
		return &fs.PathError{Op: "symlink", Path: d.join(name), Err: err}
	}
	return nil
}

// Readlink returns the target of symlink name in d.
func (d *Dir) Readlink(name string) (string, error) {
	if err := d.check("readlink", name); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.Fd(), name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: d.join(name), Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) > protocol.MaxTargetBytes {
			return "", &fs.PathError{Op: "readlink", Path: d.join(name), Err: unix.ENAMETOOLONG}
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Remove removes the file, symlink or empty directory name in d.
func (d *Dir) Remove(name string) error {
	if err := d.check("remove", name); err != nil {
		return err
	}
	err := unix.Unlinkat(d.Fd(), name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(d.Fd(), name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	return nil
}

// Names returns the names in d (not "." or ".."), in the order the
// directory gives them.
func (d *Dir) Names() ([]string, error) {
	if _, err := d.f.Seek(0, 0); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: d.path, Err: err}
	}
	names, err := d.f.Readdirnames(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: d.path, Err: err}
	}
	return names, nil
}

// Lchown sets the owner of name in d without following a symlink.
func (d *Dir) Lchown(name string, uid, gid int) error {
	if err := d.check("chown", name); err != nil {
		return err
	}
	if err := unix.Fchownat(d.Fd(), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chown", Path: d.join(name), Err: err}
	}
	return nil
}

// Fchown and Fchmod act on d itself.
func (d *Dir) Fchown(uid, gid int) error { return d.f.Chown(uid, gid) }

// Fchmod sets d's own mode.
func (d *Dir) Fchmod(mode fs.FileMode) error { return d.f.Chmod(mode) }

// Stat describes d itself (by its descriptor).
func (d *Dir) Stat() (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.Fd(), &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: d.path, Err: err}
	}
	return &st, nil
}

// ProcPath is a path that names entry name of d through the descriptor
// (/proc/self/fd/N/name): for the few calls that have no *at form (the
// l*xattr family). The kernel resolves the descriptor, not a path, and
// the l-calls do not follow name itself.
func (d *Dir) ProcPath(name string) (string, error) {
	if err := d.check("path", name); err != nil {
		return "", err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name), nil
}

// OpenBeneath opens rel (a relative path of one or more elements) beneath
// the directory root, refusing any symlink, "..", magic link or mount
// crossing on the way (openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV).
func OpenBeneath(root *Dir, rel string, flags int, perm fs.FileMode) (int, error) {
	rel = strings.TrimPrefix(filepath.Clean("/"+rel), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(root.Fd(), rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:    uint64(perm.Perm()),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = ErrSymlink
		}
		return -1, &fs.PathError{Op: "open", Path: filepath.Join(root.path, rel), Err: err}
	}
	return fd, nil
}

// SubBeneath opens directory rel beneath root (see OpenBeneath).
func SubBeneath(root *Dir, rel string) (*Dir, error) {
	fd, err := OpenBeneath(root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(root.path, rel)
	return &Dir{f: os.NewFile(uintptr(fd), p), path: p}, nil
}

// TrustedDir checks that only this user and root can change what path
// holds: path and every directory above it (links resolved) belong to this
// user or root, and one that others may write is sticky (/tmp), so no one
// else can put, swap or rename an entry there. A program this process
// runs from such a directory is the one it checked.
func TrustedDir(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return err
	}
	me := uint32(os.Geteuid())
	for dir := real; ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Lstat(dir, &st); err != nil {
			return err
		}
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("%s is not a directory", dir)
		case st.Uid != me && st.Uid != 0:
			return fmt.Errorf("%s belongs to uid %d, not to this user or root: another user could change what it holds", dir, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("%s can be written by others (mode %o) and is not sticky", dir, st.Mode&0o7777)
		}
		if dir == "/" {
			return nil
		}
	}
}

// TrustedFile checks, on what stat said of a file, that only this user and
// root can change it: a regular file that belongs to this user or root and
// that no one else can write.
func TrustedFile(st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("not a regular file")
	case st.Uid != uint32(os.Geteuid()) && st.Uid != 0:
		return fmt.Errorf("it belongs to uid %d, not to this user or root", st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("others can write it (mode %o)", st.Mode&0o777)
	}
	return nil
}
