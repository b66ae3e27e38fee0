package vmimage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// PrepareModules writes the modules mods (in load order) into dir as the
// guest loads them: NN-name.ko, decompressed, signatures stripped. It
// returns the file names written.
func PrepareModules(modulesDir string, mods []Module, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for i, m := range mods {
		data, err := LoadModule(filepath.Join(modulesDir, m.Path))
		if err != nil {
			return nil, fmt.Errorf("modules: %w", err)
		}
		name := fmt.Sprintf("%02d-%s.ko", i, m.Name)
		if err := writeAtomic(filepath.Join(dir, name), 0o644, func(f *os.File) error {
			_, err := f.Write(data)
			return err
		}); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// Initramfs writes the guest's initramfs to out: the agent as /init, the
// prepared module files (PrepareModules) — modules names files under dir,
// and each goes to the same name under boot.VMModulesDir — and
// /dev/console. It is not compressed: the kernel unpacks it faster as it
// is, which counts under TCG.
func Initramfs(out, agent, dir string, modules []string) error {
	bin, err := os.ReadFile(agent)
	if err != nil {
		return fmt.Errorf("initramfs: the agent: %w", err)
	}
	if !bytes.HasPrefix(bin, elfMagic) {
		return fmt.Errorf("initramfs: %s is not an ELF executable", agent)
	}
	return writeAtomic(out, 0o644, func(f *os.File) error {
		w := NewCPIOWriter(f)
		for _, d := range []string{"dev", "proc", "sys", "run", boot.VMModulesDir, boot.VMLaterModulesDir} {
			if err := w.Dir(d, 0o755); err != nil {
				return err
			}
		}
		if err := w.CharDev("dev/console", 0o600, 5, 1); err != nil {
			return err
		}
		if err := w.File(boot.VMInitPath, 0o755, bin); err != nil {
			return err
		}
		for _, m := range modules {
			data, err := os.ReadFile(filepath.Join(dir, m))
			if err != nil {
				return fmt.Errorf("initramfs: %w", err)
			}
			if err := w.File(boot.VMModulesDir+"/"+filepath.ToSlash(m), 0o644, data); err != nil {
				return err
			}
		}
		return w.Close()
	})
}

// writeAtomic writes path through a temporary file beside it, renamed
// into place only when fill succeeded.
func writeAtomic(path string, perm os.FileMode, fill func(*os.File) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone after the rename
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
