package firecracker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// Settings, from the environment.
const (
	// EnvFirecracker and EnvJailer name the binaries (default: found on PATH).
	EnvFirecracker = "NSYS_CORTEX_FIRECRACKER_BIN"
	EnvJailer      = "NSYS_CORTEX_JAILER_BIN"
	// EnvKernel, EnvInitrd and EnvRootDisk name the guest image's files
	// (default: images/vm/ under the home directory, where
	// `nsys-cortex image build --vm` puts them: vmlinux, rootfs.ext4 and
	// the newest initramfs-*.cpio).
	EnvKernel   = "NSYS_CORTEX_VM_KERNEL"
	EnvInitrd   = "NSYS_CORTEX_VM_INITRD"
	EnvRootDisk = "NSYS_CORTEX_VM_ROOTFS"
	// EnvChroot is where jails are made (default: jail/ under the home
	// directory, on the overlays' filesystem so disks are hard-linked).
	EnvChroot = "NSYS_CORTEX_FIRECRACKER_CHROOT"
	// EnvOverlaySize is the size of a new neuron's overlay disk, in bytes
	// or with a K, M, G suffix (default 8G; the file is sparse).
	EnvOverlaySize = "NSYS_CORTEX_VM_OVERLAY_SIZE"
	// EnvConsole=1 gives the guest a serial console whose output goes to
	// the neuron's log (for debugging boots; off by default, since a guest
	// could write to it without end).
	EnvConsole = "NSYS_CORTEX_FIRECRACKER_CONSOLE"
)

// Defaults.
const (
	// PinnedVersion is the Firecracker release whose API this backend
	// speaks (testdata/firecracker.yaml). A newer release of the same
	// major version accepts everything it sends; snapshots load only into
	// the release that made them.
	PinnedVersion = "1.10.1"
	// AgentVsockPort is the guest vsock port where the image's PID 1 takes
	// host connections to the agent, and CtlVsockPort its control port
	// (set the clock and reseed after a restore, power off): the guest's
	// defaults (internal/protocol/boot).
	AgentVsockPort = boot.DefaultVsockPort
	CtlVsockPort   = boot.DefaultCtlVsockPort
	// GuestCID is the guest's vsock context id (each VM has its own
	// device, so all may use the first free one).
	GuestCID = 3
	// DefaultMemory and DefaultCPUs shape a neuron that asks for no limits.
	DefaultMemory = 1 << 30
	DefaultCPUs   = 1
	// vmmOverhead is what the Firecracker process may use beyond guest
	// memory before its cgroup stops it (the VMM itself needs ~5 MiB;
	// device queues and page tables the rest).
	vmmOverhead       = 64 << 20
	defaultOverlay    = 8 << 30
	defaultCgroupRoot = "/sys/fs/cgroup"
	// ParentCgroup is the cgroup (under the v2 mount) neurons' VMs go in.
	ParentCgroup = "nsys-cortex"
	// Workspace is the workspace inside the VM, as in the qemu backend
	// (the agent runs as the unprivileged guest user, home vmguest.Home).
	Workspace = "/home/agent/workspace"
)

// Config says where the pieces of firecracker mode are.
type Config struct {
	Firecracker string // the firecracker binary ("" means look on PATH)
	Jailer      string // the jailer binary ("" means look on PATH)
	Kernel      string // the guest's vmlinux (ELF)
	Initrd      string // the initramfs with cortex-agent as /init
	RootDisk    string // the read-only root filesystem (ext4 image)
	ChrootBase  string // where the jailer makes jails
	CgroupRoot  string // where cgroup v2 is mounted
	KVMDevice   string // KVM's device node
	OverlaySize int64  // a new overlay disk's size (sparse)
	Console     bool   // a serial console, into the neuron's log
}

// ConfigFromEnv returns the configuration the environment gives, with
// defaults under lay.
func ConfigFromEnv(lay layout.Layout) (Config, error) {
	vm := filepath.Join(lay.ImagesDir(), "vm")
	c := Config{
		Firecracker: os.Getenv(EnvFirecracker),
		Jailer:      os.Getenv(EnvJailer),
		Kernel:      envOr(EnvKernel, filepath.Join(vm, "vmlinux")),
		Initrd:      envOr(EnvInitrd, newestInitramfs(vm)),
		RootDisk:    envOr(EnvRootDisk, filepath.Join(vm, "rootfs.ext4")),
		ChrootBase:  envOr(EnvChroot, filepath.Join(lay.Home, "jail")),
		CgroupRoot:  defaultCgroupRoot,
		KVMDevice:   "/dev/kvm",
		OverlaySize: defaultOverlay,
		Console:     os.Getenv(EnvConsole) == "1",
	}
	if s := os.Getenv(EnvOverlaySize); s != "" {
		n, err := ParseSize(s)
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", EnvOverlaySize, err)
		}
		c.OverlaySize = n
	}
	for _, p := range []*string{&c.Firecracker, &c.Jailer, &c.Kernel, &c.Initrd, &c.RootDisk, &c.ChrootBase} {
		if *p != "" && !filepath.IsAbs(*p) {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return Config{}, err
			}
			*p = abs
		}
	}
	return c, nil
}

// newestInitramfs is the image's most recent initramfs: vmimage names each
// initramfs-<agent hash>.cpio, for the agent binary it holds. (Connected to
// vmimage, the backend would ask it for the initramfs of its own agent.)
func newestInitramfs(dir string) string {
	matches, _ := filepath.Glob(filepath.Join(dir, "initramfs-*.cpio"))
	best, bestTime := filepath.Join(dir, "initramfs-<agent>.cpio"), int64(-1)
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.ModTime().UnixNano() > bestTime {
			best, bestTime = m, st.ModTime().UnixNano()
		}
	}
	return best
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ParseSize reads "8G", "512M", "1048576".
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("an empty size")
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with K, M or G)", s)
	}
	return n * mult, nil
}

// binaries resolves the firecracker and jailer paths: configured, or
// found on PATH.
func (c Config) binaries() (fc, jailer string, err error) {
	if fc, err = c.firecrackerBin(); err != nil {
		return "", "", err
	}
	jailer, err = c.jailerBin()
	return fc, jailer, err
}

func (c Config) firecrackerBin() (string, error) {
	return findBinary(c.Firecracker, "firecracker", EnvFirecracker)
}

func (c Config) jailerBin() (string, error) { return findBinary(c.Jailer, "jailer", EnvJailer) }

func findBinary(configured, name, env string) (string, error) {
	if configured != "" {
		if st, err := os.Stat(configured); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", env, configured)
		}
		return configured, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("no %s binary on PATH (install Firecracker v%s's release binaries, or set %s)", name, PinnedVersion, env)
	}
	return filepath.Abs(p)
}
