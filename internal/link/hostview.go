package link

import (
	"crypto/rand"
	"encoding/hex"
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
// of through the channel: the agent's uid owns what is written, paths are
// first resolved by the agent (as the neuron sees them), then opened on the
// host with openat2 confined beneath Host (no symlink, ".." or mount point
// leads out), and a file is replaced by a rename, so a failed copy leaves the
// old content in place. Anything the host cannot open that way goes through
// the channel as before.
type HostView struct {
	// Neuron is the directory as the neuron sees it (absolute, clean).
	Neuron string
	// Host is the same directory on this host.
	Host string
	// Owner, when set, owns the files the host creates there (the agent's
	// uid in a container); nil leaves them to this process's uid.
	Owner *Owner
}

// directMin is the smallest file copied through a host view: below it one
// channel request is as fast and the agent's own checks apply unchanged.
const directMin = protocol.ChunkSize

// usable reports whether the host can create files there that the agent
// owns: as root, or as the agent's own uid.
func (v *HostView) usable() bool {
	if v == nil || v.Neuron == "" || v.Host == "" {
		return false
	}
	return v.Owner == nil || os.Geteuid() == 0 || os.Geteuid() == v.Owner.UID
}

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

// beneath is openat2's confinement: nothing outside the view's directory.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openDir opens directory rel (possibly ".") beneath the view's root.
func (v *HostView) openDir(rel string) (int, error) {
	root, err := unix.Open(v.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	if rel == "." {
		return unix.Dup(root)
	}
	return unix.Openat2(root, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
}

// openRead opens regular file rel beneath the view's root for reading; it
// never blocks on a FIFO and refuses anything but a regular file.
func (v *HostView) openRead(rel string) (*os.File, error) {
	root, err := unix.Open(v.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, errNotRegular
	}
	// Clear O_NONBLOCK: reads of a regular file never block anyway, and
	// os.File would otherwise park them on the poller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path.Join(v.Neuron, rel)), nil
}

var errNotRegular = errors.New("not a regular file")

// errFallback says the host view cannot do this copy and the channel must.
var errFallback = errors.New("not through the host view")

// writeDirect writes first and then the rest of src into the file at
// neuron path p (resolved, beneath the view) through a temporary file renamed
// over it. perm is the mode of a new file (0: keep the replaced file's, or
// 0644). It returns errFallback, having written nothing, when the host
// cannot open p's directory beneath the view.
func (v *HostView) writeDirect(p string, first []byte, src io.Reader, perm uint32) (int64, error) {
	rel, ok := v.rel(p)
	if !ok {
		return 0, errFallback
	}
	dir, err := v.openDir(path.Dir(rel))
	if err != nil {
		return 0, errFallback
	}
	defer unix.Close(dir)
	base := path.Base(rel)
	if perm == 0 {
		perm = 0o644
		var st unix.Stat_t
		if err := unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				perm = st.Mode & 0o7777 // keep the mode of the file being replaced
			case unix.S_IFDIR:
				return 0, protocol.Errorf(protocol.CodeBadRequest, "write %s: is a directory", p)
			default:
				return 0, errFallback // let the agent say what it is
			}
		}
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := "." + base + ".cortex-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm&0o777)
	if err != nil {
		return 0, errFallback
	}
	f := os.NewFile(uintptr(fd), path.Join(path.Dir(p), tmp))
	n, err := func() (int64, error) {
		if v.Owner != nil && os.Geteuid() == 0 {
			if err := unix.Fchown(fd, v.Owner.UID, v.Owner.GID); err != nil {
				return 0, err
			}
		}
		if perm&^0o777 != 0 { // setuid/setgid/sticky: not subject to O_CREAT's mode
			if err := unix.Fchmod(fd, perm&0o7777); err != nil {
				return 0, err
			}
		}
		w, err := f.Write(first)
		n := int64(w)
		if err != nil {
			return n, err
		}
		// An *os.File source goes kernel to kernel (copy_file_range or
		// splice); anything else through one buffer.
		m, err := io.Copy(f, src)
		return n + m, err
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, base)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return 0, hostError("write", p, err)
	}
	return n, nil
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
