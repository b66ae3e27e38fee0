package store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
)

// A copy for another neuron gives that neuron's uid what the first one's
// owned, keeps every other owner, and leaves out what Skip names.
func TestCopyTreeOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting owners needs root")
	}
	from, to := t.TempDir(), t.TempDir()
	const src, dst = 2_000_000_101, 2_000_000_202
	files := map[string]int{"mine.txt": src, "roots.txt": 0, "d/deep.txt": src}
	if err := os.Mkdir(filepath.Join(from, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, uid := range files {
		p := filepath.Join(from, name)
		if err := os.WriteFile(p, []byte(name), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(from, "d"), src, src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(from, ".neuron.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.CopyTree(context.Background(), from, to, store.CopyOptions{Skip: store.HostRecord, Owners: map[uint32]uint32{src: dst}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 {
		t.Fatalf("copied %d files, want 3", st.Files)
	}
	want := map[string]int{"mine.txt": dst, "roots.txt": 0, "d/deep.txt": dst, "d": dst}
	for name, uid := range want {
		var s unix.Stat_t
		if err := unix.Lstat(filepath.Join(to, name), &s); err != nil {
			t.Fatal(err)
		}
		if int(s.Uid) != uid || int(s.Gid) != uid {
			t.Errorf("%s: owner %d:%d, want %d:%d", name, s.Uid, s.Gid, uid, uid)
		}
	}
	if _, err := os.Lstat(filepath.Join(to, ".neuron.json")); !os.IsNotExist(err) {
		t.Errorf("a host record was copied: %v", err)
	}
}

// On a filesystem with reflinks a copy shares the data instead of writing
// it again: 64 MiB copied take no 64 MiB of the disk.
func TestCopyTreeClones(t *testing.T) {
	mnt := sandboxtest.XFSMount(t)
	from, to := filepath.Join(mnt, "from"), filepath.Join(mnt, "to")
	for _, d := range []string{from, to} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	if err := os.WriteFile(filepath.Join(from, "big"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	before := freeBytes(t, mnt)
	st, err := store.CopyTree(context.Background(), from, to, store.CopyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	used := before - freeBytes(t, mnt)
	if st.Cloned != int64(len(data)) || st.Bytes != int64(len(data)) {
		t.Fatalf("stats %+v, want all %d bytes cloned", st, len(data))
	}
	if used > 4<<20 {
		t.Fatalf("the copy took %d MiB of the disk, want next to nothing (a reflink)", used>>20)
	}
	got, err := os.ReadFile(filepath.Join(to, "big"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the clone reads back differently (%v)", err)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * s.Bsize
}
