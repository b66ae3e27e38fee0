//go:build linux

package link_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A real agent that goes away and comes back (a restart) is reconnected.
func TestRealAgentRestart(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo $$ > exec.pid; exec sleep 30"}, Timeout: link.NoTimeout})
		done <- err
	}()
	waittest.For(t, 30*time.Second, "the exec to run", func() bool {
		b, err := os.ReadFile(filepath.Join(p.root, "exec.pid"))
		return err == nil && len(b) > 0
	})
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

// stalledWriter takes no write until its gate opens: a reader that has
// stopped reading.
type stalledWriter struct {
	gate    chan struct{}
	stalled chan struct{} // closed at the first write
	once    sync.Once
	n       int
}

func (w *stalledWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.stalled) })
	<-w.gate
	w.n += len(p)
	return len(p), nil
}

// A stalled reader of one stream holds back only that stream: the agent
// stops reading the command's output (so nothing is lost or buffered
// without bound) while other requests on the same connection go on. A
// health call held behind the stream would wait for ever: the deadline
// below is the failure, not a bound on how fast the calls are.
func TestFlowControlIsPerStream(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	w := &stalledWriter{gate: make(chan struct{}), stalled: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		res, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "head -c 20000000 /dev/zero"}, Stdout: w, Timeout: link.NoTimeout})
		if err == nil && res.StdoutLen != 20000000 {
			err = errors.New("short output")
		}
		done <- err
	}()
	waittest.Recv(t, 30*time.Second, "the command's first output", w.stalled)
	healthy := make(chan error, 1)
	go func() {
		for i := 0; i < 20; i++ {
			if _, err := p.client.Health(ctx); err != nil {
				healthy <- err
				return
			}
		}
		healthy <- nil
	}()
	if err := waittest.Recv(t, 2*time.Minute, "20 health calls beside a stalled stream", healthy); err != nil {
		t.Fatal(err)
	}
	close(w.gate)
	if err := waittest.Recv(t, 2*time.Minute, "the stream to finish", done); err != nil || w.n != 20000000 {
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

// A socket is bound in a staging directory beside the channel
// directories, kept from call to call: it is left empty, a channel
// directory whose mode is changed gets it back, and a staging directory
// that is not this user's private directory (a symlink, one others may
// enter) is refused, not used.
func TestListenStage(t *testing.T) {
	base := shortTempDir(t)
	chdir := filepath.Join(base, "ch")
	listen := func() (*link.Link, error) { return link.Listen(filepath.Join(chdir, "h.sock"), link.Options{}) }
	l, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	stage := filepath.Join(base, fmt.Sprintf(".listen-%d", os.Geteuid()))
	if ents, err := os.ReadDir(stage); err != nil || len(ents) != 0 {
		t.Fatalf("the stage after a listen: %v %v", ents, err)
	}
	for _, wrong := range []os.FileMode{0o755, 0o700 | os.ModeSetgid, 0o700 | os.ModeSticky} {
		if err := os.Chmod(chdir, wrong); err != nil {
			t.Fatal(err)
		}
		l, err = listen()
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if st, err := os.Stat(chdir); err != nil || st.Mode() != os.ModeDir|0o700 {
			t.Fatalf("the channel directory's mode %v was not set back: %v %v", wrong, st.Mode(), err)
		}
	}
	// Another user's stage beside it (root's run on this home) is not
	// this one's to use, nor in its way.
	theirs := filepath.Join(base, fmt.Sprintf(".listen-%d", os.Geteuid()+1))
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if l, err = listen(); err != nil {
		t.Fatalf("with another user's stage beside it: %v", err)
	}
	l.Close()
	if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
		t.Errorf("bound in another user's stage: %v", ents)
	}
	other := filepath.Join(base, "elsewhere")
	os.Mkdir(other, 0o700)
	for _, bad := range []func() error{
		func() error { return os.Chmod(stage, 0o777) },
		func() error { os.Remove(stage); return os.Symlink(other, stage) },
	} {
		os.RemoveAll(stage)
		os.Mkdir(stage, 0o700)
		if err := bad(); err != nil {
			t.Fatal(err)
		}
		if l, err := listen(); err == nil {
			l.Close()
			t.Errorf("listened with the stage %s", stage)
		}
		if ents, _ := os.ReadDir(other); len(ents) != 0 {
			t.Errorf("bound through the symlinked stage: %v", ents)
		}
	}
}
