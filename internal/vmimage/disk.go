package vmimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// ConfigDiskMin is the smallest config disk made (the kernel's partition
// scan complains about tinier disks).
const ConfigDiskMin = 64 << 10

// DefaultOverlaySize is the size a neuron's overlay disk is made with. The
// file is sparse: it takes on the host only what the guest writes.
const DefaultOverlaySize = 8 << 30

// Mkfs finds mkfs.ext4 (e2fsprogs), which may live in /sbin, outside a
// user's PATH.
func Mkfs() (string, error) { return e2fsprogs("mkfs.ext4") }

// e2fsprogs finds one of e2fsprogs' programs, in PATH or /sbin.
func e2fsprogs(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/" + name, "/sbin/" + name} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (apt-get install e2fsprogs)", name)
}

// GrowDisk grows the ext4 image at path, which nothing has mounted or
// attached, to size bytes: the file, then the filesystem in it. The image
// must be one only a kernel wrote (a loop-mounted disk of a neuron), never
// a guest's raw disk.
func GrowDisk(ctx context.Context, path string, size int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if size < st.Size() {
		return fmt.Errorf("%s is %d bytes: a disk is never made smaller", path, st.Size())
	}
	e2fsck, err := e2fsprogs("e2fsck")
	if err != nil {
		return err
	}
	resize, err := e2fsprogs("resize2fs")
	if err != nil {
		return err
	}
	if err := os.Truncate(path, size); err != nil {
		return err
	}
	// resize2fs asks for a checked filesystem; e2fsck -p exits 1 when it
	// fixed something, which is not a failure.
	if out, err := exec.CommandContext(ctx, e2fsck, "-f", "-p", path).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 1 {
			return fmt.Errorf("e2fsck %s: %v: %s", path, err, bytes.TrimSpace(out))
		}
	}
	if out, err := exec.CommandContext(ctx, resize, path).CombinedOutput(); err != nil {
		return fmt.Errorf("resize2fs %s: %v: %s", path, err, bytes.TrimSpace(out))
	}
	return nil
}

func runMkfs(ctx context.Context, args ...string) error {
	bin, err := Mkfs()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// RootDisk makes a read-only root disk at out from the directory root with
// `mkfs.ext4 -d` (no loop mount, no root needed beyond reading the tree):
// sized to the tree plus room for the filesystem's own structures, without
// a journal (nothing ever writes to it). Owners and modes are kept as they
// are on the host.
func RootDisk(ctx context.Context, root, out string) error {
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("root disk: %s is not a directory", root)
	}
	bytes, inodes, err := treeSize(root)
	if err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	size := bytes + bytes/5 + int64(inodes)*256 + 32<<20
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	return writeAtomic(out, 0o644, func(f *os.File) error {
		if err := f.Truncate(size); err != nil {
			return err
		}
		return runMkfs(ctx, "-q", "-F", "-L", "cortex-root", "-O", "^has_journal", "-m", "0",
			"-N", strconv.Itoa(inodes+inodes/5+1024), "-d", root, f.Name())
	})
}

// treeSize adds up what a tree takes in 4 KiB blocks, and its entries.
func treeSize(root string) (int64, int, error) {
	var total int64
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += (info.Size() + 4095) &^ 4095
		if d.IsDir() {
			total += 4096
		}
		return nil
	})
	return total, n, err
}

// OverlayDisk makes a sparse ext4 disk of size bytes at path, the
// neuron's writable layer; one that exists is kept as it is.
func OverlayDisk(ctx context.Context, path string, size int64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if size < MinOverlaySize {
		return fmt.Errorf("overlay disk: %d bytes is too small (at least %d MiB)", size, MinOverlaySize>>20)
	}
	return writeAtomic(path, 0o600, func(f *os.File) error {
		if err := f.Truncate(size); err != nil {
			return err
		}
		// Discarding a file punches holes, which reads as zeroed inode
		// tables: the guest then has none to zero in the background.
		// A small journal: it is written whole at mkfs and copied with
		// every snapshot of the disk.
		return runMkfs(ctx, "-q", "-F", "-L", "cortex-overlay", "-m", "0", "-J", "size=16", "-E", "discard", f.Name())
	})
}

