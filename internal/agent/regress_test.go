//go:build linux

package agent

import (
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// ".." applies after the symlinks before it, as in the kernel: resolve and
// the file operations agree on which file a path names.
func TestResolveDotDotLikeTheKernel(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	must(t, os.Symlink("a/b", filepath.Join(root, "l")))
	must(t, os.WriteFile(filepath.Join(root, "a", "f"), []byte("in a"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "f"), []byte("at root"), 0o644))
	f, err := newFsys(root, root)
	must(t, err)
	p, ok, err := f.resolve("l/../f")
	if err != nil || !ok || p != filepath.Join(f.root, "a", "f") {
		t.Fatalf("resolve(l/../f) = %s %v %v", p, ok, err)
	}
	file, _, err := f.openFile("l/../f", os.O_RDONLY, 0)
	must(t, err)
	b, _ := io.ReadAll(file)
	file.Close()
	if string(b) != "in a" {
		t.Fatalf("open(l/../f) read %q", b)
	}
	if _, _, err := f.resolve("a/../../x"); !protocol.HasCode(err, protocol.CodePathEscape) {
		t.Fatalf("%v", err)
	}
}

// The root and the workdir cannot be removed or moved through a detour.
func TestRemoveGuardSeesThroughSymlinks(t *testing.T) {
	for _, tc := range []struct{ name, sub, path string }{
		{"workdir below the root", "ws", "l/../ws"},
		{"workdir is the root", "", "l/x/.."},
		{"the root itself", "", "."},
		{"a parent of the workdir", "ws", ".."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			wd := filepath.Join(root, tc.sub)
			must(t, os.MkdirAll(filepath.Join(wd, "x"), 0o755))
			must(t, os.WriteFile(filepath.Join(wd, "x", "precious"), []byte("data"), 0o644))
			must(t, os.Symlink(".", filepath.Join(wd, "l")))
			f, err := newFsys(root, wd)
			must(t, err)
			if _, err := f.remove(tc.path, true); !protocol.HasCode(err, protocol.CodeBadRequest) && !protocol.HasCode(err, protocol.CodePathEscape) {
				t.Fatalf("remove(%q): %v", tc.path, err)
			}
			if err := f.rename(tc.path, "elsewhere"); !protocol.HasCode(err, protocol.CodeBadRequest) && !protocol.HasCode(err, protocol.CodePathEscape) {
				t.Fatalf("rename(%q): %v", tc.path, err)
			}
			if _, err := os.Stat(filepath.Join(wd, "x", "precious")); err != nil {
				t.Fatalf("data lost: %v", err)
			}
			// Removing a symlink removes the link, never what it points at.
			if _, err := f.remove("l", false); err != nil {
				t.Fatalf("remove the link itself: %v", err)
			}
		})
	}
}

// A full process table refuses a start without leaving a process behind.
func TestFullProcTableStartsNothing(t *testing.T) {
	a, err := New(Config{ID: "x", Root: t.TempDir(), Logger: log.New(io.Discard, "", 0)})
	must(t, err)
	defer a.Close()
	a.procs.mu.Lock()
	for i := 0; i < maxProcs; i++ {
		a.procs.procs[-1-i] = &proc{pid: -1 - i, done: make(chan struct{}), out: newRing(1)}
	}
	a.procs.mu.Unlock()
	marker := "cortex-full-table-" + strings.Repeat("z", 8)
	_, err = a.procs.start(&protocol.Command{Argv: []string{"sh", "-c", "exec sleep 30", marker}}, false, 0)
	if !protocol.HasCode(err, protocol.CodeTooLarge) {
		t.Fatalf("%v", err)
	}
	for _, pid := range children() {
		b, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline")
		if strings.Contains(string(b), marker) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d was started for a refused request", pid)
		}
	}
	if a.procs.pending != 0 {
		t.Fatalf("reservation leaked: %d", a.procs.pending)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
