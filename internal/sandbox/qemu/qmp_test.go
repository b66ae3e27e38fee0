package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// fakeQMP is a QMP server speaking the wire format QEMU does: a greeting,
// capability negotiation first, events interleaved with answers, errors
// as {"error":{"class","desc"}}, and descriptors passed with getfd. It
// records the commands it was given.
type fakeQMP struct {
	t    *testing.T
	path string
	ln   *net.UnixListener

	mu       sync.Mutex
	commands []string
	fds      map[string]*os.File
	migrated int // query-migrate calls before "completed"
}

func newFakeQMP(t *testing.T) *fakeQMP {
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeQMP{t: t, path: filepath.Join(dir, "qmp.sock"), fds: map[string]*os.File{}}
	f.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: f.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := f.ln.AcceptUnix()
			if err != nil {
				return
			}
			f.serve(c)
		}
	}()
	t.Cleanup(func() {
		f.ln.Close()
		<-done
		for _, fd := range f.fds {
			fd.Close()
		}
	})
	return f
}

func (f *fakeQMP) serve(c *net.UnixConn) {
	defer c.Close()
	send := func(v any) {
		b, _ := json.Marshal(v)
		c.Write(append(b, '\n'))
	}
	send(map[string]any{"QMP": map[string]any{"version": map[string]any{"qemu": map[string]int{"major": 7}}, "capabilities": []string{}}})
	negotiated := false
	r := bufio.NewReader(c)
	for {
		buf := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		r.Reset(strings.NewReader(string(buf[:n])))
		line, _ := r.ReadBytes('\n')
		var req struct {
			Execute   string         `json:"execute"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal(line, &req); err != nil {
			send(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "JSON parse error"}})
			continue
		}
		f.mu.Lock()
		f.commands = append(f.commands, req.Execute)
		f.mu.Unlock()
		if !negotiated && req.Execute != "qmp_capabilities" {
			send(map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "Expecting capabilities negotiation with 'qmp_capabilities'"}})
			continue
		}
		// An event before every answer: clients must skip them.
		send(map[string]any{"event": "RESUME", "timestamp": map[string]int{"seconds": 1}})
		switch req.Execute {
		case "qmp_capabilities":
			negotiated = true
			send(map[string]any{"return": map[string]any{}})
		case "getfd":
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil || len(msgs) != 1 {
				send(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "No file descriptor supplied via SCM_RIGHTS"}})
				continue
			}
			fds, _ := unix.ParseUnixRights(&msgs[0])
			f.mu.Lock()
			f.fds[req.Arguments["fdname"].(string)] = os.NewFile(uintptr(fds[0]), "passed")
			f.mu.Unlock()
			send(map[string]any{"return": map[string]any{}})
		case "migrate", "migrate-incoming":
			uri, _ := req.Arguments["uri"].(string)
			name, ok := strings.CutPrefix(uri, "fd:")
			f.mu.Lock()
			fd := f.fds[name]
			f.mu.Unlock()
			if !ok || fd == nil {
				send(map[string]any{"error": map[string]string{"class": "GenericError", "desc": "File descriptor named '" + name + "' has not been found"}})
				continue
			}
			if req.Execute == "migrate" {
				fd.Write([]byte("QEVM state"))
			}
			send(map[string]any{"return": map[string]any{}})
		case "query-migrate":
			f.mu.Lock()
			f.migrated++
			status := "active"
			if f.migrated >= 3 {
				status, f.migrated = "completed", 0
			}
			f.mu.Unlock()
			send(map[string]any{"return": map[string]any{"status": status}})
		case "migrate-set-parameters", "stop", "cont":
			send(map[string]any{"return": map[string]any{}})
		case "query-status":
			send(map[string]any{"return": map[string]any{"status": "running", "running": true}})
		default:
			send(map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "The command " + req.Execute + " has not been found"}})
		}
	}
}

func TestQMPClient(t *testing.T) {
	f := newFakeQMP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := dialQMP(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var st struct {
		Status string `json:"status"`
	}
	if err := q.run(ctx, "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Fatalf("query-status: %+v %v", st, err)
	}
	var qe *QMPError
	if err := q.run(ctx, "no-such-command", nil, nil); !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("an unknown command: %v", err)
	}
	state, err := os.Create(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.saveState(ctx, state); err != nil {
		t.Fatal(err)
	}
	state.Close()
	if b, _ := os.ReadFile(state.Name()); string(b) != "QEVM state" {
		t.Fatalf("the state went elsewhere than the descriptor given: %q", b)
	}
	in, _ := os.Open(state.Name())
	defer in.Close()
	if err := q.loadState(ctx, in); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := strings.Join(f.commands, " ")
	f.mu.Unlock()
	want := "qmp_capabilities query-status no-such-command migrate-set-parameters getfd migrate query-migrate query-migrate query-migrate getfd migrate-incoming query-migrate query-migrate query-migrate"
	if got != want {
		t.Fatalf("commands:\n%s\nwant\n%s", got, want)
	}
}

func TestQMPHonoursContext(t *testing.T) {
	// A server that greets and then never answers.
	dir, _ := os.MkdirTemp("", "qmp")
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(`{"QMP":{"version":{}}}` + "\n"))
		buf := make([]byte, 1024)
		for {
			if _, err := c.Read(buf); err != nil {
				c.Close()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// The server never answers: a dial that did not honour the context
	// would never return, so the wait's deadline is the failure.
	dialed := make(chan error, 1)
	go func() {
		_, err := dialQMP(ctx, filepath.Join(dir, "s"))
		dialed <- err
	}()
	if err := waittest.Recv(t, 2*time.Minute, "the dial to honour its context", dialed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a silent QMP: %v", err)
	}
}

func TestClaimPort(t *testing.T) {
	dir := t.TempDir()
	n0, l0, err := claimPort(dir, 2)
	if err != nil || n0 != 0 {
		t.Fatal(n0, err)
	}
	n1, l1, err := claimPort(dir, 2)
	if err != nil || n1 != 1 {
		t.Fatal(n1, err)
	}
	if _, _, err := claimPort(dir, 2); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a third claim of two ports: %v", err)
	}
	l0.Close()
	if n, l, err := claimPort(dir, 2); err != nil || n != 0 {
		t.Fatalf("a freed port: %d %v", n, err)
	} else {
		l.Close()
	}
	l1.Close()
}

func TestAccelFromEnvironment(t *testing.T) {
	t.Setenv(EnvAccel, "tcg")
	if a, err := chooseAccel(context.Background(), "qemu", nil); err != nil || a.KVM {
		t.Fatalf("tcg: %+v %v", a, err)
	}
	t.Setenv(EnvAccel, "kvm")
	if a, err := chooseAccel(context.Background(), "qemu", nil); err != nil || !a.KVM {
		t.Fatalf("kvm: %+v %v", a, err)
	}
	t.Setenv(EnvAccel, "fast")
	if _, err := chooseAccel(context.Background(), "qemu", nil); err == nil || !strings.Contains(err.Error(), "auto, kvm or tcg") {
		t.Fatalf("a bad value: %v", err)
	}
}
