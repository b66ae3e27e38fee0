//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Changes that come faster than the watch reads them overflow the kernel's
// queue: the watch ends saying changes were lost (TOO_LARGE), rather than
// go on without them. (The channel's flow control is what stops the agent
// reading when the host does not: this is what follows.)
func TestFsWatchOverflow(t *testing.T) {
	dir := t.TempDir()
	fs, err := newFsys(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	queue := 16384 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		queue, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if queue <= 0 || queue > 4<<20 {
		t.Skipf("fs.inotify.max_queued_events is %d: too many changes to make here", queue)
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ifd)
	w := &fsWatcher{a: &Agent{fs: fs}, fd: ifd, root: dir, dirs: map[int32]string{}}
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	// Two files in turn: the kernel folds a change into the one before it
	// only when they are the same.
	files := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	for _, f := range files {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range queue + 1 {
		if err := os.Chmod(files[i%2], os.FileMode(0o600+i%2)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64<<10)
	for seen := 0; ; {
		n, err := unix.Read(ifd, buf)
		if err != nil {
			t.Fatalf("after %d changes: %v, and no overflow", seen, err)
		}
		evs, done, err := w.parse(buf[:n])
		seen += len(evs)
		if err != nil {
			if !protocol.HasCode(err, protocol.CodeTooLarge) || !strings.Contains(err.Error(), "lost") {
				t.Fatalf("an overflow: %v", err)
			}
			return
		}
		if done {
			t.Fatal("the watch ended without an overflow")
		}
	}
}
