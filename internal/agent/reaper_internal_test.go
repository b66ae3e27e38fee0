package agent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestChildrenOfEveryThread: children lists a child forked by another
// thread than the caller's and an orphan this process adopted as a
// subreaper, which the reaper must both see.
func TestChildrenOfEveryThread(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("subreaper: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	// A child of a thread of its own.
	started := make(chan *exec.Cmd, 1)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine; its child is reparented to this process
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Error(err)
		}
		started <- c
		<-t.Context().Done()
	}()
	c := <-started
	if c.Process == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })

	// An orphan: sh starts sleep and exits; the sleep is adopted.
	out, err := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	t.Cleanup(func() {
		unix.Kill(orphan, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(orphan, &ws, 0, nil)
	})

	got := children()
	for _, pid := range []int{c.Process.Pid, orphan} {
		if !slices.Contains(got, pid) {
			t.Errorf("children() = %v, without %d", got, pid)
		}
	}
}

// TestReadProcWhole: a file larger than the buffer given is read whole.
func TestReadProcWhole(t *testing.T) {
	want := bytes.Repeat([]byte("12345 "), 2000)
	p := filepath.Join(t.TempDir(), "children")
	if err := os.WriteFile(p, want, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readProc(p, make([]byte, 0, 4096)); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
	if got := readProc(filepath.Join(t.TempDir(), "none"), nil); got != nil {
		t.Fatalf("a missing file read as %q", got)
	}
}

// BenchmarkChildren times the scan the reaper makes at every SIGCHLD.
func BenchmarkChildren(b *testing.B) {
	for b.Loop() {
		children()
	}
}
