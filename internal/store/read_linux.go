package store

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// ReadFile is os.ReadFile for the small records a command reads for each
// neuron (its state, its mode, its agent's /proc stat), without what an
// *os.File costs each time: registering with the poller (four fcntl calls
// and an epoll_ctl for a regular file), a cleanup and an fstat. About
// 40% less time a file on the machines measured (docs/benchmarks.md,
// "CLI"). Like os.ReadFile it follows symbolic links, reads to the end and
// returns *fs.PathError errors, so errors.Is(err, fs.ErrNotExist) holds
// for a missing file.
func ReadFile(path string) ([]byte, error) {
	fd, err := open(path, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
	}
}

// ReadRecord reads a small record the host keeps where what is not the
// host's may also write (a neuron's overlay, where an import unpacks):
// never through a symbolic link, a regular file only (a FIFO or a device
// would block or never end), and at most max bytes, or an error.
func ReadRecord(path string, max int) ([]byte, error) {
	fd, err := open(path, unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	if st.Size > int64(max) {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%d bytes, more than the %d a record may hold", st.Size, max)}
	}
	buf := make([]byte, max+1)
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if k == 0 {
			break
		}
		n += k
	}
	if n > max {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("more than the %d bytes a record may hold", max)}
	}
	return buf[:n], nil
}

// open opens path read-only with flags added, again when interrupted.
func open(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err != unix.EINTR {
			if err != nil {
				return -1, &fs.PathError{Op: "open", Path: path, Err: err}
			}
			return fd, nil
		}
	}
}
