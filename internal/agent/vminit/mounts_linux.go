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

// pidsCgroup makes the cgroups of the process ceiling, when pids > 0:
//
//	/sys/fs/cgroup/neuron            the agent (no ceiling)
//	/sys/fs/cgroup/neuron/commands   threaded; pids.max = pids + 1
//
// (the one is the agent's thread that starts commands, so that the
// commands have all of pids to themselves).
// It returns the first open (the agent starts in it, CLONE_INTO_CGROUP)
// and the second's cgroup.threads open for writing: the agent moves the
// one thread it starts every command from there (boot.SpawnCgroupFDFlag),
// so its commands, and all they start, count against the ceiling and its
// own threads do not. At the ceiling the kernel refuses new threads, and
// an agent counted there could be refused one it needed, which crashes a
// Go program: a fork bomb would take the agent, and the machine, down.
//
// The descriptor is opened here, by root, and the kernel checks a write
// to it with its opener's credentials: it can only move threads into the
// commands' cgroup, whoever holds it. Nothing under /sys/fs/cgroup is
// writable by the agent's user, so a command cannot move itself out.
func pidsCgroup(pids int) (agent, spawnThreads *os.File, err error) {
	if pids <= 0 {
		return nil, nil, nil
	}
	const root = "/sys/fs/cgroup"
	dir := filepath.Join(root, "neuron")
	commands := filepath.Join(dir, "commands")
	for _, step := range []struct{ path, value string }{
		{filepath.Join(root, "cgroup.subtree_control"), "+pids"},
		{dir, ""},
		{commands, ""},
		{filepath.Join(commands, "cgroup.type"), "threaded"},
		{filepath.Join(dir, "cgroup.subtree_control"), "+pids"},
		{filepath.Join(commands, "pids.max"), strconv.Itoa(pids + 1)},
	} {
		var err error
		if step.value == "" {
			if err = os.Mkdir(step.path, 0o755); errors.Is(err, os.ErrExist) {
				err = nil
			}
		} else {
			err = os.WriteFile(step.path, []byte(step.value), 0)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("resource limit: the process ceiling's cgroups: %w", err)
		}
	}
	// Threads are counted per user too, in every cgroup: RLIMIT_NPROC,
	// which the kernel sets from the guest's memory at boot (about 950
	// at 256 MiB), and the whole system's threads-max, about twice that.
	// The agent and its commands share a uid, so either would put the
	// agent back under the commands' ceiling, below pids.max: the ceiling
	// is pids.max alone. (The agent inherits this process's rlimit.)
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}); err != nil {
		return nil, nil, fmt.Errorf("resource limit: lifting RLIMIT_NPROC: %w", err)
	}
	if err := raiseThreadsMax(pids + 1024); err != nil {
		return nil, nil, fmt.Errorf("resource limit: %w", err)
	}
	if agent, err = os.Open(dir); err != nil {
		return nil, nil, fmt.Errorf("resource limit: %w", err)
	}
	if spawnThreads, err = os.OpenFile(filepath.Join(commands, "cgroup.threads"), os.O_WRONLY, 0); err != nil {
		agent.Close()
		return nil, nil, fmt.Errorf("resource limit: %w", err)
	}
	return agent, spawnThreads, nil
}

// raiseThreadsMax makes the kernel's threads-max at least n.
func raiseThreadsMax(n int) error {
	const path = "/proc/sys/kernel/threads-max"
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if cur, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && cur >= n {
		return nil
	}
	return os.WriteFile(path, []byte(strconv.Itoa(n)), 0)
}
