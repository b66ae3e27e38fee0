//go:build linux

// Package disk gives a neuron's data a filesystem of its own, of a fixed
// size, so that a neuron cannot fill the host's disk: a sparse ext4 image
// in the neuron's overlay directory, loop-mounted by the host (as root)
// with nosuid and nodev at overlays/<id>/disk, where the mode keeps what
// the neuron writes. Writing past it fails inside with ENOSPC. The image
// and its record are host records (dot names: never in a snapshot of the
// neuron's files).
//
//	overlays/<id>/.disk       the ceiling, in bytes
//	overlays/<id>/.disk.img   the image (sparse: it takes what is written)
//	overlays/<id>/disk/       its mount point
package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// Min is the smallest ceiling.
const Min = vmimage.MinOverlaySize

const (
	recordName = ".disk"
	imageName  = ".disk.img"
	mountName  = "disk"
)

// Dir is where neuron id's data lives when it has a disk of its own.
func Dir(lay layout.Layout, id string) string { return filepath.Join(lay.OverlayDir(id), mountName) }

func image(lay layout.Layout, id string) string { return filepath.Join(lay.OverlayDir(id), imageName) }
func record(lay layout.Layout, id string) string {
	return filepath.Join(lay.OverlayDir(id), recordName)
}

// Size returns the recorded ceiling of neuron id (false: it has no disk
// of its own).
func Size(lay layout.Layout, id string) (int64, bool) {
	b, err := os.ReadFile(record(lay, id))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n > 0
}

// Supported says whether this process can give neurons a disk of their
// own (nil), or why not: it must be root, to attach loop devices and
// mount them, and have mkfs.ext4.
func Supported() error {
	if os.Geteuid() != 0 {
		return errors.New("a disk of its own is a loop-mounted filesystem, which only root may mount (as another user, a neuron's writes have no ceiling but the home's filesystem)")
	}
	if _, err := vmimage.Mkfs(); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices here (/dev/loop-control: %v)", err)
	}
	return nil
}

// Ensure gives neuron id a disk of size bytes: makes it when it has none,
// grows it (resize2fs, unmounted) when size is larger, and refuses to
// shrink it. It does not mount it.
func Ensure(ctx context.Context, lay layout.Layout, id string, size int64) error {
	if size < Min {
		return fmt.Errorf("a disk of %d bytes is too small (at least %d MiB)", size, Min>>20)
	}
	have, ok := Size(lay, id)
	switch {
	case ok && size == have:
		return nil
	case ok && size < have:
		return fmt.Errorf("neuron %s has a disk of %d MiB: a disk is never made smaller (%d MiB asked); destroy it with --wipe for a new one", id, have>>20, size>>20)
	case ok:
		if err := Unmount(lay, id); err != nil { // the neuron is not running: nothing holds it
			return err
		}
		if err := vmimage.GrowDisk(ctx, image(lay, id), size); err != nil {
			return fmt.Errorf("growing the disk of %s to %d MiB: %w", id, size>>20, err)
		}
	default:
		if err := makeImage(ctx, image(lay, id), size); err != nil {
			return err
		}
	}
	return store.WriteFileAtomic(record(lay, id), []byte(strconv.FormatInt(size, 10)+"\n"), 0o600)
}

// makeImage makes a sparse ext4 image of size bytes at img: a 4 MiB
// journal and inode tables left to be initialised as they are used, so a
// new disk takes about 8 MiB of the host's whatever its size.
func makeImage(ctx context.Context, img string, size int64) error {
	mkfs, err := vmimage.Mkfs()
	if err != nil {
		return err
	}
	tmp := img + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		out, merr := exec.CommandContext(ctx, mkfs, "-q", "-F", "-L", "cortex-disk", "-m", "0", "-J", "size=4",
			"-E", "discard,lazy_itable_init=1", tmp).CombinedOutput()
		if merr != nil {
			err = fmt.Errorf("mkfs.ext4: %v: %s", merr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, img)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Mounted reports whether neuron id's disk is mounted at Dir.
func Mounted(lay layout.Layout, id string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(Dir(lay, id), &st) != nil || unix.Lstat(lay.OverlayDir(id), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Mount mounts neuron id's disk at Dir (nosuid, nodev) unless it is
// mounted already. The loop device detaches itself when it is unmounted.
func Mount(lay layout.Layout, id string) error {
	if Mounted(lay, id) {
		return nil
	}
	dir := Dir(lay, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dev, err := attach(image(lay, id))
	if err != nil {
		return fmt.Errorf("the disk of %s: %w", id, err)
	}
	defer dev.Close() // the mount holds the device; autoclear detaches it at the unmount
	if err := unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mounting the disk of %s: %w", id, err)
	}
	return nil
}

// attach binds a free loop device to the image, with autoclear.
func attach(img string) (*os.File, error) {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg); err != nil {
			dev.Close()
			if errors.Is(err, unix.EBUSY) {
				continue // taken meanwhile by another process
			}
			return nil, fmt.Errorf("attaching %s: %w", img, err)
		}
		return dev, nil
	}
	return nil, errors.New("no loop device stayed free")
}

// Unmount unmounts neuron id's disk if it is mounted (the loop device goes
// with it).
func Unmount(lay layout.Layout, id string) error {
	if !Mounted(lay, id) {
		return nil
	}
	if err := unix.Unmount(Dir(lay, id), 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			// Still held (a process of the neuron on its way out):
			// detach now, freed when the last user lets go.
			return unix.Unmount(Dir(lay, id), unix.MNT_DETACH)
		}
		return fmt.Errorf("unmounting the disk of %s: %w", id, err)
	}
	return nil
}

// Provide gives neuron id, about to start, the disk its options ask for
// and mounts it; it returns the ceiling in force (0: none). asked is the
// ceiling the create named (0: none named), dflt the home's default,
// hasData whether the neuron has data outside a disk of its own already.
//   - A neuron with a disk keeps it (grown when more is asked; never
//     shrunk).
//   - A ceiling asked for where none can be had (not root, no loop
//     devices) fails: UnenforceableError, never silently dropped; so does
//     one asked for data that is not on a disk of its own.
//   - The default applies to a new neuron where a disk can be had, and is
//     left out elsewhere.
func Provide(ctx context.Context, lay layout.Layout, id, mode string, asked, dflt int64, hasData func() bool) (int64, error) {
	if have, ok := Size(lay, id); ok {
		if asked > 0 && asked != have {
			if err := Ensure(ctx, lay, id, asked); err != nil { // grows, or refuses to shrink
				return 0, &sandbox.InvalidError{Reason: err.Error()}
			}
			have = asked
		}
		return have, Mount(lay, id)
	}
	size := asked
	if asked > 0 {
		if err := Supported(); err != nil {
			return 0, &sandbox.UnenforceableError{Mode: mode, Policy: "a disk ceiling", Reason: err.Error()}
		}
		if hasData() {
			return 0, &sandbox.InvalidError{Reason: fmt.Sprintf("neuron %s's data is not on a disk of its own (it was made without a ceiling): "+
				"a disk ceiling takes effect for a new neuron (destroy it with --wipe first)", id)}
		}
	} else if dflt > 0 && Supported() == nil && !hasData() {
		size = dflt
	}
	if size == 0 {
		return 0, nil
	}
	if size < Min {
		return 0, &sandbox.InvalidError{Reason: fmt.Sprintf("a disk ceiling of %d bytes is too small (at least %d MiB)", size, Min>>20)}
	}
	if err := Ensure(ctx, lay, id, size); err != nil {
		return 0, err
	}
	return size, Mount(lay, id)
}
