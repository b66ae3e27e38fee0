package vmimage

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

func requireMkfs(t *testing.T) {
	t.Helper()
	if _, err := Mkfs(); err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_QEMU") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestRootDisk(t *testing.T) {
	requireMkfs(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "hello"), []byte("from the root disk\n"), 0o644)
	os.Symlink("etc/hello", filepath.Join(root, "link"))
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	if err := RootDisk(context.Background(), root, out); err != nil {
		t.Fatal(err)
	}
	debugfs, err := exec.LookPath("debugfs")
	if err != nil {
		debugfs = "/usr/sbin/debugfs"
	}
	got, err := exec.Command(debugfs, "-R", "cat /etc/hello", out).Output()
	if err != nil || string(got) != "from the root disk\n" {
		t.Fatalf("debugfs cat: %q %v", got, err)
	}
	if got, _ := exec.Command(debugfs, "-R", "stat /link", out).CombinedOutput(); !strings.Contains(string(got), "etc/hello") {
		t.Fatalf("the symlink: %s", got)
	}
	if err := RootDisk(context.Background(), filepath.Join(root, "etc", "hello"), out+"2"); err == nil {
		t.Fatal("a file was taken as a root directory")
	}
}

func TestOverlayDiskIsSparseAndKept(t *testing.T) {
	requireMkfs(t)
	p := filepath.Join(t.TempDir(), "overlay.ext4")
	if err := OverlayDisk(context.Background(), p, 1<<30); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if fi.Size() != 1<<30 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("size %d, mode %v", fi.Size(), fi.Mode())
	}
	if a := allocated(t, p); a > 40<<20 {
		t.Fatalf("a fresh 1 GiB overlay disk takes %d bytes", a)
	}
	// It holds the neuron's data: a second call never makes it again.
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt([]byte("mark"), 1<<29)
	f.Close()
	if err := OverlayDisk(context.Background(), p, 1<<30); err != nil {
		t.Fatal(err)
	}
	f, _ = os.Open(p)
	mark := make([]byte, 4)
	f.ReadAt(mark, 1<<29)
	f.Close()
	if string(mark) != "mark" {
		t.Fatal("an existing overlay disk was made again")
	}
	if err := OverlayDisk(context.Background(), p+"2", 1<<20); err == nil {
		t.Fatal("a 1 MiB overlay disk was made")
	}
}

// The overlay disk is a VM neuron's disk ceiling: made at the size asked
// (or the default), and then kept: never grown (the host would parse the
// guest's raw image to grow it) nor made smaller.
func TestSizedOverlayDisk(t *testing.T) {
	requireMkfs(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "overlay.ext4")
	if size, err := SizedOverlayDisk(ctx, p, 0, 96<<20); err != nil || size != 96<<20 {
		t.Fatalf("a new disk at the default: %d %v", size, err)
	}
	if size, err := SizedOverlayDisk(ctx, p, 0, 1<<30); err != nil || size != 96<<20 {
		t.Fatalf("an existing disk is kept whatever the default: %d %v", size, err)
	}
	if size, err := SizedOverlayDisk(ctx, p, 96<<20, 0); err != nil || size != 96<<20 {
		t.Fatalf("the same ceiling again: %d %v", size, err)
	}
	for asked, want := range map[int64]string{160 << 20: "does not parse", 64 << 20: "never made smaller"} {
		if _, err := SizedOverlayDisk(ctx, p, asked, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%d MiB asked of a 96 MiB disk: %v, want %q", asked>>20, err, want)
		}
	}
	if fi, _ := os.Stat(p); fi.Size() != 96<<20 {
		t.Fatalf("the refused changes left the disk at %d bytes", fi.Size())
	}
	if _, err := SizedOverlayDisk(ctx, p+"2", 1<<20, 0); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Fatalf("a 1 MiB ceiling: %v", err)
	}
}

