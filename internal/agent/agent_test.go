//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// socketPair returns two connected Unix stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// rawHost speaks the protocol by hand to an agent served in-process.
type rawHost struct {
	t     *testing.T
	conn  net.Conn
	r     *protocol.Reader
	done  chan error
	root  string
	nonce string
}

// rawSecret is the per-start secret of the raw hosts' agents.
const rawSecret = "raw-secret"

func newRawHost(t *testing.T) *rawHost {
	t.Helper()
	root := t.TempDir()
	a, err := New(Config{ID: "raw", Root: root, Version: "test", Secret: rawSecret, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := socketPair(t)
	h := &rawHost{t: t, conn: hostEnd, r: protocol.NewReader(hostEnd, 0), done: make(chan error, 1), root: root, nonce: protocol.NewNonce()}
	go func() { h.done <- a.ServeConn(context.Background(), agentEnd) }()
	t.Cleanup(func() {
		hostEnd.Close()
		<-h.done
		a.Close()
	})
	return h
}

func (h *rawHost) send(hd *protocol.Header, v any, body []byte) {
	h.t.Helper()
	if v != nil {
		hd.Data, _ = json.Marshal(v)
	}
	if err := protocol.WriteFrame(h.conn, hd, body); err != nil {
		h.t.Fatal(err)
	}
}

func (h *rawHost) read() *protocol.Frame {
	h.t.Helper()
	h.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := h.r.Read()
	if err != nil {
		h.t.Fatalf("read: %v", err)
	}
	return f
}

// hello completes the handshake (the host speaks first, with a nonce)
// and returns the agent's hello.
func (h *rawHost) hello() protocol.Hello {
	h.t.Helper()
	h.send(&protocol.Header{Kind: protocol.KindHello}, protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleHost,
		Window: protocol.DefaultWindow, Nonce: h.nonce}, nil)
	f := h.read()
	var peer protocol.Hello
	if f.Kind != protocol.KindHello || json.Unmarshal(f.Data, &peer) != nil {
		h.t.Fatalf("first frame: %+v", f.Header)
	}
	return peer
}

func TestHelloAnnouncesEveryCommand(t *testing.T) {
	h := newRawHost(t)
	peer := h.hello()
	if peer.Role != protocol.RoleAgent || peer.Neuron != "raw" || peer.Protocol != protocol.Version() || peer.MaxBody != protocol.MaxBody {
		t.Fatalf("%+v", peer)
	}
	caps := map[string]bool{}
	for _, c := range peer.Caps {
		caps[c] = true
	}
	for _, c := range protocol.Commands() {
		if !caps[string(c)] {
			t.Errorf("hello does not announce %s", c)
		}
	}
	// The agent answers the host's nonce with a proof of its secret, and
	// never sends the secret itself.
	if !protocol.CheckProof(rawSecret, "raw", h.nonce, peer.Proof) {
		t.Errorf("proof %q does not answer the nonce", peer.Proof)
	}
	if b, _ := json.Marshal(peer); strings.Contains(string(b), rawSecret) {
		t.Errorf("the hello holds the secret: %s", b)
	}
}

func TestUnknownCommandIsUnsupported(t *testing.T) {
	h := newRawHost(t)
	h.hello()
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: "teleport"}, struct{}{}, nil)
	f := h.read()
	if f.Kind != protocol.KindResponse || f.ID != 1 || f.Err == nil || f.Err.Code != protocol.CodeUnsupported {
		t.Fatalf("%+v", f.Header)
	}
	// The session goes on.
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 2, Cmd: protocol.CmdHealth}, struct{}{}, nil)
	if f := h.read(); f.ID != 2 || f.Err != nil {
		t.Fatalf("%+v", f.Header)
	}
}

