package nsboxinit

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Probe checks, from inside fresh user and mount namespaces, that an
// overlay can be mounted from layers in dir (nsbox's self-check runs it as
// `cortex-agent probe DIR`).
func Probe(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr",
		filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	merged := filepath.Join(dir, "merged")
	if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if err := os.WriteFile(filepath.Join(merged, "probe"), []byte("ok"), 0o644); err != nil {
		return fmt.Errorf("writing through the overlay: %w", err)
	}
	return unix.Unmount(merged, 0)
}

// ProbeNetwork checks, from inside a fresh user namespace, that a network
// namespace can be made on one thread, its loopback brought up and a
// listener opened there: what PID 1 does for network egress (nsbox's
// self-check runs it as `cortex-agent probe-network`).
func ProbeNetwork() error {
	_, ln, err := newNetNS("127.0.0.1:0")
	if err != nil {
		return err
	}
	return ln.Close()
}