// GrowDisk grows a loop-mounted disk's image and its filesystem, keeping
// what it held.
func TestGrowDisk(t *testing.T) {
	requireMkfs(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := OverlayDisk(ctx, p, 96<<20); err != nil {
		t.Fatal(err)
	}
	debugfs, err := exec.LookPath("debugfs")
	if err != nil {
		debugfs = "/usr/sbin/debugfs"
	}
	if out, err := exec.Command(debugfs, "-w", "-R", "mkdir kept", p).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v %s", err, out)
	}
	if err := GrowDisk(ctx, p, 160<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(debugfs, "-R", "stats", p).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs stats: %v", err)
	}
	field := func(name string) int64 {
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	if got := field("Block count") * field("Block size"); got != 160<<20 {
		t.Fatalf("the filesystem holds %d bytes after growing to 160 MiB", got)
	}
	if out, _ := exec.Command(debugfs, "-R", "ls -l /", p).CombinedOutput(); !strings.Contains(string(out), "kept") {
		t.Fatalf("growing lost what the disk held: %s", out)
	}
	if err := GrowDisk(ctx, p, 96<<20); err == nil || !strings.Contains(err.Error(), "never made smaller") {
		t.Fatalf("shrinking: %v", err)
	}
}

func TestConfigDisk(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.img")
	cfg := &boot.VMConfig{ID: "n1", Workdir: "/home/agent/workspace", Env: []string{"A=b", "TOKEN=secret"}, Pids: 9}
	if err := ConfigDisk(p, cfg); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if len(b) != ConfigDiskMin || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config disk of %d bytes, mode %v", len(b), fi.Mode())
	}
	var got boot.VMConfig
	if err := json.Unmarshal(bytes.TrimRight(b, "\x00"), &got); err != nil || got.ID != "n1" || got.Env[1] != "TOKEN=secret" || got.Pids != 9 {
		t.Fatalf("%+v %v", got, err)
	}
	big := &boot.VMConfig{ID: "n1", Workdir: "/w", Env: []string{"X=" + strings.Repeat("x", boot.VMConfigMax)}}
	if err := ConfigDisk(p, big); err == nil {
		t.Fatal("a config larger than the guest reads was written")
	}
}

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, _ := os.Create(src)
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), 64<<20)
	f.WriteAt([]byte("tail"), 200<<20)
	f.Close()
	dst := filepath.Join(dir, "dst")
	if err := CopySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	a, b := mustRead(t, src), mustRead(t, dst)
	if !bytes.Equal(a, b) {
		t.Fatal("the copy differs")
	}
	if got := allocated(t, dst); got > 4<<20 {
		t.Fatalf("the copy of a sparse file takes %d bytes: holes were filled", got)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBuild builds a whole image from the host's kernel and a tiny root,
// and checks what the guest will see in its initramfs.
func TestBuild(t *testing.T) {
	_, modules := requireHostKernel(t)
	requireMkfs(t)
	vmlinux, err := hostVmlinux()
	if err != nil {
		t.Fatal(err)
	}
	// The unpacked kernel (an ELF file passes through as it is; unpacking
	// is TestExtractKernelMatchesXZ's).
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, vmlinux, 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	agent := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(agent, append([]byte("\x7fELF"), bytes.Repeat([]byte{1}, 1000)...), 0o755)
	var log bytes.Buffer
	dir := filepath.Join(t.TempDir(), "vm")
	im, err := Build(context.Background(), BuildOptions{Dir: dir, KernelImage: kernel, ModulesDir: modules, Agent: agent, RootFS: root, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "[4/4]") {
		t.Fatalf("progress: %s", log.String())
	}
	again, err := Open(dir)
	if err != nil || again.Manifest.KernelVersion != filepath.Base(modules) {
		t.Fatalf("open: %+v %v", again, err)
	}
	cpio, err := im.Initramfs(agent)
	if err != nil {
		t.Fatal(err)
	}
	entries := readNewc(t, mustRead(t, cpio))
	names := map[string]newcEntry{}
	for _, e := range entries {
		names[e.name] = e
	}
	if e := names["init"]; e.mode != 0o100755 || !bytes.Equal(e.data, mustRead(t, agent)) {
		t.Fatalf("/init: %o %d bytes", e.mode, len(e.data))
	}
	if e := names["dev/console"]; e.major != 5 || e.minor != 1 {
		t.Fatalf("/dev/console: %+v", e)
	}
	for _, m := range []string{"ext4", "overlay", "virtio_console", "virtio_blk", "later/"} {
		found := false
		for n, e := range names {
			if strings.HasPrefix(n, "modules/") && strings.Contains(n, m) && (strings.HasSuffix(n, ".ko") || e.mode&0o040000 != 0) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s in the initramfs", m)
		}
	}
	// A different agent gets an initramfs of its own; the same one is reused.
	if again, _ := im.Initramfs(agent); again != cpio {
		t.Fatalf("initramfs of the same agent: %s then %s", cpio, again)
	}
	os.Remove(filepath.Join(dir, KernelFile))
	if _, err := Open(dir); err == nil {
		t.Fatal("an image without its kernel opened")
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "image build --vm") {
		t.Fatalf("an empty directory: %v", err)
	}
}
