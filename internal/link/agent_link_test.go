//go:build linux

package link_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// A real agent that goes away and comes back (a restart) is reconnected.
func TestRealAgentRestart(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "sleep 30"}, Timeout: link.NoTimeout})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.stop() // the agent stops (and ends its children)
	select {
	case err := <-done:
		if !protocol.HasCode(err, protocol.CodeNotRunning) {
			t.Fatalf("%v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending exec hangs")
	}
	restarted := newAgentOn(t, p)
	defer restarted()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.link.WaitConnected(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

// The socket directory is private and the socket owner-only.
func TestSocketPermissions(t *testing.T) {
	p := newPair(t)
	st, err := os.Stat(filepath.Dir(p.link.Path()))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", st.Mode(), err)
	}
	st, err = os.Stat(p.link.Path())
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket: %v %v", st.Mode(), err)
	}
}

// Long socket paths (deep homes, 64-character ids) still work.
func TestLongSocketPath(t *testing.T) {
	dir := shortTempDir(t)
	long := filepath.Join(dir, "a-very-long-directory-name-that-goes-on-and-on", "another-long-component-for-good-measure", "h-0123456789abcdef.sock")
	if len(long) <= protocol.MaxSocketPath {
		t.Fatalf("path not long enough: %d", len(long))
	}
	l, err := link.Listen(long, link.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := protocol.DialUnix(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

// slowWriter takes its time with every write.
type slowWriter struct{ n int }

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	w.n += len(p)
	return len(p), nil
}

// A slow reader of one stream holds back only that stream: the agent stops
// reading the command's output (so nothing is lost or buffered without
// bound) while other requests on the same connection go on.
func TestFlowControlIsPerStream(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	var w slowWriter
	done := make(chan error, 1)
	go func() {
		res, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "head -c 20000000 /dev/zero"}, Stdout: &w, Timeout: link.NoTimeout})
		if err == nil && res.StdoutLen != 20000000 {
			err = errors.New("short output")
		}
		done <- err
	}()
	for i := 0; i < 20; i++ {
		start := time.Now()
		if _, err := p.client.Health(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("a health call waited %s behind a slow stream", d)
		}
	}
	if err := <-done; err != nil || w.n != 20000000 {
		t.Fatalf("%v, %d bytes", err, w.n)
	}
}

// Health asked for usage reports the system the agent sees: its processes
// (this test's among them) and its memory; plain health leaves it out.
func TestHealthUsage(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	h, err := p.client.Health(ctx)
	if err != nil || h.Usage != nil {
		t.Fatalf("plain health: %+v %v", h.Usage, err)
	}
	h, err = p.client.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u := h.Usage; u == nil || u.Tasks < 2 || u.MemTotalBytes <= 0 || u.MemUsedBytes <= 0 || u.MemUsedBytes > u.MemTotalBytes {
		t.Fatalf("usage: %+v", h.Usage)
	}
}
