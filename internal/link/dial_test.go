//go:build linux

package link_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// freeAddr returns a loopback address nothing listens on (for a moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a log sink safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listeningAgent runs an agent that listens on addr for hosts with token.
func listeningAgent(t *testing.T, addr, token string, logs io.Writer) func() {
	t.Helper()
	stop, _ := startListeningAgent(t, addr, token, logs)
	return stop
}

// startListeningAgent is listeningAgent, which also says the agent's root.
func startListeningAgent(t *testing.T, addr, token string, logs io.Writer) (stop func(), root string) {
	t.Helper()
	root = t.TempDir()
	a, err := agent.New(agent.Config{ID: "t1", Root: root, Listen: addr, Token: token, Version: "test", Logger: log.New(logs, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop, root
}

// A dialling link reaches an agent that starts listening after it began
// dialling, and dials again when the agent comes back.
func TestDialLink(t *testing.T) {
	addr := freeAddr(t)
	const token = "0123456789abcdef0123456789abcdef"
	var dials atomic.Int32
	l := link.Dial(func(context.Context) (string, error) { dials.Add(1); return addr, nil }, link.Options{Neuron: "t1", Token: token, Software: "test"})
	defer l.Close()
	// A second look for the address: a dial of the closed port has failed.
	waittest.For(t, 30*time.Second, "the link to dial the closed port", func() bool { return dials.Load() >= 2 })
	stop := listeningAgent(t, addr, token, io.Discard)
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.WaitConnected(wctx); err != nil {
		t.Fatal(err)
	}
	res, err := l.Client().Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo over tcp"}})
	if err != nil || string(res.Stdout) != "over tcp\n" {
		t.Fatalf("exec: %v %+v", err, res)
	}
	stop()
	listeningAgent(t, addr, token, io.Discard)
	if !waittest.Until(30*time.Second, func() bool {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = l.Client().Health(hctx)
		return err == nil
	}) {
		t.Fatalf("the link did not dial the restarted agent: %v", err)
	}
}

// A host with the wrong token never connects, and the agent says nothing
// to it: its hello (which carries the token) is not sent.
func TestListeningAgentRefusesAWrongToken(t *testing.T) {
	addr := freeAddr(t)
	logs := &syncBuffer{}
	listeningAgent(t, addr, "the-right-token-the-right-token!!", logs)
	l := link.Dial(func(context.Context) (string, error) { return addr, nil }, link.Options{Neuron: "t1", Token: "a-wrong-token", Software: "test"})
	defer l.Close()
	wctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if _, err := l.WaitConnected(wctx); err == nil {
		t.Fatal("connected with a wrong token")
	}
	// By hand: a hello with a wrong token gets the connection closed, and
	// no frame back.
	var nc net.Conn
	var err error
	if !waittest.Until(30*time.Second, func() bool { nc, err = net.Dial("tcp", addr); return err == nil }) {
		t.Fatal(err)
	}
	defer nc.Close()
	hello, _ := json.Marshal(protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleHost, Token: "guess"})
	if err := protocol.NewFrameWriter(nc).Write(&protocol.Header{Kind: protocol.KindHello, Data: hello}, nil); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(nc); len(b) != 0 {
		t.Fatalf("the agent answered a wrong token with %d bytes (%v): %q", len(b), err, b)
	}
	if got := logs.String(); !bytes.Contains([]byte(got), []byte("wrong token")) {
		t.Errorf("the agent's log does not mention the refusal: %q", got)
	}
}

// A listening agent needs a token.
func TestListeningAgentNeedsAToken(t *testing.T) {
	a, err := agent.New(agent.Config{ID: "t1", Root: t.TempDir(), Listen: freeAddr(t), Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("an agent listened without a token")
	}
}
