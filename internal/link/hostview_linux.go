package link

import (
	"errors"
	"fmt"
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

// passedFS are the filesystems a passed file may live on: disk and memory
// filesystems whose reads and writes neither wait on a process (FUSE) nor
// check the caller's identity at each call (proc, sysfs).
var passedFS = map[int64]bool{
	unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.BTRFS_SUPER_MAGIC: true,
	unix.TMPFS_MAGIC: true, unix.OVERLAYFS_SUPER_MAGIC: true, unix.F2FS_SUPER_MAGIC: true,
	0x2fc12fc1: true, // ZFS
}

// checkPassed checks that f, a descriptor the agent passed (see
// protocol.CapPassFiles), is what this host may copy with: a regular file,
// on one of passedFS, open for writing (and not appending; one link, no
// set-id bits) when write is set, for reading otherwise. It returns the
// file's size.
func checkPassed(f *os.File, write bool) (int64, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, errNotRegular
	}
	// This host writes as root: into the new temporary file the agent
	// made, never one with other names (the upload would land there) or
	// set-id bits (a write by root keeps them).
	if write && (st.Nlink != 1 || st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0) {
		return 0, errNotTheTemp
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return 0, err
	}
	if !passedFS[int64(sf.Type)] {
		return 0, fmt.Errorf("a passed file on a filesystem of type %#x", sf.Type)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, err
	}
	acc := fl & unix.O_ACCMODE
	switch {
	case fl&(unix.O_PATH|unix.O_DIRECT) != 0:
		return 0, fmt.Errorf("a passed file opened with flags %#x", fl)
	case write && (acc == unix.O_RDONLY || fl&unix.O_APPEND != 0):
		return 0, errors.New("a passed file not open for writing in place")
	case !write && acc == unix.O_WRONLY:
		return 0, errors.New("a passed file not open for reading")
	}
	if fl&unix.O_NONBLOCK != 0 {
		if err := unix.SetNonblock(fd, false); err != nil {
			return 0, err
		}
	}
	return st.Size, nil
}

// copyFiles copies from src's offset to dst's, n bytes (to src's end when
// n < 0), kernel to kernel: copy_file_range, or sendfile between two
// filesystems, which copy_file_range refuses (EXDEV: a passed file lies on
// the neuron's overlay, the host's file on the host's disk). Go's own
// File.ReadFrom copies those through a 32 KiB buffer instead.
// errNoKernelCopy: neither applies, and nothing was copied.
func copyFiles(dst, src *os.File, n int64) (int64, error) {
	dfd, sfd := int(dst.Fd()), int(src.Fd())
	var total int64
	cfr := true
	for n < 0 || total < n {
		want := 1 << 30
		if n >= 0 {
			want = int(min(int64(want), n-total))
		}
		var m int
		var err error
		if cfr {
			m, err = unix.CopyFileRange(sfd, nil, dfd, nil, want, 0)
		} else {
			m, err = unix.Sendfile(dfd, sfd, nil, want)
		}
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err != nil && total == 0 && cfr && (err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EPERM):
			cfr = false
			continue
		case err != nil && total == 0 && !cfr && (err == unix.EINVAL || err == unix.ENOSYS):
			return 0, errNoKernelCopy
		case err != nil:
			return total, err
		case m == 0:
			return total, nil
		}
		total += int64(m)
	}
	return total, nil
}

// reserveMin is the smallest copy whose blocks are reserved before it.
const reserveMin = 1 << 20

// reserveBlocks allocates the blocks of f from off for size bytes about to be
// written there, keeping its size, so that they are not left for delayed
// allocation: on ext4 a rename over an existing file starts the writeback
// of a file's blocks still to allocate (auto_da_alloc), which for 64 MiB
// cost more than the copy itself. Blocks allocated up front are not
// flushed there; the data are written back as any file's are (a copy
// that must survive a crash asks for a sync, as with any file). A
// filesystem that cannot allocate ahead is filled as before.
func reserveBlocks(f *os.File, off, size int64) {
	if size >= reserveMin {
		unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, size)
	}
}