func TestBadArgumentsAndIDs(t *testing.T) {
	h := newRawHost(t)
	h.hello()
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdStat, Data: json.RawMessage(`{"path":12}`)}, nil, nil)
	if f := h.read(); f.Err == nil || f.Err.Code != protocol.CodeBadRequest {
		t.Fatalf("wrong argument type: %+v", f.Header)
	}
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 0, Cmd: protocol.CmdHealth}, struct{}{}, nil)
	if f := h.read(); f.Err == nil || f.Err.Code != protocol.CodeBadRequest {
		t.Fatalf("request id 0: %+v", f.Header)
	}
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 5, Cmd: protocol.CmdFileRead}, protocol.FileReadArgs{Path: "x", Length: protocol.MaxBody + 1}, nil)
	if f := h.read(); f.Err == nil || f.Err.Code != protocol.CodeTooLarge {
		t.Fatalf("oversized read: %+v", f.Header)
	}
}

func TestOversizedFrameClosesTheSession(t *testing.T) {
	h := newRawHost(t)
	h.hello()
	var p [protocol.PrefixSize]byte
	binary.BigEndian.PutUint32(p[0:], 2)
	binary.BigEndian.PutUint32(p[4:], 1<<31) // a 2 GiB body
	h.conn.Write(p[:])
	h.conn.Write([]byte("{}"))
	select {
	case err := <-h.done:
		if !errors.Is(err, protocol.ErrFrameTooLarge) {
			t.Fatalf("session ended with %v, want ErrFrameTooLarge", err)
		}
		h.done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("the agent kept the session open after an oversized frame")
	}
}

func TestWrongProtocolMajorIsRefused(t *testing.T) {
	h := newRawHost(t)
	h.send(&protocol.Header{Kind: protocol.KindHello}, protocol.Hello{Protocol: "2.0", Role: protocol.RoleHost}, nil)
	select {
	case err := <-h.done:
		if err == nil {
			t.Fatal("a host with protocol 2.0 was accepted")
		}
		h.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("session stayed open")
	}
}

func TestCancelKillsTheCommand(t *testing.T) {
	h := newRawHost(t)
	h.hello()
	pidFile := filepath.Join(h.root, "pid")
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdExec}, protocol.ExecArgs{Command: protocol.Command{Shell: "echo $$ > pid; exec sleep 60"}}, nil)
	var pid int
	waittest.Until(30*time.Second, func() bool {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 1 {
			json.Unmarshal(b[:len(b)-1], &pid)
			return true
		}
		return false
	})
	if pid == 0 {
		t.Fatal("command did not start")
	}
	h.send(&protocol.Header{Kind: protocol.KindCancel, ID: 1}, nil, nil)
	gone := func() bool {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return syscall.Kill(pid, 0) != nil
	}
	if !waittest.Until(30*time.Second, gone) {
		t.Fatalf("process %d survived cancel", pid)
	}
}

// The shutdown command ends every process the agent started, then Run returns.
func TestShutdownEndsChildren(t *testing.T) {
	dir := t.TempDir()
	a, err := New(Config{ID: "sd", Root: dir, Version: "test", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, agentEnd := socketPair(t)
	defer hostEnd.Close()
	done := make(chan error, 1)
	go func() { done <- a.ServeConn(context.Background(), agentEnd) }()
	h := &rawHost{t: t, conn: hostEnd, r: protocol.NewReader(hostEnd, 0)}
	h.hello()
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdProcStart}, protocol.ProcStartArgs{Command: protocol.Command{Shell: "sleep 60 & sleep 60"}}, nil)
	f := h.read()
	var info protocol.ProcInfo
	if f.Err != nil || json.Unmarshal(f.Data, &info) != nil || info.PID == 0 {
		t.Fatalf("%+v", f.Header)
	}
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 2, Cmd: protocol.CmdShutdown}, protocol.ShutdownArgs{GraceMs: 500}, nil)
	if f := h.read(); f.ID != 2 || f.Err != nil {
		t.Fatalf("shutdown: %+v", f.Header)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the session did not end after shutdown")
	}
	a.Close()
	if live := liveInGroup(info.PID); len(live) > 0 {
		t.Fatalf("processes %v of group %d survived shutdown", live, info.PID)
	}
}

