package vmimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// EnvImage names the VM image directory neurons boot (default
// images/vm under the home).
const EnvImage = "NSYS_CORTEX_VM_IMAGE"

// Files of an image directory.
const (
	KernelFile   = "vmlinux"
	RootDiskFile = "rootfs.ext4"
	ModulesDir   = "modules"
	manifestFile = "image.json"
)

// DefaultDir is the image directory of a home: $NSYS_CORTEX_VM_IMAGE, or
// images/vm under it.
func DefaultDir(lay layout.Layout) string {
	if d := os.Getenv(EnvImage); d != "" {
		return d
	}
	return lay.VMImageDir()
}

// Manifest records what an image was built from.
type Manifest struct {
	// KernelVersion is the kernel's release (its modules directory's name).
	KernelVersion string `json:"kernelVersion"`
	// KernelSource is the bzImage the kernel came from.
	KernelSource string `json:"kernelSource"`
	// Modules are the prepared module files under modules/, in load order
	// (those loaded once the agent runs under modules/later/).
	Modules []string `json:"modules"`
	// RootFS is the directory the root disk was made from.
	RootFS string    `json:"rootfs"`
	Built  time.Time `json:"built"`
}

// Image is a built VM image directory.
type Image struct {
	Dir      string
	Manifest Manifest
}

// Kernel is the ELF vmlinux.
func (im *Image) Kernel() string { return filepath.Join(im.Dir, KernelFile) }

// RootDisk is the read-only root disk.
func (im *Image) RootDisk() string { return filepath.Join(im.Dir, RootDiskFile) }

// Open reads the image in dir, checking that its files are there.
func Open(dir string) (*Image, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	im := &Image{Dir: abs}
	b, err := os.ReadFile(filepath.Join(abs, manifestFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no VM image in %s (nsys-cortex image build --vm makes one)", abs)
		}
		return nil, err
	}
	if err := json.Unmarshal(b, &im.Manifest); err != nil {
		return nil, fmt.Errorf("VM image %s: %s: %w", abs, manifestFile, err)
	}
	for _, f := range append([]string{KernelFile, RootDiskFile}, im.moduleFiles()...) {
		if _, err := os.Stat(filepath.Join(abs, f)); err != nil {
			return nil, fmt.Errorf("VM image %s is incomplete (%v): build it again with nsys-cortex image build --vm", abs, err)
		}
	}
	return im, nil
}

func (im *Image) moduleFiles() []string {
	out := make([]string, len(im.Manifest.Modules))
	for i, m := range im.Manifest.Modules {
		out[i] = filepath.Join(ModulesDir, m)
	}
	return out
}

// Initramfs returns the image's initramfs for the agent binary agent,
// making it on first use: initramfs-<agent's sha256>.cpio, so a new agent
// gets a new initramfs and neurons already running keep theirs.
func (im *Image) Initramfs(agent string) (string, error) {
	sum, err := fileSum(agent)
	if err != nil {
		return "", fmt.Errorf("initramfs: the agent: %w", err)
	}
	out := filepath.Join(im.Dir, "initramfs-"+sum[:16]+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := Initramfs(out, agent, filepath.Join(im.Dir, ModulesDir), im.Manifest.Modules); err != nil {
		return "", err
	}
	return out, nil
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BuildOptions say what to build an image from.
type BuildOptions struct {
	// Dir receives the image.
	Dir string
	// KernelImage is a bzImage (or vmlinux) and ModulesDir its modules
	// (/lib/modules/<version>); both empty: the newest installed kernel.
	KernelImage, ModulesDir string
	// Agent is the static cortex-agent the initramfs starts.
	Agent string
	// RootFS is the root filesystem directory the root disk is made from
	// (internal/image builds one).
	RootFS string
	// Log receives one line per step.
	Log io.Writer
}

// Build makes the image in o.Dir: the kernel, the modules, the root disk,
// the initramfs for o.Agent, and the manifest last (an interrupted build
// leaves no image that Open accepts).
func Build(ctx context.Context, o BuildOptions) (*Image, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Dir == "" || o.Agent == "" || o.RootFS == "" {
		return nil, errors.New("VM image: a directory, an agent and a root filesystem are needed")
	}
	if o.KernelImage == "" && o.ModulesDir == "" {
		var err error
		if o.KernelImage, o.ModulesDir, err = HostKernel(); err != nil {
			return nil, err
		}
	}
	if o.ModulesDir == "" {
		// Debian's naming: /boot/vmlinuz-<release>, /lib/modules/<release>.
		if v, ok := strings.CutPrefix(filepath.Base(o.KernelImage), "vmlinuz-"); ok {
			o.ModulesDir = filepath.Join("/lib/modules", v)
		}
	}
	if o.KernelImage == "" || o.ModulesDir == "" {
		return nil, errors.New("VM image: give the kernel image with its modules directory (or neither: the newest installed kernel)")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	os.Remove(filepath.Join(dir, manifestFile)) // incomplete until the end
	step := func(n int, format string, args ...any) func() {
		start := time.Now()
		fmt.Fprintf(o.Log, "[%d/4] "+format+"\n", append([]any{n}, args...)...)
		return func() { fmt.Fprintf(o.Log, "      done in %s\n", time.Since(start).Round(time.Millisecond)) }
	}
	done := step(1, "kernel: unpacking %s", o.KernelImage)
	img, err := os.ReadFile(o.KernelImage)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	vmlinux, err := ExtractKernel(img)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, KernelFile), 0o644, func(f *os.File) error { _, err := f.Write(vmlinux); return err }); err != nil {
		return nil, err
	}
	vmlinux = nil
	done()
	done = step(2, "modules: %s from %s", strings.Join(append(GuestModules, LaterModules...), ", "), o.ModulesDir)
	mods, err := ResolveModules(o.ModulesDir, GuestModules)
	if err != nil {
		return nil, err
	}
	later, err := ResolveModules(o.ModulesDir, LaterModules)
	if err != nil {
		return nil, err
	}
	os.RemoveAll(filepath.Join(dir, ModulesDir))
	names, err := PrepareModules(o.ModulesDir, mods, filepath.Join(dir, ModulesDir))
	if err != nil {
		return nil, err
	}
	laterNames, err := PrepareModules(o.ModulesDir, notIn(later, mods), filepath.Join(dir, ModulesDir, "later"))
	if err != nil {
		return nil, err
	}
	for _, n := range laterNames {
		names = append(names, "later/"+n)
	}
	done()
	done = step(3, "root disk: mkfs.ext4 -d %s", o.RootFS)
	if err := RootDisk(ctx, o.RootFS, filepath.Join(dir, RootDiskFile)); err != nil {
		return nil, err
	}
	done()
	im := &Image{Dir: dir, Manifest: Manifest{KernelVersion: filepath.Base(o.ModulesDir), KernelSource: o.KernelImage,
		Modules: names, RootFS: o.RootFS, Built: time.Now().UTC()}}
	done = step(4, "initramfs: %s as /init, %d modules", o.Agent, len(names))
	if err := removeInitramfs(dir); err != nil {
		return nil, err
	}
	if _, err := im.Initramfs(o.Agent); err != nil {
		return nil, err
	}
	done()
	b, err := json.MarshalIndent(&im.Manifest, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, manifestFile), 0o644, func(f *os.File) error { _, err := f.Write(append(b, '\n')); return err }); err != nil {
		return nil, err
	}
	return im, nil
}

// notIn returns the modules of mods that are not in have.
func notIn(mods, have []Module) []Module {
	seen := map[string]bool{}
	for _, m := range have {
		seen[m.Name] = true
	}
	var out []Module
	for _, m := range mods {
		if !seen[m.Name] {
			out = append(out, m)
		}
	}
	return out
}

// removeInitramfs removes the initramfs files of an earlier build (they
// hold its modules). A running VM keeps its open copy.
func removeInitramfs(dir string) error {
	old, _ := filepath.Glob(filepath.Join(dir, "initramfs-*.cpio"))
	sort.Strings(old)
	for _, f := range old {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// LinkOrCopy makes dst the same file as src: a hard link where both lie on
// one filesystem, a (sparse) copy otherwise. Snapshots pin the exact files
// a VM was booted from this way.
func LinkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	} else if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) {
		return err
	}
	return CopySparse(src, dst)
}
