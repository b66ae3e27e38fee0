package vminit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// loadModules loads every *.ko in dir, in the lexical order of their names
// (the initramfs builder numbers them in modules.dep order), each with the
// parameters params holds for it. Modules already loaded are fine.
func loadModules(dir string, params map[string]string) (int, error) {
	files, err := openModules(dir)
	if err != nil {
		return 0, err
	}
	return len(files), loadOpened(files, params)
}

// openModules opens the modules in dir, in load order: the ones loaded
// after the root is switched are opened before, while the initramfs is
// still in view.
func openModules(dir string) ([]*os.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".ko") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var files []*os.File
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("modules: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// loadOpened loads the opened modules in order and closes them.
func loadOpened(files []*os.File, params map[string]string) error {
	defer closeAll(files)
	for _, f := range files {
		name := filepath.Base(f.Name())
		if err := unix.FinitModule(int(f.Fd()), params[moduleOf(name)], 0); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("modules: loading %s: %w", name, err)
		}
	}
	return nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// moduleOf is the module name of a file called NN-name.ko.
func moduleOf(file string) string {
	base := strings.TrimSuffix(file, ".ko")
	if _, name, ok := strings.Cut(base, "-"); ok {
		base = name
	}
	return strings.ReplaceAll(base, "-", "_")
}
