//go:build linux

package link_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// fakeAgent dials a link and speaks the protocol by hand.
type fakeAgent struct {
	t    *testing.T
	conn net.Conn
	r    *protocol.Reader
}

func dialFake(t *testing.T, l *link.Link, hello protocol.Hello) *fakeAgent {
	t.Helper()
	conn, err := protocol.DialUnix(context.Background(), l.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fa := &fakeAgent{t: t, conn: conn, r: protocol.NewReader(conn, 0)}
	data, _ := json.Marshal(hello)
	fa.write(&protocol.Header{Kind: protocol.KindHello, Data: data}, nil)
	if f := fa.read(); f == nil || f.Kind != protocol.KindHello {
		t.Fatalf("host hello: %+v", f)
	}
	return fa
}

func (fa *fakeAgent) write(h *protocol.Header, body []byte) {
	if err := protocol.WriteFrame(fa.conn, h, body); err != nil {
		fa.t.Logf("fake agent write: %v", err)
	}
}

func (fa *fakeAgent) read() *protocol.Frame {
	fa.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := fa.r.Read()
	if err != nil {
		return nil
	}
	return f
}

func agentHello(caps ...protocol.Cmd) protocol.Hello {
	if caps == nil {
		caps = protocol.Commands()
	}
	s := make([]string, len(caps))
	for i, c := range caps {
		s[i] = string(c)
	}
	return protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleAgent, Neuron: "n1", Caps: s, MaxBody: protocol.MaxBody, Window: protocol.DefaultWindow}
}

type events struct {
	mu  sync.Mutex
	got []link.ConnEvent
	ch  chan link.ConnEvent
}

func newListener(t *testing.T) (*link.Link, *events) {
	t.Helper()
	ev := &events{ch: make(chan link.ConnEvent, 16)}
	l, err := link.Listen(filepath.Join(shortTempDir(t), "ch", "h.sock"), link.Options{Neuron: "n1", OnEvent: func(e link.ConnEvent) {
		ev.mu.Lock()
		ev.got = append(ev.got, e)
		ev.mu.Unlock()
		ev.ch <- e
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, ev
}

func (e *events) wait(t *testing.T, kind link.EventKind) link.ConnEvent {
	t.Helper()
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event", kind)
		}
	}
}

func connected(t *testing.T, l *link.Link) *link.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.WaitConnected(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDisconnectFailsPendingAtOnce(t *testing.T) {
	l, ev := newListener(t)
	fa := dialFake(t, l, agentHello())
	c := connected(t, l)
	ev.wait(t, link.Connected)
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, err := c.Call(context.Background(), &link.Request{Cmd: protocol.CmdHealth, Timeout: time.Minute})
			errs <- err
		}()
	}
	for i := 0; i < 3; i++ { // the agent has the requests, and never answers
		if f := fa.read(); f == nil || f.Kind != protocol.KindRequest {
			t.Fatalf("request %d: %+v", i, f)
		}
	}
	start := time.Now()
	fa.conn.Close()
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if !protocol.HasCode(err, protocol.CodeNotRunning) {
				t.Fatalf("pending call: %v, want NOT_RUNNING", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("pending call hangs after the agent went away")
		}
	}
	t.Logf("all pending calls failed %s after the disconnect", time.Since(start))
	ev.wait(t, link.Disconnected)
	if _, err := l.Call(context.Background(), &link.Request{Cmd: protocol.CmdHealth}); !protocol.HasCode(err, protocol.CodeNotRunning) {
		t.Fatalf("later call: %v", err)
	}
	// A restarted agent connects again and the link carries on.
	fa2 := dialFake(t, l, agentHello())
	ev.wait(t, link.Connected)
	go func() {
		f := fa2.read()
		fa2.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(`{"version":"again"}`)}, nil)
	}()
	var h protocol.HealthResult
	resp, err := l.Call(context.Background(), &link.Request{Cmd: protocol.CmdHealth})
	if err != nil || resp.Decode(&h) != nil || h.Version != "again" {
		t.Fatalf("after reconnect: %+v %v", h, err)
	}
}

