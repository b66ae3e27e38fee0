package vmimage

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ulikunitz/xz"
)

// GuestModules are the kernel modules a neuron's guest loads before it
// mounts its disks, by name: virtio over MMIO, its block and console
// devices, ext4 and overlayfs. Their dependencies are added from
// modules.dep; built-in ones are skipped.
var GuestModules = []string{
	"virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console",
	"crc16", "mbcache", "jbd2", "crc32c_generic", "ext4", "overlay",
}

// LaterModules are loaded once the agent runs, in the background: vsock,
// Firecracker's channel, which a QEMU neuron's boot need not wait for.
var LaterModules = []string{"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"}

// Module is one kernel module to put in the initramfs.
type Module struct {
	Name string // as the kernel names it (dashes as underscores)
	Path string // under the modules directory, as modules.dep has it
}

// ResolveModules returns the modules named in want and everything they
// depend on, dependencies first, from modulesDir's modules.dep. A module
// built into the kernel (modules.builtin) needs nothing and is left out; an
// unknown one is an error.
func ResolveModules(modulesDir string, want []string) ([]Module, error) {
	deps, err := readModulesDep(filepath.Join(modulesDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modulesDir, "modules.builtin")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				builtin[moduleName(l)] = true
			}
		}
	}
	byName := map[string]string{}
	for path := range deps {
		byName[moduleName(path)] = path
	}
	var out []Module
	seen := map[string]bool{}
	var visit func(path string, chain []string) error
	visit = func(path string, chain []string) error {
		if seen[path] {
			return nil
		}
		for _, c := range chain {
			if c == path {
				return fmt.Errorf("modules: dependency loop through %s", path)
			}
		}
		for _, d := range deps[path] {
			if err := visit(d, append(chain, path)); err != nil {
				return err
			}
		}
		seen[path] = true
		out = append(out, Module{Name: moduleName(path), Path: path})
		return nil
	}
	for _, name := range want {
		name = strings.ReplaceAll(name, "-", "_")
		path, ok := byName[name]
		if !ok {
			if builtin[name] {
				continue
			}
			return nil, fmt.Errorf("modules: %s is neither a module in %s nor built into its kernel", name, modulesDir)
		}
		if err := visit(path, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readModulesDep parses "path: dep dep ..." lines.
func readModulesDep(file string) (map[string][]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("modules: %w (is the kernel's module tree installed?)", err)
	}
	defer f.Close()
	deps := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		path, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[path] = strings.Fields(rest)
	}
	return deps, sc.Err()
}

// moduleName is a module's name from its file path.
func moduleName(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.ReplaceAll(strings.TrimSuffix(base, ".ko"), "-", "_")
}

// LoadModule reads a module file ready for finit_module in a guest:
// decompressed (.ko.xz) and without its signature, which the guest kernel
// would otherwise verify at every boot (that halves module loading under
// TCG; unsigned modules load, the kernel only notes a taint).
func LoadModule(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasSuffix(path, ".ko.xz"):
		zr, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var out bytes.Buffer
		if _, err := out.ReadFrom(zr); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		b = out.Bytes()
	case strings.HasSuffix(path, ".ko"):
	default:
		return nil, fmt.Errorf("%s: only .ko and .ko.xz modules are supported", path)
	}
	if !bytes.HasPrefix(b, elfMagic) {
		return nil, fmt.Errorf("%s: not an ELF module", path)
	}
	return StripSignature(b), nil
}

// moduleSigMagic ends a signed module: ... signature, struct
// module_signature (12 bytes, the signature's length big-endian last), magic.
const moduleSigMagic = "~Module signature appended~\n"

// StripSignature returns module without its appended signature (the
// module itself when it has none).
func StripSignature(module []byte) []byte {
	if !bytes.HasSuffix(module, []byte(moduleSigMagic)) {
		return module
	}
	end := len(module) - len(moduleSigMagic)
	if end < 12 {
		return module
	}
	sigLen := int(binary.BigEndian.Uint32(module[end-4 : end]))
	cut := end - 12 - sigLen
	if cut <= 0 {
		return module
	}
	return module[:cut]
}
