package nsboxinit

import (
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// imageBundle is where Debian-like images keep their roots as one file.
const imageBundle = "etc/ssl/certs/ca-certificates.crt"

// installCA puts the secrets' authority and the bundle the neuron trusts
// into boot.EgressCADir, on the /run tmpfs just mounted (nothing of the
// neuron has run in it), and binds the bundle, read-only, over the image's
// bundle when that is a regular file. Everything is reached by descriptor
// beneath root, without following a link: the root is the neuron's.
func installCA(root string, ca, bundle []byte) error {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("secrets: %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	dir := strings.TrimPrefix(boot.EgressCADir, "/")
	runFD, err := beneath(rootFD, path.Dir(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("secrets: /run: %w", err)
	}
	err = unix.Mkdirat(runFD, path.Base(dir), 0o755)
	unix.Close(runFD)
	if err != nil {
		return fmt.Errorf("secrets: %s: %w", boot.EgressCADir, err)
	}
	write := func(inside string, data []byte) error {
		fd, err := beneath(rootFD, strings.TrimPrefix(inside, "/"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
		if err != nil {
			return fmt.Errorf("secrets: %s: %w", inside, err)
		}
		defer unix.Close(fd)
		unix.Fchmod(fd, 0o644)
		for len(data) > 0 {
			n, err := unix.Write(fd, data)
			if err != nil {
				return fmt.Errorf("secrets: %s: %w", inside, err)
			}
			data = data[n:]
		}
		return nil
	}
	if err := write(boot.EgressCAFile, ca); err != nil {
		return err
	}
	if err := write(boot.EgressCABundle, bundle); err != nil {
		return err
	}
	target, err := beneath(rootFD, imageBundle, unix.O_PATH)
	if err != nil {
		return nil // no bundle there (or a link): the variables still say where ours is
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if unix.Fstat(target, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	src, err := beneath(rootFD, strings.TrimPrefix(boot.EgressCABundle, "/"), unix.O_PATH)
	if err != nil {
		return fmt.Errorf("secrets: %s: %w", boot.EgressCABundle, err)
	}
	defer unix.Close(src)
	if err := unix.Mount(fdPath(src), fdPath(target), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("secrets: binding the bundle over /%s: %w", imageBundle, err)
	}
	// The new mount, reached again beneath the root, made read-only.
	bound, err := beneath(rootFD, imageBundle, unix.O_PATH)
	if err != nil {
		return fmt.Errorf("secrets: /%s: %w", imageBundle, err)
	}
	defer unix.Close(bound)
	if err := unix.Mount("", fdPath(bound), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("secrets: making /%s read-only: %w", imageBundle, err)
	}
	return nil
}

// beneath opens rel beneath the directory dirFD, following no link at
// all and never leaving it.
func beneath(dirFD int, rel string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o644 // openat2 refuses a mode without O_CREAT
	}
	return unix.Openat2(dirFD, rel, how)
}

func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }
