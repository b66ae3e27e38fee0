package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// HostView is a directory of the neuron that this host sees too, because the
// backend bind-mounts it (docker mode's home) or because it is a host
// directory (process mode's workdir). Large files under it are copied by the
// host directly, with the kernel's copy (copy_file_range, sendfile), instead
// of through the channel. The agent still decides every path (it resolves
// it as the neuron sees it) and makes every file: an upload's temporary
// file is the agent's own (its uid, its mode, removed by the agent if the
// client goes away), the host only fills it, and the agent moves it into
// place. The host opens files with openat2 confined beneath Host (no
// symlink, ".." or mount point leads out) and only regular ones. Anything
// it cannot open that way goes through the channel as before: everything,
// on a host without openat2 (hostview_other.go).
type HostView struct {
	// Neuron is the directory as the neuron sees it (absolute, clean).
	Neuron string
	// Host is the same directory on this host.
	Host string
}

// directMin is the smallest file copied through a host view: below it one
// channel request is as fast and the agent's own checks apply unchanged.
const directMin = protocol.ChunkSize

// usable reports whether v is set.
func (v *HostView) usable() bool { return v != nil && v.Neuron != "" && v.Host != "" }

// rel returns p (as the neuron sees it, resolved) relative to the view, or
// false when p lies outside it.
func (v *HostView) rel(p string) (string, bool) {
	p = path.Clean(p)
	if !strings.HasPrefix(p, v.Neuron+"/") {
		return "", false
	}
	r := strings.TrimPrefix(p, v.Neuron+"/")
	return r, r != "" && r != "."
}

// openRead opens regular file rel beneath the view's root for reading.
func (v *HostView) openRead(rel string) (*os.File, error) {
	return v.openRegular(rel, unix.O_RDONLY, false)
}

// openTemp opens rel beneath the view's root for writing: the temporary
// file the agent has just made, inode ino. It must be a regular file
// reached through no link at all, that inode, with one link only; it is
// emptied.
func (v *HostView) openTemp(rel string, ino uint64) (*os.File, error) {
	f, err := v.openRegular(rel, unix.O_WRONLY|unix.O_NOFOLLOW, true)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || ino == 0 || st.Ino != ino || st.Nlink != 1 {
		f.Close()
		return nil, errNotTheTemp
	}
	// Emptied only when something wrote into it since the agent made it:
	// on ext4 a truncation to 0 also makes the close start the file's
	// writeback (auto_da_alloc), which doubled a 64 MiB upload's time.
	if st.Size != 0 {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

var errNotRegular = errors.New("not a regular file")

// errNotTheTemp: the file at an upload's temporary name is not the one the
// agent made.
var errNotTheTemp = errors.New("not the agent's temporary file")

// errNoKernelCopy: copyFiles cannot copy between these two files.
var errNoKernelCopy = errors.New("no kernel copy between these files")

// errFallback says the host view cannot do this copy and the channel must.
var errFallback = errors.New("not through the host view")

// copyInto writes first, then the rest of src, into f, the empty file an
// upload fills: an *os.File source goes kernel to kernel (copy_file_range
// or splice). The blocks of what src is known to hold are allocated first
// (reserve), and given back if it ends early. A cancelled ctx ends the
// copy at its next read.
func copyInto(ctx context.Context, f *os.File, first []byte, src io.Reader) (int64, error) {
	want := int64(len(first)) + knownLen(src)
	at, ok := atEnd(f) // the agent's file: at 0, unless it moved the offset it shares
	if ok {
		reserve(f, at, want)
	}
	n, err := copyAll(ctx, f, first, src)
	if ok && n < want {
		// The source ended early, or the copy failed: the blocks reserved
		// past what came go back.
		if terr := f.Truncate(at + n); err == nil {
			err = terr
		}
	}
	return n, err
}

// reserve is reserveBlocks; tests watch it.
var reserve = reserveBlocks

// Fresh marks a file its caller has just made, empty, for a copy to fill
// (cp's temporary file on the host): a copy out of a neuron into it
// allocates its blocks a step ahead of the data (reserve), and gives back
// what a copy cut short did not fill. Only such a file: a caller's other
// files (a shell's redirection of stdout, shared with other writers) are
// written to, never allocated or truncated.
type Fresh struct{ *os.File }

// reserveFresh reserves the blocks of the next n bytes written to w when
// it is a Fresh file.
func reserveFresh(w io.Writer, n int64) {
	if ff, ok := w.(Fresh); ok {
		if at, ok := atEnd(ff.File); ok {
			reserve(ff.File, at, n)
		}
	}
}

// knownLen is how many bytes src holds when that is known before reading
// it (bytes in memory, a regular file), else 0. A file counts no more than
// the blocks it has: a sparse file's holes reserve nothing where it goes.
func knownLen(src io.Reader) int64 {
	switch s := src.(type) {
	case *bytes.Reader:
		return int64(s.Len())
	case *os.File:
		var st unix.Stat_t
		if unix.Fstat(int(s.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return 0
		}
		off, err := s.Seek(0, io.SeekCurrent)
		if err != nil || off > st.Size {
			return 0
		}
		return min(st.Size-off, st.Blocks*512)
	}
	return 0
}

// atEnd returns where the next write to f goes when f is a regular file
// written at its end.
func atEnd(f *os.File) (int64, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	off, err := f.Seek(0, io.SeekCurrent)
	return off, err == nil && off == st.Size
}

func copyAll(ctx context.Context, f *os.File, first []byte, src io.Reader) (int64, error) {
	w, err := f.Write(first)
	n := int64(w)
	if err != nil {
		return n, err
	}
	switch sf := src.(type) {
	case *os.File: // kernel to kernel
		m, err := copyFiles(f, sf, -1)
		if err != errNoKernelCopy {
			return n + m, err
		}
	case *bytes.Reader:
		// Bytes in memory go in one write: 32 KiB pieces (io.Copy's
		// buffer) took twice as long for 64 MiB.
	default:
		src = ctxReader{ctx, src} // a source that may block
	}
	m, err := io.Copy(f, src)
	return n + m, err
}

// ctxReader fails its reads once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// hostError maps a host error on neuron path p onto the channel's codes.
func hostError(op, p string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOSPC, unix.EDQUOT, unix.EFBIG:
			return protocol.Errorf(protocol.CodeTooLarge, "%s %s: %v", op, p, errno)
		case unix.EACCES, unix.EPERM, unix.EROFS:
			return protocol.Errorf(protocol.CodePermission, "%s %s: %v", op, p, errno)
		case unix.EISDIR:
			return protocol.Errorf(protocol.CodeBadRequest, "%s %s: is a directory", op, p)
		}
	}
	// A source that failed (an upload cut short) is not a neuron error.
	return fmt.Errorf("%s %s: %w", op, p, err)
}
