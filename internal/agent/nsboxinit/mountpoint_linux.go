package nsboxinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// mountPoint opens the mount point rel (a path inside the neuron's root,
// at the host path root) as an O_PATH descriptor, one element at a time,
// never following a symlink: the root is the neuron's overlay, whose
// upper layer the neuron wrote, and PID 1 — root's owner on the host — must
// not be led anywhere by a link there (a /proc or /usr/local made a link to
// a host directory would have PID 1 make directories there). A missing
// element is made; an element that is a symlink or a file where a
// directory must be is replaced by an empty directory (a mount point is
// the host's, whatever the neuron put there), and logf says so. With file
// set, the last element is a file (a bind of a file). Mount on the
// returned descriptor's /proc/self/fd path.
func mountPoint(root, rel string, file bool, logf func(string, ...any)) (*os.File, error) {
	cur, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mount: %s: %w", root, err)
	}
	parts := strings.FieldsFunc(rel, func(r rune) bool { return r == '/' })
	for i, name := range parts {
		if name == "." || name == ".." {
			unix.Close(cur)
			return nil, fmt.Errorf("mount: %q is not a plain path", rel)
		}
		last := i == len(parts)-1
		next, err := entry(cur, name, last && file)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			// A link, or a file where a directory must be: replaced.
			if rerr := replace(cur, name); rerr != nil {
				unix.Close(cur)
				return nil, fmt.Errorf("mount: /%s: %w", filepath.Join(parts[:i+1]...), rerr)
			}
			if logf != nil {
				logf("mount point /%s was a link or a file in the neuron's root: replaced by an empty directory", filepath.Join(parts[:i+1]...))
			}
			next, err = entry(cur, name, last && file)
		}
		unix.Close(cur)
		if err != nil {
			return nil, fmt.Errorf("mount: /%s: %w", filepath.Join(parts[:i+1]...), err)
		}
		cur = next
	}
	return os.NewFile(uintptr(cur), root+"/"+rel), nil
}

// entry opens directory (or, with file, regular file) name in dir as
// O_PATH, making it if it is missing; a symlink fails with ELOOP.
func entry(dir int, name string, file bool) (int, error) {
	flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !file {
		flags |= unix.O_DIRECTORY
	}
	for range 3 {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err == nil {
			if file {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
					unix.Close(fd)
					return -1, unix.ENOTDIR
				}
			}
			return fd, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, err // ELOOP: a symlink; ENOTDIR: a file
		}
		if file {
			nfd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err == nil {
				unix.Close(nfd)
			} else if !errors.Is(err, unix.EEXIST) {
				return -1, err
			}
		} else if err := unix.Mkdirat(dir, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
	}
	return -1, unix.ENOENT
}

// replace removes name from dir (a link or a file; never a directory's
// contents) to make room for a mount point.
func replace(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if errors.Is(err, unix.EISDIR) {
		return errors.New("is a directory where a file must be")
	}
	return err
}

// procPath names a descriptor for calls that take a path (mount).
func procPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }
