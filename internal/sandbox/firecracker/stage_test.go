package firecracker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// On a machine as it comes (no Firecracker, no image), the mode's
// self-check and its refusal name each missing piece.
func TestSelfCheckFromEnvironment(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, e := range []string{EnvFirecracker, EnvJailer, EnvKernel, EnvInitrd, EnvRootDisk, EnvChroot, EnvOverlaySize} {
		t.Setenv(e, "")
	}
	lay, _ := layout.New(t.TempDir(), "")
	c := SelfCheck(context.Background(), sandbox.Env{Layout: lay})
	if c.OK || c.Mode != Mode || !c.Isolating {
		t.Fatalf("%+v", c)
	}
	for _, want := range []string{"firecracker: no firecracker binary on PATH", "jailer: needs firecracker first",
		"guest image: missing kernel " + filepath.Join(lay.ImagesDir(), "vm", "vmlinux"),
		"initramfs " + filepath.Join(lay.ImagesDir(), "vm", "initramfs-<agent>.cpio"), "KVM: "} {
		if !strings.Contains(c.Summary, want) {
			t.Errorf("the summary does not say %q:\n%s", want, c.Summary)
		}
	}
	b := Backend()
	if b.Name != Mode || b.Rank <= 20 || !b.Isolating || b.New == nil || b.SelfCheck == nil {
		t.Errorf("backend %+v: firecracker must rank above docker (20) for auto", b)
	}
	// vmimage's initramfs, named for its agent: the newest is taken.
	vm := filepath.Join(lay.ImagesDir(), "vm")
	os.MkdirAll(vm, 0o755)
	os.WriteFile(filepath.Join(vm, "initramfs-0000.cpio"), nil, 0o644)
	os.WriteFile(filepath.Join(vm, "initramfs-1111.cpio"), nil, 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(vm, "initramfs-0000.cpio"), old, old)
	if cfg, _ := ConfigFromEnv(lay); cfg.Initrd != filepath.Join(vm, "initramfs-1111.cpio") {
		t.Errorf("initramfs: %s", cfg.Initrd)
	}
	t.Setenv(EnvOverlaySize, "lots")
	if _, err := ConfigFromEnv(lay); err == nil || !strings.Contains(err.Error(), EnvOverlaySize) {
		t.Errorf("a bad overlay size: %v", err)
	}
}

// sparseCopy copies data and keeps holes.
func TestSparseCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "disk")
	f, _ := os.Create(src)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 64<<20)
	f.Truncate(256 << 20)
	f.Close()
	dst := filepath.Join(dir, "copy")
	if err := sparseCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dst)
	if len(b) != 256<<20 || string(b[:4]) != "head" || string(b[64<<20:64<<20+6]) != "middle" {
		t.Fatal("the copy differs")
	}
	var st syscall.Stat_t
	syscall.Stat(dst, &st)
	if st.Blocks*512 > 16<<20 {
		t.Errorf("the copy of a 256 MiB file with 10 bytes of data takes %d bytes: holes were filled", st.Blocks*512)
	}
	if err := sparseCopy(src, dst); err == nil {
		t.Error("sparseCopy overwrote an existing file")
	}
}

// A shared input the jail's user could change is copied, never linked; the
// removal of a jail does not follow what the jailed process left in it.
func TestStagingIsolation(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	j := newJail(filepath.Join(dir, "jails"), "/x/firecracker", "abc-n1", 2_000_000_123, 2_000_000_123)
	if err := j.prepare("n1", "/home"); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private.img")
	os.WriteFile(private, []byte("secret layout"), 0o600)
	if err := j.linkShared(private, jailKernel); err != nil {
		t.Fatal(err)
	}
	si, _ := inode(t, private)
	di, ds := inode(t, j.host(jailKernel))
	if si == di || int(ds.Uid) != j.uid || ds.Mode&0o777 != 0o400 {
		t.Errorf("a private image must be copied, read-only, for the jail: linked %v owner %d mode %o", si == di, ds.Uid, ds.Mode&0o777)
	}
	writable := filepath.Join(dir, "writable.img")
	os.WriteFile(writable, []byte("x"), 0o666)
	os.Chmod(writable, 0o666)
	if err := j.linkShared(writable, jailInitrd); err != nil {
		t.Fatal(err)
	}
	if wi, _ := inode(t, writable); wi == func() uint64 { i, _ := inode(t, j.host(jailInitrd)); return i }() {
		t.Error("a world-writable image was linked into the jail")
	}
	// The jailed process may leave a symlink to anything: removing the
	// jail removes the link, not its target.
	victim := filepath.Join(dir, "victim")
	os.MkdirAll(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o644)
	os.Symlink(victim, j.host("/escape"))
	if err := j.remove(); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(victim, "keep")) || exists(j.dir) {
		t.Error("removing the jail followed a symlink out of it, or left it")
	}
}