// liveInGroup lists the processes of group pgid that are not zombies.
func liveInGroup(pgid int) []int {
	var live []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			live = append(live, pid)
		}
	}
	return live
}

// watched reports whether this process has an inotify watch on dir (as
// /proc/self/fdinfo shows).
func watched(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return false
	}
	ino := []byte(fmt.Sprintf(" ino:%x ", st.Ino))
	fds, _ := os.ReadDir("/proc/self/fdinfo")
	for _, fd := range fds {
		b, _ := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if bytes.Contains(b, []byte("inotify wd:")) && bytes.Contains(b, ino) {
			return true
		}
	}
	return false
}

// An agent whose channel directory is removed (its neuron was destroyed
// while it was not looking) ends its processes and exits.
func TestChannelDirRemovalStopsTheAgent(t *testing.T) {
	base := t.TempDir()
	ch := filepath.Join(base, "ch")
	os.MkdirAll(ch, 0o700)
	a, err := New(Config{ID: "gone", Root: base, ChannelDir: ch, Version: "test", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	waittest.For(t, 30*time.Second, "the agent to watch its channel directory", func() bool { return watched(ch) })
	os.RemoveAll(ch)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the agent kept running without its channel directory")
	}
}

// An agent with no inotify instance to spare waits on the channel
// directory's doorbell: a host that places its socket and rings is dialled
// although the agent's unrung rescan is an hour away.
func TestDoorbellWakesAnAgentWithoutInotify(t *testing.T) {
	init0, rescan0 := inotifyInit, bellRescan
	inotifyInit = func() (int, error) { return -1, syscall.EMFILE }
	bellRescan = time.Hour
	t.Cleanup(func() { inotifyInit, bellRescan = init0, rescan0 })
	base := t.TempDir()
	ch := filepath.Join(base, "ch")
	os.MkdirAll(ch, 0o700)
	bell := filepath.Join(ch, protocol.Doorbell)
	if err := syscall.Mkfifo(bell, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{ID: "bell", Root: base, ChannelDir: ch, Version: "test", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := waittest.Recv(t, 30*time.Second, "the agent to stop", done); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waittest.For(t, 30*time.Second, "the agent to open the doorbell", func() bool { return opened(bell) })
	// As a host does: listen under a dot-name, rename, ring.
	ln, err := net.Listen("unix", filepath.Join(ch, ".h.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Rename(filepath.Join(ch, ".h.sock"), filepath.Join(ch, "h.sock")); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(bell, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte{1})
	w.Close()
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("the rung agent did not dial: %v", err)
	}
	c.Close()
}

// opened reports whether this process has path open.
func opened(path string) bool {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && l == path {
			return true
		}
	}
	return false
}

// What the agent starts goes first when a memory ceiling is reached: the
// kernel kills one of its processes, not the agent (TestCeilings in nsbox
// shows the moment this matters), and the agent keeps its own value.
func TestChildrenAreOOMVictimsFirst(t *testing.T) {
	h := newRawHost(t)
	h.hello()
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdProcStart}, protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"sleep", "60"}}}, nil)
	f := h.read()
	var info protocol.ProcInfo
	if f.Err != nil || json.Unmarshal(f.Data, &info) != nil || info.PID == 0 {
		t.Fatalf("%+v", f.Header)
	}
	defer syscall.Kill(info.PID, syscall.SIGKILL)
	got, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", info.PID))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != string(oomFirst) {
		t.Fatalf("a command's oom_score_adj is %q, want %s", got, oomFirst)
	}
	mine, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(mine)) == string(oomFirst) {
		t.Fatalf("the agent's own oom_score_adj is %s too: the test cannot tell", mine)
	}
}
