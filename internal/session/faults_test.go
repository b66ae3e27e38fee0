package session

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/faultpoint"
)

// smallDisk mounts a tmpfs of size bytes on a new directory (root only).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a small filesystem of its own needs root (tmpfs); CI runs as root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestSessionWriteOnAFullDisk: a session write that finds the disk full
// fails with ENOSPC, and what was written before is intact: the file
// ends on a whole entry, and a reopened session has every earlier entry.
func TestSessionWriteOnAFullDisk(t *testing.T) {
	dir := smallDisk(t, 1<<20)
	m := NewManager(filepath.Join(dir, "sessions"))
	s, err := m.Create(Header{Cwd: "/work", Neuron: "ndemo12345", Provider: "anthropic", Model: "m", Agent: "coder", Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, txt := range []string{"u1", "a1", "u2"} {
		must(t)(s.AppendMessage(user(txt)))
	}
	// Fill the disk to its last bytes.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	filler.Close()
	_, err = s.AppendMessage(user(strings.Repeat("a long message ", 1000)))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("an append on a full disk: %v, want ENOSPC", err)
	}
	s.Close()
	os.Remove(filepath.Join(dir, "filler"))
	checkLines(t, s.path)
	again, err := m.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var texts []string
	for _, e := range again.Entries() {
		if e.Message != nil && len(e.Message.Parts) > 0 {
			texts = append(texts, e.Message.Parts[0].Text)
		}
	}
	if strings.Join(texts, " ") != "u1 a1 u2" {
		t.Errorf("after the full disk: %q, want the three earlier messages", texts)
	}
	// And it writes again once there is room.
	must(t)(again.AppendMessage(user("u3")))
}

// TestKilledDuringAWrite: a process killed (kill -9) right after a
// session line is written, before it is synced or acknowledged, leaves a
// session whose every earlier entry is there, whole, and which takes the
// next append.
func TestKilledDuringAWrite(t *testing.T) {
	dir := os.Getenv("SESSION_FAULT_CHILD")
	if dir != "" {
		m := NewManager(dir)
		s, err := m.Create(Header{Cwd: "/work", Neuron: "ndemo12345", Provider: "anthropic", Model: "m", Agent: "coder", Title: "t"})
		if err != nil {
			os.Exit(3)
		}
		os.WriteFile(filepath.Join(dir, "id"), []byte(s.ID()), 0o600)
		for _, txt := range []string{"u1", "a1", "u2"} {
			if _, err := s.AppendMessage(user(txt)); err != nil {
				os.Exit(3)
			}
		}
		os.Setenv(faultpoint.Env, "session.written")
		s.AppendMessage(user("the one being written"))
		os.Exit(4) // not reached: killed at the point
	}
	dir = filepath.Join(t.TempDir(), "sessions")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledDuringAWrite$")
	cmd.Env = append(os.Environ(), "SESSION_FAULT_CHILD="+dir)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the writer was not killed at session.written: %v", err)
	}
	id, _ := os.ReadFile(filepath.Join(dir, "id"))
	m := NewManager(dir)
	s, err := m.Open(string(id))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkLines(t, s.path)
	var texts []string
	for _, e := range s.Entries() {
		if e.Message != nil && len(e.Message.Parts) > 0 {
			texts = append(texts, e.Message.Parts[0].Text)
		}
	}
	if got := strings.Join(texts, ","); got != "u1,a1,u2" && got != "u1,a1,u2,the one being written" {
		t.Errorf("after the kill: %q", got)
	}
	must(t)(s.AppendMessage(user("after")))
	checkLines(t, s.path)
}
