package session

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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
