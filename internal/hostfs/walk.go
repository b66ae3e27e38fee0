//go:build linux

package hostfs

import (
	"crypto/rand"
	"encoding/hex"
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
	cur := root
	for _, el := range strings.Split(rel, "/") {
		if el == "" || el == "." {
			continue
		}
		next, created, err := cur.MakeDir(el, perm)
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
