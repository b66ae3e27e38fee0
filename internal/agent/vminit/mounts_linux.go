package vminit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// Mount points inside the initramfs while it is still the root.
const (
	lowerDir = "/lower"   // the read-only root disk
	diskDir  = "/disk"    // the overlay disk: upper/ and work/
	newRoot  = "/newroot" // the overlayfs that becomes /
)

type mountSpec struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	mode                   os.FileMode
}

func mountAll(specs []mountSpec) error {
	for _, m := range specs {
		if err := os.MkdirAll(m.target, m.mode); err != nil {
			return fmt.Errorf("mount: %w", err)
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount: %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

// mountEarly mounts what the initramfs needs to find its disks.
func mountEarly() error {
	return mountAll([]mountSpec{
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755},
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
	})
}

// disks are the block devices the guest boots from.
type disks struct {
	root, overlay, config string // /dev/vdX
}

// findDisks finds the disks by their virtio serial numbers, waiting up to
// d for the virtio-blk driver to have probed them; without serials, vda,
// vdb and vdc are taken in that order.
func findDisks(d time.Duration) (disks, error) {
	deadline := time.Now().Add(d)
	for {
		got, all := scanDisks()
		if got.root != "" && got.overlay != "" && got.config != "" {
			return got, nil
		}
		if len(all) >= 3 && got.root == "" && got.overlay == "" && got.config == "" {
			return disks{root: "/dev/" + all[0], overlay: "/dev/" + all[1], config: "/dev/" + all[2]}, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("disks: want serials %s, %s and %s (or three unnamed disks); found %v",
				boot.SerialRoot, boot.SerialOverlay, boot.SerialConfig, all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scanDisks() (disks, []string) {
	var got disks
	entries, _ := os.ReadDir("/sys/block")
	var all []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "vd") {
			continue
		}
		all = append(all, name)
		b, _ := os.ReadFile(filepath.Join("/sys/block", name, "serial"))
		switch strings.TrimSpace(string(b)) {
		case boot.SerialRoot:
			got.root = "/dev/" + name
		case boot.SerialOverlay:
			got.overlay = "/dev/" + name
		case boot.SerialConfig:
			got.config = "/dev/" + name
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if len(all[i]) != len(all[j]) {
			return len(all[i]) < len(all[j])
		}
		return all[i] < all[j]
	})
	return got, all
}

// readConfig reads the JSON on the config disk.
func readConfig(dev string) (boot.VMConfig, error) {
	var cfg boot.VMConfig
	f, err := os.Open(dev)
	if err != nil {
		return cfg, fmt.Errorf("config disk: %w", err)
	}
	defer f.Close()
	buf := make([]byte, boot.VMConfigMax)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return cfg, fmt.Errorf("config disk %s: %w", dev, err)
	}
	if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
		n = i
	}
	// Tolerant within the boot contract's major version (unknown fields of
	// a newer host's minor are ignored), refused with both versions named
	// beyond it.
	cfg, err = boot.DecodeVMConfig(buf[:n])
	if err != nil {
		return cfg, fmt.Errorf("config disk %s: %w", dev, err)
	}
	if err := ids.Validate(cfg.ID); err != nil {
		return cfg, fmt.Errorf("config disk: %w", err)
	}
	if !filepath.IsAbs(cfg.Workdir) {
		return cfg, fmt.Errorf("config disk: workdir %q is not absolute", cfg.Workdir)
	}
	return cfg, nil
}

// switchRoot mounts the root disk read-only and the overlay disk writable,
// joins them in an overlayfs and makes it / (what switch_root does: the
// initramfs cannot be pivoted away, so the new root is moved onto it).
func switchRoot(d disks) error {
	err := mountAll([]mountSpec{
		// noload: a read-only device's journal cannot be replayed (and a
		// root disk made by mkfs.ext4 has nothing to replay).
		{d.root, lowerDir, "ext4", unix.MS_RDONLY, "noload", 0o755},
		{d.overlay, diskDir, "ext4", unix.MS_NOATIME, "", 0o755},
	})
	if err != nil {
		return err
	}
	upper, work := filepath.Join(diskDir, "upper"), filepath.Join(diskDir, "work")
	for _, p := range []string{upper, work} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("overlay disk: %w", err)
		}
	}
	if err := mountAll([]mountSpec{{"overlay", newRoot, "overlay", 0,
		"lowerdir=" + lowerDir + ",upperdir=" + upper + ",workdir=" + work, 0o755}}); err != nil {
		return err
	}
	for _, m := range []string{"/dev", "/proc", "/sys"} {
		target := newRoot + m
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("mount: %w", err)
		}
		if err := unix.Mount(m, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("mount: moving %s: %w", m, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("mount: moving the new root onto /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// mountLate mounts what programs expect in the new root.
func mountLate() error {
	return mountAll([]mountSpec{
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755", 0o755},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666", 0o755},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o755},
	})
}

// pidsCgroup makes the cgroup the agent starts in, with pids.max set when
// pids > 0, and returns it open (for CLONE_INTO_CGROUP).
func pidsCgroup(pids int) (*os.File, error) {
	if pids <= 0 {
		return nil, nil
	}
	const root = "/sys/fs/cgroup"
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		return nil, fmt.Errorf("resource limit: enabling the pids controller: %w", err)
	}
	dir := filepath.Join(root, "neuron")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("resource limit: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(pids)), 0); err != nil {
		return nil, fmt.Errorf("resource limit: pids.max %d: %w", pids, err)
	}
	return os.Open(dir)
}
