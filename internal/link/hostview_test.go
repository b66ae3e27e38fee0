//go:build linux

package link

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// viewFixture is a host directory seen by a neuron as /home/agent, with a
// secret beside it that nothing through the view may reach.
func viewFixture(t *testing.T) (*HostView, string, string) {
	t.Helper()
	base := t.TempDir()
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(filepath.Join(home, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &HostView{Neuron: "/home/agent", Host: home}, home, secret
}

// Links the agent planted never lead the host out of the view: not an
// absolute symlink, not a relative one through "..", not as a directory
// component, not as the file itself; a FIFO is refused without blocking;
// a temporary file to fill is never a link, even one that stays inside.
func TestHostViewConfined(t *testing.T) {
	v, home, secret := viewFixture(t)
	outside := filepath.Dir(secret)
	inside := filepath.Join(home, "ws", "target")
	os.WriteFile(inside, []byte("agent's own file"), 0o644)
	for name, target := range map[string]string{"abs": outside, "rel": "../..", "file": secret, "relfile": "../../secret", "in": "target"} {
		if err := os.Symlink(target, filepath.Join(home, "ws", name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"ws/abs/secret", "ws/rel/secret", "ws/file", "ws/relfile"} {
		if f, err := v.openRead(p); err == nil {
			f.Close()
			t.Errorf("read of %s opened a file outside the view", p)
		}
		if f, err := v.openTemp(p, inoOf(t, secret)); err == nil {
			f.Close()
			t.Errorf("write of %s opened a file outside the view", p)
		}
	}
	if f, err := v.openTemp("ws/in", inoOf(t, inside)); err == nil {
		f.Close()
		t.Error("a temporary file that is a link (to a file inside) was opened")
	}
	// The temporary file is filled only if it is the one the agent made:
	// its inode, one link. A hard link to another file put in its place
	// (or a second name for it) is refused.
	temp := filepath.Join(home, "ws", "temp")
	os.WriteFile(temp, nil, 0o600)
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)+1); err == nil {
		f.Close()
		t.Error("a temporary file of another inode was opened")
	}
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)); err != nil {
		t.Errorf("the agent's own temporary file: %v", err)
	} else {
		f.Close()
	}
	os.Link(temp, filepath.Join(home, "ws", "temp2"))
	if f, err := v.openTemp("ws/temp", inoOf(t, temp)); err == nil {
		f.Close()
		t.Error("a temporary file with a second link was opened")
	}
	if got, _ := os.ReadFile(secret); string(got) != "host secret" {
		t.Fatal("the secret changed")
	}
	if got, _ := os.ReadFile(inside); string(got) != "agent's own file" {
		t.Fatal("a file behind a link was truncated")
	}
	// Paths outside the view are not the view's.
	for _, p := range []string{"/home/agentx/f", "/tmp/f", "/home/agent", "/home/agent/../x"} {
		if _, ok := v.rel(p); ok {
			t.Errorf("rel(%q) accepted a path outside the view", p)
		}
	}
	fifo := filepath.Join(home, "ws", "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan [2]error, 1)
	go func() {
		var errs [2]error
		if f, err := v.openRead("ws/fifo"); err == nil {
			f.Close()
		} else {
			errs[0] = err
		}
		if f, err := v.openTemp("ws/fifo", inoOf(t, fifo)); err == nil {
			f.Close()
		} else {
			errs[1] = err
		}
		done <- errs
	}()
	select {
	case errs := <-done:
		if errs[0] != errNotRegular || errs[1] == nil {
			t.Fatalf("opening a FIFO: %v, want both refused", errs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}
}

// A temporary file is emptied when opened, and a cancelled copy from a
// source that is not a file stops at its next read.
func TestHostViewTempAndCancel(t *testing.T) {
	v, home, _ := viewFixture(t)
	tmp := filepath.Join(home, "ws", ".f.cortex-1")
	os.WriteFile(tmp, []byte("stale bytes"), 0o644)
	f, err := v.openTemp("ws/.f.cortex-1", inoOf(t, tmp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := copyInto(ctx, f, []byte("first"), strings.NewReader("never read"))
	f.Close()
	if !errors.Is(err, context.Canceled) || n != 5 {
		t.Fatalf("a cancelled copy: %d, %v", n, err)
	}
	if got, _ := os.ReadFile(tmp); string(got) != "first" {
		t.Fatalf("the temporary file holds %q", got)
	}
}

func TestHostErrorCodes(t *testing.T) {
	for errno, code := range map[syscall.Errno]protocol.Code{syscall.ENOSPC: protocol.CodeTooLarge, syscall.EDQUOT: protocol.CodeTooLarge, syscall.EACCES: protocol.CodePermission, syscall.EISDIR: protocol.CodeBadRequest} {
		var pe *protocol.Error
		if err := hostError("write", "/home/agent/f", errno); !errors.As(err, &pe) || pe.Code != code {
			t.Errorf("%v: %v, want %s", errno, err, code)
		}
	}
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
