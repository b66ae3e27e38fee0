//go:build linux

package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes dir with a directory "d", a file "f", a symlink "l" to an
// outside directory, and returns dir and the outside directory.
func tree(t *testing.T) (string, string) {
	t.Helper()
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, outside
}

func open(t *testing.T, p string) *Dir {
	t.Helper()
	d, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestNeverFollowsASymlink(t *testing.T) {
	dir, outside := tree(t)
	d := open(t, dir)
	if _, err := d.Sub("l"); !errors.Is(err, ErrNotDir) {
		t.Errorf("Sub(symlink) = %v, want ErrNotDir", err)
	}
	if _, _, err := d.MakeDir("l", 0o755); !errors.Is(err, ErrNotDir) {
		t.Errorf("MakeDir(symlink) = %v, want ErrNotDir", err)
	}
	if _, _, err := d.MakeDir("f", 0o755); !errors.Is(err, ErrNotDir) {
		t.Errorf("MakeDir(file) = %v, want ErrNotDir", err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "lf")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.OpenFile("lf", unix.O_RDONLY, 0); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenFile(symlink to a file) = %v, want ErrSymlink", err)
	}
	if _, _, err := d.OpenFile("d", unix.O_RDONLY, 0); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenFile(dir) = %v, want ErrNotRegular", err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.OpenFile("fifo", unix.O_RDONLY, 0); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenFile(fifo) = %v, want ErrNotRegular (and no hang)", err)
	}
	for _, rel := range []string{"l/secret", "l", "d/../l/secret"} {
		if fd, err := OpenBeneath(d, rel, unix.O_RDONLY, 0); err == nil {
			unix.Close(fd)
			t.Errorf("OpenBeneath(%q) opened it", rel)
		}
	}
	if _, err := MakeDirs(d, "l/sub", 0o755, nil); !errors.Is(err, ErrNotDir) {
		t.Errorf("MakeDirs through a symlink = %v, want ErrNotDir", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "sub")); err == nil {
		t.Error("MakeDirs made a directory through the symlink")
	}
	// Lchown and Remove act on the link itself.
	if err := d.Remove("l"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("removing the link removed its target: %v", err)
	}
}

func TestNamesAreSingleElements(t *testing.T) {
	d := open(t, t.TempDir())
	for _, name := range []string{"", ".", "..", "a/b", "../x", "x\x00y", string(make([]byte, 256))} {
		if _, _, err := d.MakeDir(name, 0o755); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("MakeDir(%q) = %v, want ErrInvalid", name, err)
		}
		if err := d.Symlink("/", name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Symlink(%q) = %v, want ErrInvalid", name, err)
		}
	}
}

func TestCreateTempIsNew(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	f, name, err := d.CreateTemp(".x-", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("hello"))
	f.Close()
	if err := d.Rename(name, "final"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "final"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("final = %q, %v", b, err)
	}
	names, err := d.Names()
	if err != nil || len(names) != 1 || names[0] != "final" {
		t.Errorf("Names = %v, %v", names, err)
	}
}

// TestSwapRace has a "neuron" swap a directory and a symlink to an outside
// directory (renameat2 RENAME_EXCHANGE) as fast as it can while the host
// makes the directory, enters it and writes a file there: every write
// lands inside, or fails.
func TestSwapRace(t *testing.T) {
	dir, outside := tree(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "d"), unix.AT_FDCWD, filepath.Join(dir, "l"), unix.RENAME_EXCHANGE)
		}
	}()
	d := open(t, dir)
	for i := 0; i < 2000; i++ {
		for _, name := range []string{"d", "l"} {
			sub, _, err := d.MakeDir(name, 0o755)
			if err != nil {
				continue
			}
			f, tmp, err := sub.CreateTemp(".w-", 0o600)
			if err == nil {
				f.Close()
				sub.Remove(tmp)
			}
			sub.Close()
		}
	}
	stop.Store(true)
	wg.Wait()
	names, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "secret" {
		t.Fatalf("the outside directory was written to: %v", names)
	}
}

func TestEnsureDirAndWriteFile(t *testing.T) {
	dir, outside := tree(t)
	// A link where a directory belongs is replaced, never followed (a
	// neuron that made its workspace a link still starts).
	if err := EnsureDir(dir, "l/home", 0o755, os.Getuid(), os.Getgid(), false); err != nil {
		t.Errorf("EnsureDir over a link: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "l")); err != nil || !st.IsDir() {
		t.Errorf("the link was not replaced by a directory: %v %v", st, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("EnsureDir made something where the link led: %v", ents)
	}
	// A file in the way is no link: refused, and kept.
	if err := EnsureDir(dir, "f/home", 0o755, os.Getuid(), os.Getgid(), false); !errors.Is(err, ErrNotDir) {
		t.Errorf("EnsureDir over a file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "data" {
		t.Errorf("the file in the way became %q", b)
	}
	if err := EnsureDir(dir, "d/a/b", 0o755, os.Getuid(), os.Getgid(), true); err != nil {
		t.Fatal(err)
	}
	d := open(t, filepath.Join(dir, "d"))
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "d", "hosts")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadFile("hosts", 100); !errors.Is(err, ErrSymlink) {
		t.Errorf("ReadFile through a link: %v", err)
	}
	if err := d.WriteFile("hosts", []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Fatalf("WriteFile wrote through the link: %q", b)
	}
	if b, err := d.ReadFile("hosts", 100); err != nil || string(b) != "mine" {
		t.Fatalf("ReadFile = %q %v", b, err)
	}
}