// MinOverlaySize is the smallest overlay disk (and disk ceiling) made.
const MinOverlaySize = 64 << 20

// SizedOverlayDisk gives a VM neuron the overlay disk its disk ceiling
// asks for and returns the ceiling in force (the disk's size: the guest
// can write no more, ENOSPC inside). asked is the ceiling the create named
// (0: none), dflt the size of a new disk otherwise. An existing disk
// keeps its size: the guest writes the raw image, so the host never runs
// a filesystem tool over it (e2fsck and resize2fs parsing a hostile image
// as root), and a disk is never made smaller.
func SizedOverlayDisk(ctx context.Context, path string, asked, dflt int64) (int64, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		size := asked
		if size == 0 {
			size = dflt
		}
		if size < MinOverlaySize {
			return 0, errdefs.Errorf(errdefs.Invalid, "a disk ceiling of %d bytes is too small (at least %d MiB)", size, MinOverlaySize>>20)
		}
		return size, OverlayDisk(ctx, path, size)
	case err != nil:
		return 0, err
	case asked == 0 || asked == st.Size():
		return st.Size(), nil
	case asked < st.Size():
		return 0, errdefs.Errorf(errdefs.Invalid, "the neuron's disk is %d MiB: a disk is never made smaller (%d MiB asked); destroy it with --wipe for a new one", st.Size()>>20, asked>>20)
	}
	return 0, errdefs.Errorf(errdefs.Invalid, "the neuron's disk is %d MiB and a VM's disk keeps the size it was made with (%d MiB asked): "+
		"its guest writes the raw image, which the host does not parse; copy its data out and make it again with --wipe", st.Size()>>20, asked>>20)
}

// ConfigDisk writes cfg as the guest reads it (boot.EncodeVMConfig): JSON,
// NUL-padded to whole 4 KiB blocks and at least ConfigDiskMin (the
// kernel's partition scan complains about tinier disks), owner-only (it
// holds the environment the operator granted, which may carry secrets).
func ConfigDisk(path string, cfg *boot.VMConfig) error {
	b, err := boot.EncodeVMConfig(cfg)
	if err != nil {
		return err
	}
	if len(b) >= boot.VMConfigMax {
		return errdefs.Errorf(errdefs.Invalid, "the neuron's configuration is %d bytes (limit %d): the environment is too large", len(b), boot.VMConfigMax)
	}
	padded := make([]byte, max(ConfigDiskMin, (len(b)+1+4095)&^4095))
	copy(padded, b)
	return writeAtomic(path, 0o600, func(f *os.File) error {
		_, err := f.Write(padded)
		return err
	})
}

// CopySparse copies the file src to dst keeping holes holes: a clone
// (reflink) where the filesystem has them, otherwise only the data extents
// (SEEK_DATA/SEEK_HOLE). dst is written beside itself and renamed into
// place.
func CopySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	return writeAtomic(dst, st.Mode().Perm(), func(out *os.File) error { return CopyInto(out, in, st.Size()) })
}

// CopyInto copies the first size bytes of in into the empty file out,
// keeping holes holes: a clone (reflink) where the filesystem has them,
// otherwise only the data extents (SEEK_DATA/SEEK_HOLE).
func CopyInto(out, in *os.File, size int64) error {
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	if err := out.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return copyRange(in, out, 0, size, buf) // no SEEK_DATA here: copy it all
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := copyRange(in, out, data, hole, buf); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

func copyRange(in, out *os.File, from, to int64, buf []byte) error {
	for off := from; off < to; {
		n := int64(len(buf))
		if to-off < n {
			n = to - off
		}
		r, err := in.ReadAt(buf[:n], off)
		if r > 0 {
			if _, werr := out.WriteAt(buf[:r], off); werr != nil {
				return werr
			}
			off += int64(r)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if r == 0 {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}
