package fullbin

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// withEmbedded makes program the embedded full program for one test.
func withEmbedded(t *testing.T, program []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(program)
	zw.Close()
	s := sha256.Sum256(buf.Bytes())
	oldE, oldS := embedded, sum
	embedded, sum = buf.Bytes(), hex.EncodeToString(s[:])
	t.Cleanup(func() { embedded, sum = oldE, oldS })
}

func TestUnpack(t *testing.T) {
	program := []byte("#!/bin/sh\necho full\n")
	withEmbedded(t, program)
	dir := filepath.Join(t.TempDir(), "bin")
	old := filepath.Join(dir, Beside+"-0123456789abcdef")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(old, []byte("an earlier build"), 0o755)

	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := f.Name()
	if got, _ := os.ReadFile(p); !bytes.Equal(got, program) {
		t.Fatalf("unpacked %q", got)
	}
	// An earlier build's program goes once it is old and nothing runs it.
	if _, err := os.Stat(old); err != nil {
		t.Errorf("an earlier build's program, unpacked just now, was removed: %v", err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)
	os.Remove(p)
	if f, err := Open(dir); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the earlier build's program is still there: %v", err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}

	// What is at the name is used only if it is what was unpacked: a
	// truncated file, one others can write, a link: each is replaced.
	for _, spoil := range []struct {
		name string
		do   func() error
	}{
		{"truncated", func() error { return os.Truncate(p, 3) }},
		{"group-writable", func() error { return os.Chmod(p, 0o775) }},
		{"a link", func() error {
			target := filepath.Join(t.TempDir(), "elsewhere")
			os.WriteFile(target, program, 0o755)
			os.Remove(p)
			return os.Symlink(target, p)
		}},
	} {
		if err := spoil.do(); err != nil {
			t.Fatal(err)
		}
		q, err := Open(dir)
		if err != nil || q.Name() != p {
			t.Fatalf("%s: %v %v", spoil.name, q, err)
		}
		q.Close()
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 || fi.Size() != int64(len(program)) {
			t.Errorf("%s: not replaced: %v %v", spoil.name, fi.Mode(), err)
		}
	}
}

func TestPathRefuses(t *testing.T) {
	withEmbedded(t, nil)
	embedded = nil
	dir := t.TempDir()
	p := filepath.Join(dir, "full")
	os.WriteFile(p, []byte("x"), 0o644)
	t.Setenv(EnvFullBin, p)
	if _, err := Open(dir); err == nil {
		t.Errorf("a program that is not executable was taken")
	}
	os.Chmod(p, 0o757)
	if _, err := Open(dir); err == nil {
		t.Errorf("a program others can write was taken")
	}
	os.Chmod(p, 0o755)
	if got, err := Open(dir); err != nil || got.Name() != p {
		t.Errorf("%s: %v %v", EnvFullBin, got, err)
	} else {
		got.Close()
	}
}

// TestUntrustedDirectory: a bin directory another user could change is
// refused before anything is unpacked into it or run from it.
func TestUntrustedDirectory(t *testing.T) {
	withEmbedded(t, []byte("#!/bin/sh\n"))
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777) // the umask took the bits back
	if _, err := Open(filepath.Join(open, "bin")); err == nil {
		t.Errorf("unpacked under a directory anyone can write")
	}
	if os.Geteuid() == 0 {
		foreign := filepath.Join(t.TempDir(), "foreign")
		os.Mkdir(foreign, 0o755)
		os.Chown(foreign, 65534, 65534)
		if _, err := Open(foreign); err == nil {
			t.Errorf("unpacked into a directory of another user")
		}
	}
}
