package vsock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/vsock"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func newMuxer(t *testing.T) (*fakefc.Muxer, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "vs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uds := filepath.Join(dir, "v.sock")
	m, err := fakefc.NewMuxer(uds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, uds
}

// echo serves a guest port: it greets, then echoes.
func echo(c net.Conn) {
	defer c.Close()
	c.Write([]byte("hi\n"))
	io.Copy(c, c)
}

func TestDialConnectOK(t *testing.T) {
	m, uds := newMuxer(t)
	m.GuestListen(52, echo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := vsock.Dial(ctx, uds, 52)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.HostPort == 0 {
		t.Error("no host port from OK")
	}
	// The greeting may arrive with the OK line: it must not be lost.
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi\n" {
		t.Fatalf("greeting: %q %v", buf, err)
	}
	c.Write([]byte("ping"))
	buf = make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}

// Until the guest listens, Firecracker closes the connection without an
// OK: that is retryable, and DialRetry gets through once it listens.
func TestDialRetryWhileGuestBoots(t *testing.T) {
	m, uds := newMuxer(t)
	ctx := context.Background()
	_, err := vsock.Dial(ctx, uds, 52)
	var re *vsock.RefusedError
	if !errors.As(err, &re) || !vsock.Retryable(err) || !strings.Contains(err.Error(), "nothing listens") {
		t.Fatalf("before the guest listens: %v", err)
	}
	// The guest listens once DialRetry has been refused too.
	go func() {
		waittest.Until(30*time.Second, func() bool { return m.Refused() >= 2 })
		m.GuestListen(52, echo)
	}()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := vsock.DialRetry(dctx, uds, 52, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestDialRetryGivesUp(t *testing.T) {
	_, uds := newMuxer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := vsock.DialRetry(ctx, uds, 52, time.Second)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last attempt") {
		t.Fatalf("got %v", err)
	}
}

func TestDialNoSocket(t *testing.T) {
	_, err := vsock.Dial(context.Background(), filepath.Join(t.TempDir(), "none.sock"), 52)
	if err == nil || !vsock.Retryable(err) {
		t.Fatalf("a missing socket (a VM not up yet) must be retryable: %v", err)
	}
}

// A reply other than OK is refused with what it said.
func TestDialBadReply(t *testing.T) {
	dir := t.TempDir()
	uds := filepath.Join(dir, "v.sock")
	ln, err := net.Listen("unix", uds)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 64)
		c.Read(b)
		c.Write([]byte("NOPE what\n"))
	}()
	_, err = vsock.Dial(context.Background(), uds, 52)
	var re *vsock.RefusedError
	if !errors.As(err, &re) || re.Reply != "NOPE what" {
		t.Fatalf("got %v", err)
	}
}

// A transport reset (around a snapshot) ends the connection.
func TestResetEndsConnections(t *testing.T) {
	m, uds := newMuxer(t)
	m.GuestListen(52, echo)
	c, err := vsock.Dial(context.Background(), uds, 52)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m.Reset()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("after the reset the stream must end, not fail: %v", err)
	}
}

// Guest-initiated connections arrive on <uds>_<port>.
func TestGuestInitiated(t *testing.T) {
	m, uds := newMuxer(t)
	if got := vsock.ListenPath(uds, 1024); got != uds+"_1024" {
		t.Fatalf("ListenPath: %s", got)
	}
	ln, err := vsock.Listen(uds, 1024, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if st, err := os.Stat(uds + "_1024"); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("listener socket: %v %v", st.Mode(), err)
	}
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- string(b)
	}()
	gc, err := m.GuestDial(context.Background(), 1024)
	if err != nil {
		t.Fatal(err)
	}
	gc.Write([]byte("from the guest"))
	gc.Close()
	select {
	case s := <-got:
		if s != "from the guest" {
			t.Fatalf("host got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no guest connection")
	}
}
