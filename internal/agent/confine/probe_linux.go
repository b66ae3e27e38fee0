package confine

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