func TestMisbehavingAgentIsCutOff(t *testing.T) {
	cases := map[string]func(fa *fakeAgent, id uint64){
		"oversized frame": func(fa *fakeAgent, id uint64) {
			var p [8]byte
			binary.BigEndian.PutUint32(p[0:], 2)
			binary.BigEndian.PutUint32(p[4:], 1<<30)
			fa.conn.Write(append(p[:], "{}"...))
		},
		"garbage": func(fa *fakeAgent, id uint64) { fa.conn.Write([]byte("\x00\x00\x00\x05hello world")) },
		"event beyond the window": func(fa *fakeAgent, id uint64) {
			// More than the window in one event: no grant can have made room.
			fa.write(&protocol.Header{Kind: protocol.KindEvent, ID: id, Stream: "stdout"}, make([]byte, protocol.DefaultWindow+10))
		},
		"a request from the agent": func(fa *fakeAgent, id uint64) {
			fa.write(&protocol.Header{Kind: protocol.KindRequest, ID: 1, Cmd: protocol.CmdExec}, nil)
		},
	}
	for name, misbehave := range cases {
		t.Run(name, func(t *testing.T) {
			l, _ := newListener(t)
			fa := dialFake(t, l, agentHello())
			c := connected(t, l)
			s, err := c.Stream(context.Background(), &link.Request{Cmd: protocol.CmdProcAttach, Args: protocol.ProcAttachArgs{PID: 1, Follow: true}, Timeout: link.NoTimeout})
			if err != nil {
				t.Fatal(err)
			}
			f := fa.read()
			misbehave(fa, f.ID)
			for {
				_, err := s.Recv()
				if err == nil {
					continue
				}
				if err.Error() == "EOF" {
					_, err = s.Result()
				}
				if !protocol.HasCode(err, protocol.CodeNotRunning) {
					t.Fatalf("%v, want NOT_RUNNING", err)
				}
				break
			}
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("connection not closed")
			}
		})
	}
}

func TestUnannouncedCommandIsUnsupportedLocally(t *testing.T) {
	l, _ := newListener(t)
	fa := dialFake(t, l, agentHello(protocol.CmdHealth))
	c := connected(t, l)
	_, err := c.Call(context.Background(), &link.Request{Cmd: protocol.CmdExec})
	if !protocol.HasCode(err, protocol.CodeUnsupported) {
		t.Fatalf("%v", err)
	}
	fa.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if f, err := fa.r.Read(); err == nil {
		t.Fatalf("the host sent %+v for a command the agent never announced", f.Header)
	}
}

func TestTimeoutSendsCancel(t *testing.T) {
	l, _ := newListener(t)
	fa := dialFake(t, l, agentHello())
	c := connected(t, l)
	_, err := c.Call(context.Background(), &link.Request{Cmd: protocol.CmdHealth, Timeout: 50 * time.Millisecond})
	if !protocol.HasCode(err, protocol.CodeTimeout) {
		t.Fatalf("%v", err)
	}
	req := fa.read()
	if req == nil || req.TimeoutMs != 50 {
		t.Fatalf("request: %+v", req)
	}
	if f := fa.read(); f == nil || f.Kind != protocol.KindCancel || f.ID != req.ID {
		t.Fatalf("want a cancel for %d, got %+v", req.ID, f)
	}
	// A late answer to the abandoned request is dropped quietly.
	fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: req.ID}, []byte("late body"))
	go func() {
		f := fa.read()
		fa.write(&protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: json.RawMessage(`{}`)}, nil)
	}()
	if _, err := c.Call(context.Background(), &link.Request{Cmd: protocol.CmdHealth}); err != nil {
		t.Fatalf("the connection suffered from a late answer: %v", err)
	}
	// Context cancellation also cancels, once the request is out.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { fa.read(); cancel() }()
	if _, err := c.Call(ctx, &link.Request{Cmd: protocol.CmdHealth}); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	for name, h := range map[string]protocol.Hello{
		"wrong neuron": {Protocol: protocol.Version(), Role: protocol.RoleAgent, Neuron: "other"},
		"wrong major":  {Protocol: "9.0", Role: protocol.RoleAgent, Neuron: "n1"},
		"not an agent": {Protocol: protocol.Version(), Role: protocol.RoleHost, Neuron: "n1"},
		"no version":   {Role: protocol.RoleAgent, Neuron: "n1"},
	} {
		t.Run(name, func(t *testing.T) {
			l, ev := newListener(t)
			conn, err := protocol.DialUnix(context.Background(), l.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			data, _ := json.Marshal(h)
			protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindHello, Data: data}, nil)
			e := ev.wait(t, link.Refused)
			if e.Err == nil {
				t.Fatal("refusal without a reason")
			}
			t.Logf("refused: %v", e.Err)
			if _, err := l.Conn(); !protocol.HasCode(err, protocol.CodeNotRunning) {
				t.Fatalf("a refused agent became the connection: %v", err)
			}
		})
	}
}

func TestTokenCheck(t *testing.T) {
	l, err := link.Listen(filepath.Join(shortTempDir(t), "h.sock"), link.Options{Neuron: "n1", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bad := agentHello()
	bad.Token = "guess"
	conn, _ := protocol.DialUnix(context.Background(), l.Path())
	data, _ := json.Marshal(bad)
	protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindHello, Data: data}, nil)
	r := protocol.NewReader(conn, 0)
	r.Read() // the host's hello
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Read(); err == nil {
		t.Fatal("a wrong token kept the connection open")
	}
	good := agentHello()
	good.Token = "s3cret"
	dialFake(t, l, good)
	connected(t, l)
}
