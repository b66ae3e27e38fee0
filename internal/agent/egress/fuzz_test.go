package egress

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// FuzzProxyRequest sends arbitrary bytes to the enforcing proxy as a
// neuron's client would: it must never panic, never connect anywhere its
// allow-list does not allow (only allowed.example:443 and
// plain.example:80, at the one address each resolves to), and answer, if
// it answers, with an HTTP/1.1 status line.
func FuzzProxyRequest(f *testing.F) {
	for _, s := range []string{
		"CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n",
		"CONNECT denied.example:443 HTTP/1.1\r\n\r\n",
		"GET http://plain.example/x HTTP/1.1\r\nHost: plain.example\r\n\r\n",
		"GET http://plain.example:80/x?y HTTP/1.1\r\nHost: other\r\nContent-Length: 3\r\n\r\nabc",
		"GET http://user:pw@plain.example/ HTTP/1.1\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n",
		"GET /relative HTTP/1.1\r\nHost: plain.example\r\n\r\n",
		"CONNECT allowed.example:443 HTTP/1.0\r\n" + strings.Repeat("X-A: b\r\n", 10) + "\r\n",
		"GET http://plain.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"\r\n\r\n", "CONNECT", "GET http://%41/ HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	pol, err := allowlist.Parse([]string{"allowed.example:443", "plain.example:80"})
	if err != nil {
		f.Fatal(err)
	}
	addrs := map[string]netip.Addr{"allowed.example": netip.MustParseAddr("203.0.113.7"), "plain.example": netip.MustParseAddr("203.0.113.8")}
	allowed := map[string]bool{"203.0.113.7:443": true, "203.0.113.8:80": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		var mu sync.Mutex
		var dialled []string
		p := &Proxy{Policy: pol, Linger: 50 * time.Millisecond,
			Resolve: func(ctx context.Context, name string) ([]netip.Addr, error) {
				if a, ok := addrs[strings.ToLower(strings.TrimSuffix(name, "."))]; ok {
					return []netip.Addr{a}, nil
				}
				return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
			},
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialled = append(dialled, addr)
				mu.Unlock()
				a, b := net.Pipe()
				go func() { io.Copy(io.Discard, b); b.Close() }()
				return a, nil
			}}
		client, server := socketPair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() { defer close(done); p.handle(ctx, server) }()
		// The whole request, then the end of it: the proxy answers, or
		// ends the connection, on what it got.
		go func() { client.Write(data); client.CloseWrite() }()
		var out bytes.Buffer
		client.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(&out, client)
		client.Close()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, a := range dialled {
			if !allowed[a] {
				t.Fatalf("the proxy dialled %s for %q", a, data)
			}
		}
		if out.Len() > 0 && !bytes.HasPrefix(out.Bytes(), []byte("HTTP/1.1 ")) {
			t.Fatalf("the proxy answered %q to %q", out.Bytes(), data)
		}
	})
}

// socketPair is a connected pair of stream sockets (one end closes its
// writing half, as a client that sent its request does).
func socketPair(t testing.TB) (*net.UnixConn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]).(*net.UnixConn), conn(fds[1])
}
