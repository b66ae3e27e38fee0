//go:build linux

package link_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// DialPort reaches a server on the agent's loopback: bytes both ways in
// order, a half-close the server sees as EOF, a close the server sees,
// and nothing listening answered NOT_FOUND.
func TestDialPort(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// An echo server that upper-cases nothing: it copies until EOF, then
	// says how much it read.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(c, c)
				io.WriteString(c, "\nread "+strconv.FormatInt(n, 10))
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := p.client.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	go func() {
		conn.Write(data)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data...), []byte("\nread "+strconv.Itoa(len(data)))...)
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes, want %d (equal prefix: %v)", len(got), len(want), bytes.HasPrefix(got, data[:min(len(got), len(data))]))
	}
	conn.Close()

	// An HTTP exchange over it, as the API's proxy makes them.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello "+r.URL.Path) })}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(hl)
	defer srv.Close()
	hc, err := p.client.DialPort(ctx, hl.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(hc, "GET /x HTTP/1.1\r\nHost: n\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if string(body) != "hello /x" {
		t.Fatalf("HTTP through the port: %q", body)
	}
	// Close while a read waits: it returns.
	done := make(chan error, 1)
	go func() { _, err := hc.Read(make([]byte, 1)); done <- err }()
	hc.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a Read waiting on a closed port connection did not return")
	}

	// Nothing listens.
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	if _, err := p.client.DialPort(ctx, freePort); !protocol.HasCode(err, protocol.CodeNotFound) {
		t.Fatalf("a port nothing listens on: %v, want NOT_FOUND", err)
	}
	for _, bad := range []int{0, -1, 70000} {
		if _, err := p.client.DialPort(ctx, bad); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Errorf("port %d: %v, want BAD_REQUEST", bad, err)
		}
	}
}
