//go:build linux

package link_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// proxyGet fetches target through the proxy at proxyAddr and returns the
// status line's code, or 0 when the proxy did not answer HTTP.
func proxyGet(t *testing.T, proxyAddr, target string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, strings.TrimPrefix(target, "http://"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The egress tunnel (kube mode's way out): the agent's egress listener
// carries each connection over the one egress_tunnel request a host
// holds, and the host's proxy decides. Before any host holds it, and
// after the host lets go, a connection is answered 502; a second host is
// refused while the first holds it; an agent with no listener has no
// tunnel to give.
func TestEgressTunnel(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream saw "+r.URL.Path)
	}))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")
	denied := freeAddr(t)
	listen := freeAddr(t)
	p := newPair(t, func(c *agent.Config) { c.Egress = listen })
	ctx := context.Background()

	if code, body := proxyGet(t, listen, up.URL+"/early"); code != http.StatusBadGateway {
		t.Fatalf("with no host holding the tunnel: %d %q, want 502", code, body)
	}

	pol, err := allowlist.Parse([]string{upAddr})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	proxy := &egress.Proxy{Policy: pol, Dial: d.DialContext}
	conn, err := p.client.EgressTunnel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- proxy.ServeTunnel(ctx, conn) }()

	if code, body := proxyGet(t, listen, up.URL+"/allowed"); code != http.StatusOK || body != "upstream saw /allowed" {
		t.Fatalf("allowed: %d %q", code, body)
	}
	if code, body := proxyGet(t, listen, "http://"+denied+"/"); code != http.StatusForbidden {
		t.Fatalf("not in the allow-list: %d %q, want 403", code, body)
	}
	u, _ := url.Parse(up.URL)
	if _, err := p.client.EgressTunnel(ctx); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Fatalf("a second host while the first holds the tunnel: %v", err)
	}

	// The host lets go: the way out is closed again, and free to take.
	conn.Close()
	if err := <-served; err != nil {
		t.Fatalf("the host's end: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := proxyGet(t, listen, up.URL+"/late")
		if code == http.StatusBadGateway {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the host let go: %d, want 502", code)
		}
	}
	var again net.Conn
	for {
		again, err = p.client.EgressTunnel(ctx)
		if err == nil {
			break
		}
		if !protocol.HasCode(err, protocol.CodeBadRequest) || time.Now().After(deadline) {
			t.Fatalf("taking the tunnel again: %v", err)
		}
	}
	go proxy.ServeTunnel(ctx, again)
	if code, body := proxyGet(t, listen, "http://"+u.Host+"/again"); code != http.StatusOK {
		t.Fatalf("through the second holder: %d %q", code, body)
	}
	again.Close()

	plain := newPair(t)
	if _, err := plain.client.EgressTunnel(ctx); !protocol.HasCode(err, protocol.CodeNotFound) {
		t.Fatalf("an agent with no egress listener: %v", err)
	}
	for _, addr := range []string{"0.0.0.0:3128", "10.0.0.1:3128", "localhost:3128", "3128"} {
		if _, err := agent.New(agent.Config{Egress: addr}); err == nil || !strings.Contains(err.Error(), "egress listener") {
			t.Errorf("agent.New with egress %q: %v", addr, err)
		}
	}
}
