//go:build linux

package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

func TestRing(t *testing.T) {
	r := newRing(8)
	r.Write([]byte("abc"))
	if d, s, eof := r.ReadFrom(0, 100); string(d) != "abc" || s != 0 || eof {
		t.Fatalf("%q %d %v", d, s, eof)
	}
	r.Write([]byte("defghij")) // 10 bytes written into 8: "ab" are gone
	if d, s, _ := r.ReadFrom(0, 100); string(d) != "cdefghij" || s != 2 {
		t.Fatalf("after wrap: %q from %d", d, s)
	}
	if d, s, _ := r.ReadFrom(5, 3); string(d) != "fgh" || s != 5 {
		t.Fatalf("window: %q from %d", d, s)
	}
	r.Write(bytes.Repeat([]byte("z"), 20)) // larger than the ring
	if d, s, _ := r.ReadFrom(0, 100); string(d) != "zzzzzzzz" || s != 22 || r.End() != 30 {
		t.Fatalf("big write: %q from %d end %d", d, s, r.End())
	}
	if d, s, _ := r.ReadFrom(99, 10); len(d) != 0 || s != 30 {
		t.Fatalf("past the end: %q %d", d, s)
	}
	wake := r.Wait()
	r.Close()
	select {
	case <-wake:
	default:
		t.Fatal("Close did not wake a waiter")
	}
	if _, _, eof := r.ReadFrom(30, 10); !eof {
		t.Fatal("no eof after close")
	}
}

func TestFsysResolveAndEscapes(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.MkdirAll(filepath.Join(root, "ws/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "secret"), []byte("s"), 0o600))
	must(t, os.Symlink("sub", filepath.Join(root, "ws/in")))
	must(t, os.Symlink("../../secret", filepath.Join(root, "ws/out")))
	must(t, os.Symlink(filepath.Join(root, "ws/sub"), filepath.Join(root, "ws/abs")))
	f, err := newFsys(root, filepath.Join(root, "ws"))
	must(t, err)
	ws := filepath.Join(f.root, "ws")
	for in, want := range map[string]string{
		"in":             ws + "/sub",
		"in/../sub/new":  ws + "/sub/new",
		"sub/./x/y":      ws + "/sub/x/y",
		ws + "/in":       ws + "/sub",
		"../ws/sub":      ws + "/sub",
		"missing/../sub": ws + "/sub",
	} {
		got, _, err := f.resolve(in)
		if err != nil || got != want {
			t.Errorf("resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"out", "../../secret", "/etc/passwd", "abs", "in/../../../secret"} {
		if _, _, err := f.resolve(in); !protocol.HasCode(err, protocol.CodePathEscape) {
			t.Errorf("resolve(%q): %v, want PATH_ESCAPE", in, err)
		}
		if _, _, err := f.openFile(in, os.O_RDONLY, 0); !protocol.HasCode(err, protocol.CodePathEscape) {
			t.Errorf("open(%q): %v, want PATH_ESCAPE", in, err)
		}
	}
	// Unconfined, absolute symlinks are ordinary.
	u, err := newFsys("/", ws)
	must(t, err)
	if got, _, err := u.resolve("abs"); err != nil || got != ws+"/sub" {
		t.Fatalf("unconfined: %q %v", got, err)
	}
}

// os.Root reports escapes with this message; if a Go release changes it,
// this test says so before PATH_ESCAPE silently becomes INTERNAL.
func TestRootEscapeMessage(t *testing.T) {
	d := t.TempDir()
	r, err := os.OpenRoot(d)
	must(t, err)
	defer r.Close()
	_, err = r.Open("../x")
	if !isEscape(err) {
		t.Fatalf("os.Root escape error %q is not recognised", err)
	}
}

func TestLookPathAndExitCodes(t *testing.T) {
	d := t.TempDir()
	must(t, os.WriteFile(filepath.Join(d, "tool"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(d, "data"), []byte("x"), 0o644))
	if p, err := lookPath("tool", d, "/"); err != nil || p != filepath.Join(d, "tool") {
		t.Fatalf("%q %v", p, err)
	}
	if p, err := lookPath("./tool", "", d); err != nil || p != filepath.Join(d, "tool") {
		t.Fatalf("relative: %q %v", p, err)
	}
	for name, code := range map[string]int{"nope": 127, "data": 126, "./data": 126, "./nope": 127} {
		_, err := lookPath(name, d, d)
		nr, ok := err.(*notRunnable)
		if !ok || nr.code != code {
			t.Errorf("%s: %v, want %d", name, err, code)
		}
	}
	if os.Geteuid() == 0 {
		// root may execute anything with an x bit; a directory is still not a program.
		if _, err := lookPath(d, "", "/"); err == nil {
			t.Error("a directory was taken for a program")
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"TERM": syscall.SIGTERM, "sigkill": syscall.SIGKILL, "SIGINT": syscall.SIGINT, "9": syscall.SIGKILL, " hup ": syscall.SIGHUP} {
		if got, err := parseSignal(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, in := range []string{"", "NOPE", "0", "99", "-1", "9x"} {
		if _, err := parseSignal(in); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Errorf("%q accepted: %v", in, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
