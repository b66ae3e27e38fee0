package vmimage

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// CPIOWriter writes a newc ("070701") cpio archive, the format the kernel
// unpacks as an initramfs (Documentation/driver-api/early-userspace/
// buffer-format.rst). The kernel creates no parent directories: add them
// before what they hold. Owners are root and times zero, so the same input
// gives the same archive.
type CPIOWriter struct {
	w    *bufio.Writer
	n    int64 // bytes written so far
	ino  uint32
	rdev [2]uint32 // of the device node being written
	err  error
	done bool
}

// NewCPIOWriter starts an archive on w.
func NewCPIOWriter(w io.Writer) *CPIOWriter { return &CPIOWriter{w: bufio.NewWriterSize(w, 1<<20)} }

// Dir adds a directory.
func (c *CPIOWriter) Dir(name string, perm fs.FileMode) error {
	return c.entry(name, 0o040000|uint32(perm.Perm()), nil)
}

// File adds a regular file holding data.
func (c *CPIOWriter) File(name string, perm fs.FileMode, data []byte) error {
	return c.entry(name, 0o100000|uint32(perm.Perm()), data)
}

// CharDev adds a character device node (the kernel opens /dev/console
// before it runs /init, so an initramfs carries that node itself).
func (c *CPIOWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	c.rdev = [2]uint32{major, minor}
	defer func() { c.rdev = [2]uint32{} }()
	return c.entry(name, 0o020000|uint32(perm.Perm()), nil)
}

// Symlink adds a symbolic link to target.
func (c *CPIOWriter) Symlink(name, target string) error {
	return c.entry(name, 0o120777, []byte(target))
}

// Close writes the trailer and flushes; the underlying writer stays open.
func (c *CPIOWriter) Close() error {
	if c.done {
		return c.err
	}
	c.done = true
	c.record("TRAILER!!!", 0, 0, nil)
	if c.err == nil {
		c.err = c.w.Flush()
	}
	return c.err
}

func (c *CPIOWriter) entry(name string, mode uint32, data []byte) error {
	if c.done {
		return errors.New("cpio: write after close")
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" || strings.ContainsRune(name, 0) || name == ".." || strings.HasPrefix(name, "../") ||
		strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") {
		return fmt.Errorf("cpio: bad entry name %q", name)
	}
	if int64(len(data)) > 1<<32-1 {
		return fmt.Errorf("cpio: %s is too large for newc (%d bytes)", name, len(data))
	}
	c.ino++
	c.record(name, c.ino, mode, data)
	return c.err
}

// record writes a header, the NUL-terminated name and the data, each of
// name and data padded to a multiple of four bytes.
func (c *CPIOWriter) record(name string, ino, mode uint32, data []byte) {
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	c.write([]byte(fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, c.rdev[0], c.rdev[1], len(name)+1, 0)))
	c.write([]byte(name + "\x00"))
	c.align()
	c.write(data)
	c.align()
}

func (c *CPIOWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(p)
	c.n += int64(n)
}

func (c *CPIOWriter) align() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}
