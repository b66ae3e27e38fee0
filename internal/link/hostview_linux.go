package link

import (
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// beneath is openat2's confinement: nothing outside the view's directory.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openRegular opens rel beneath the view's root with flags (and, with
// noLinks, through no symlink at all): a regular file or nothing, never
// blocking on a FIFO. The file it returns blocks as usual (os.File would
// otherwise park its reads and writes on the poller).
func (v *HostView) openRegular(rel string, flags int, noLinks bool) (*os.File, error) {
	resolve := uint64(beneath)
	if noLinks {
		resolve |= unix.RESOLVE_NO_SYMLINKS
	}
	root, err := unix.Open(v.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC), Resolve: resolve})
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, errNotRegular
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path.Join(v.Neuron, rel)), nil
}
