package link

import (
	"bytes"
	"errors"
	"io"
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

func TestHostViewWriteReplacesAtomically(t *testing.T) {
	v, home, _ := viewFixture(t)
	target := filepath.Join(home, "ws", "f")
	if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 3*directMin)
	n, err := v.writeDirect("/home/agent/ws/f", data[:directMin], bytes.NewReader(data[directMin:]), 0)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("writeDirect: %d, %v", n, err)
	}
	got, _ := os.ReadFile(target)
	st, _ := os.Stat(target)
	if !bytes.Equal(got, data) || st.Mode().Perm() != 0o640 {
		t.Fatalf("the file has %d bytes, mode %v; want %d bytes and the replaced file's mode 0640", len(got), st.Mode().Perm(), len(data))
	}

	// A source that fails half way leaves the old content, and no temp file.
	failing := io.MultiReader(bytes.NewReader(data[:100]), iotestErr{})
	if _, err := v.writeDirect("/home/agent/ws/f", data[:directMin], failing, 0); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a failing source: %v, want its error", err)
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, data) {
		t.Fatal("a failed copy changed the file")
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "ws")); len(ents) != 1 {
		t.Fatalf("a failed copy left %d entries in the directory, want only the file", len(ents))
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("upload cut short") }

func TestHostViewOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving files to another uid needs root")
	}
	v, home, _ := viewFixture(t)
	v.Owner = &Owner{UID: 4242, GID: 4243}
	if _, err := v.writeDirect("/home/agent/ws/owned", make([]byte, directMin), bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(home, "ws", "owned"))
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Sys().(*syscall.Stat_t); s.Uid != 4242 || s.Gid != 4243 {
		t.Fatalf("owned by %d:%d, want the agent's 4242:4243", s.Uid, s.Gid)
	}
}

// Links the agent planted never lead the host out of the view: not an
// absolute symlink, not a relative one through "..", not as a directory
// component, not as the file itself; a FIFO is refused without blocking.
func TestHostViewConfined(t *testing.T) {
	v, home, secret := viewFixture(t)
	outside := filepath.Dir(secret)
	for name, target := range map[string]string{"abs": outside, "rel": "../..", "file": secret, "relfile": "../../secret"} {
		if err := os.Symlink(target, filepath.Join(home, "ws", name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"ws/abs/secret", "ws/rel/secret", "ws/file", "ws/relfile"} {
		if f, err := v.openRead(p); err == nil {
			f.Close()
			t.Errorf("read of %s opened a file outside the view", p)
		}
	}
	for _, p := range []string{"/home/agent/ws/abs/planted", "/home/agent/ws/rel/planted"} {
		if _, err := v.writeDirect(p, make([]byte, directMin), bytes.NewReader(nil), 0); err != errFallback {
			t.Errorf("write of %s: %v, want the fallback to the channel", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a write through a planted link landed outside the view")
	}
	// A link where the agent resolved a file (it raced the host) is left
	// to the channel, where the agent decides; the file it names is never
	// touched. With a mode given, the rename replaces the link itself.
	if _, err := v.writeDirect("/home/agent/ws/file", make([]byte, directMin), bytes.NewReader(nil), 0); err != errFallback {
		t.Fatalf("write over a planted link: %v, want the fallback to the channel", err)
	}
	if _, err := v.writeDirect("/home/agent/ws/file", make([]byte, directMin), bytes.NewReader(nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(home, "ws", "file")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("after a write with a mode: %v, %v; want a regular file in the link's place", st, err)
	}
	if got, _ := os.ReadFile(secret); string(got) != "host secret" {
		t.Fatal("a write over a symlink changed the file it points to")
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
	done := make(chan error, 1)
	go func() {
		f, err := v.openRead("ws/fifo")
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != errNotRegular {
			t.Fatalf("open of a FIFO: %v, want it refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open of a FIFO blocked")
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
