package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// XFSMount mounts a new sparse 512 MiB XFS image (reflinks on) for the
// test, or skips where that cannot be had here (not root, no mkfs.xfs, no
// loop devices).
func XFSMount(t testing.TB) string {
	t.Helper()
	return loopMount(t, "mkfs.xfs", "xfsprogs", 512<<20, "-q", "-m", "reflink=1")
}

// Ext4Mount mounts a new sparse ext4 image of size bytes (no reflinks)
// for the test, or skips where that cannot be had here.
func Ext4Mount(t testing.TB, size int64) string {
	t.Helper()
	return loopMount(t, "mkfs.ext4", "e2fsprogs", size, "-q", "-F")
}

func loopMount(t testing.TB, mkfsName, pkg string, size int64, args ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a filesystem needs root")
	}
	mkfs, err := exec.LookPath(mkfsName)
	if err != nil {
		t.Skipf("no %s here (Debian: %s)", mkfsName, pkg)
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", mkfsName, err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("no loop mount here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	return mnt
}
