package store

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// DataRanges returns the (offset, length) ranges of the open file fd, of
// size bytes, that hold data (SEEK_DATA, SEEK_HOLE): a sparse file's holes
// are left out; a filesystem that cannot say gives the rest of the file
// as one range. A file that is all hole has none.
func DataRanges(fd int, size int64) [][2]int64 {
	var out [][2]int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return append(out, [2]int64{off, size - off}) // no SEEK_DATA here: all of it
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			hole = size
		}
		hole = min(hole, size)
		if hole > data {
			out = append(out, [2]int64{data, hole - data})
		}
		off = hole
	}
	return out
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Xattrs returns the extended attributes of the open file fd (a directory
// or a regular file; overlayfs keeps opaque-directory marks there) that
// this process may read; none on a filesystem without them.
func Xattrs(fd int) []Xattr {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, size)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil
	}
	var out []Xattr
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		vs, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			continue // not readable by us (trusted.* without privilege)
		}
		val := make([]byte, vs)
		if vs, err = unix.Fgetxattr(fd, name, val); err != nil {
			continue
		}
		out = append(out, Xattr{Name: name, Value: val[:vs]})
	}
	return out
}
