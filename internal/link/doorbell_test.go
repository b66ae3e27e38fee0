//go:build linux

package link

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Listen makes the channel directory's doorbell and rings it once its
// socket is in place; it never writes to anything but a FIFO there, and
// never waits on one nobody reads.
func TestListenRingsTheDoorbell(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ch")
	// Nobody reads yet: the first Listen makes the doorbell and does not
	// wait on it.
	l, err := Listen(filepath.Join(dir, "h1.sock"), Options{Neuron: "n"})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	// Its ring runs on its own: let it end (nobody read it), so the one
	// read below is the second Listen's.
	waittest.For(t, 10*time.Second, "the first Listen's ring to end", func() bool {
		rings.Lock()
		defer rings.Unlock()
		_, busy := rings.again[dir]
		return !busy
	})
	bell := filepath.Join(dir, protocol.Doorbell)
	fi, err := os.Lstat(bell)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the doorbell: %v %v", fi, err)
	}
	r, err := os.OpenFile(bell, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err = Listen(filepath.Join(dir, "h2.sock"), Options{Neuron: "n"})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [8]byte
	if n, err := r.Read(b[:]); n != 1 || err != nil {
		t.Fatalf("the doorbell rang %d bytes: %v", n, err)
	}
	// A regular file in its place is not written to.
	r.Close()
	os.Remove(bell)
	if err := os.WriteFile(bell, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ringDoorbell(dir)
	if got, _ := os.ReadFile(bell); len(got) != 0 {
		t.Errorf("a regular file at the doorbell's name was written: %q", got)
	}
}
