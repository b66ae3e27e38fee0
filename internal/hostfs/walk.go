//go:build linux

package hostfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MakeDirs makes the directories of rel (a slash-separated relative path)
// one element at a time beneath root, like os.MkdirAll but never through a
// symlink: an element that exists as anything but a directory fails with
// ErrNotDir. made is called for each directory it creates (to give it an
// owner, say), with the directory it was made in. It returns the last
// directory, open.
func MakeDirs(root *Dir, rel string, perm fs.FileMode, made func(parent *Dir, name string) error) (*Dir, error) {
	return makeDirs(root, rel, perm, made, false)
}

// makeDirs is MakeDirs; with replaceLinks, a symlink where a directory
// belongs is removed and the directory made in its place.
func makeDirs(root *Dir, rel string, perm fs.FileMode, made func(parent *Dir, name string) error, replaceLinks bool) (*Dir, error) {
	cur := root
	for _, el := range strings.Split(rel, "/") {
		if el == "" || el == "." {
			continue
		}
		next, created, err := cur.MakeDir(el, perm)
		if errors.Is(err, ErrNotDir) && replaceLinks {
			if st, lerr := cur.Lstat(el); lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				if err = cur.Remove(el); err == nil {
					next, created, err = cur.MakeDir(el, perm)
				}
			}
		}
		if err == nil && created && made != nil {
			if err = made(cur, el); err != nil {
				next.Close()
			}
		}
		if cur != root {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
	if cur == root {
		return root.Reopen()
	}
	return cur, nil
}

// Reopen opens d again: a descriptor of its own, for a caller that keeps
// it after d is closed.
func (d *Dir) Reopen() (*Dir, error) {
	fd, err := unix.Openat(d.Fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
	}
	return &Dir{f: os.NewFile(uintptr(fd), d.path), path: d.path}, nil
}

// EnsureDir makes directory rel (slash-separated) beneath the directory
// at root — root is the caller's own path, rel is in a tree a neuron
// writes — never through a symlink, and, when chown is set, gives it to
// uid:gid (by its descriptor) unless it is theirs already. Directories it
// makes on the way get perm.
//
// A symlink where a directory belongs (the neuron replaced its workspace
// with one, say) is removed and the directory made in its place: the link
// held no data, and the neuron keeps what it pointed to. Anything else in
// the way (a file) fails with ErrNotDir, and nothing of it is lost.
func EnsureDir(root, rel string, perm fs.FileMode, uid, gid int, chown bool) error {
	r, err := Open(root)
	if err != nil {
		return err
	}
	defer r.Close()
	d, err := makeDirs(r, rel, perm, nil, true)
	if err != nil {
		return err
	}
	defer d.Close()
	if !chown {
		return nil
	}
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	return d.Fchown(uid, gid)
}

// WriteFile replaces name in d with data, atomically: a new file made
// with O_EXCL beside it, then renamed over it (a symlink at name is
// replaced, never followed).
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if err := d.check("write", name); err != nil {
		return err
	}
	f, tmp, err := d.CreateTemp("."+name+".", perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Rename(tmp, name)
	}
	if err != nil {
		d.Remove(tmp)
	}
	return err
}

// ReadFile returns the contents of regular file name in d, at most max
// bytes (a longer file is an error).
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	f, st, err := d.OpenFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size > max {
		return nil, &fs.PathError{Op: "read", Path: d.join(name), Err: unix.EFBIG}
	}
	b := make([]byte, st.Size)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return b[:n], nil
}
