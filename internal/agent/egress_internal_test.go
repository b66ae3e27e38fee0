package agent

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// A host that grants the egress tunnel's request almost no credit and
// then ends its input does not leave the tunnel held: the write waiting
// for credit gives up with the stream, the request is answered, and
// another host may take the tunnel. Nothing is written as the request's
// after its answer (a later connection is answered 502 by the agent).
func TestEgressTunnelEndsWithItsInput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a, err := New(Config{ID: "raw", Root: t.TempDir(), Version: "test", Secret: rawSecret, Egress: addr, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := a.serveEgress(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	hostEnd, agentEnd := socketPair(t)
	h := &rawHost{t: t, conn: hostEnd, r: protocol.NewReader(hostEnd, 0), done: make(chan error, 1), nonce: protocol.NewNonce()}
	go func() { h.done <- a.ServeConn(context.Background(), agentEnd) }()
	defer func() { hostEnd.Close(); <-h.done; a.Close() }()
	h.send(&protocol.Header{Kind: protocol.KindHello}, protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleHost,
		Window: 10, Nonce: h.nonce}, nil)
	if f := h.read(); f.Kind != protocol.KindHello {
		t.Fatalf("first frame: %+v", f.Header)
	}
	h.send(&protocol.Header{Kind: protocol.KindRequest, ID: 7, Cmd: protocol.CmdEgress}, struct{}{}, nil)
	if f := h.read(); f.Kind != protocol.KindEvent || f.Stream != protocol.StreamConnected {
		t.Fatalf("want connected: %+v", f.Header)
	}
	// A program's connection: the agent says hello on the tunnel, 45
	// bytes, of which the credit takes 10; the rest waits.
	prog, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	go prog.Write([]byte("GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n"))
	if f := h.read(); f.Kind != protocol.KindEvent || f.Stream != protocol.StreamStdout {
		t.Fatalf("want the tunnel's hello: %+v %q", f.Header, f.Body)
	} else if len(f.Body) != 10 {
		t.Fatalf("the hello's first part: %q", f.Body)
	}
	h.send(&protocol.Header{Kind: protocol.KindInput, ID: 7, Stream: protocol.StreamStdin, EOF: true}, nil, nil)
	for {
		f := h.read() // within 10 s, or the test fails
		if f.Kind == protocol.KindResponse && f.ID == 7 {
			var res protocol.EgressResult
			if f.Err != nil || json.Unmarshal(f.Data, &res) != nil {
				t.Fatalf("the answer: %+v %s", f.Err, f.Data)
			}
			break
		}
	}
	// After its answer, nothing more as request 7's; a new program's
	// connection is answered 502 at once.
	prog2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer prog2.Close()
	prog2.Write([]byte("GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n"))
	prog2.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(prog2, buf); err != nil || string(buf) != "HTTP/1.1 502" {
		t.Fatalf("a connection after the tunnel's end: %q %v", buf, err)
	}
	hostEnd.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if f, err := h.r.Read(); err == nil {
		t.Errorf("after its answer, the agent sent %+v %q", f.Header, f.Body)
	}
}
