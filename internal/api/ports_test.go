package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/portsign"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// portDaemon is a daemon with a token, a URL key and a domain, and a
// neuron "web" whose port server listens on port.
func portDaemon(t *testing.T) (d *daemon, key []byte, port int) {
	t.Helper()
	key = []byte(strings.Repeat("k", portsign.KeySize))
	d = newDaemon(t, api.Options{Token: "tok", URLKey: key, Domain: "cortex.test"})
	d.create(t, "web")
	m, st, err := d.set.FindExact(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(context.Background(), st.ID)
	if err != nil {
		t.Fatal(err)
	}
	port = sandboxtest.FreePort(t)
	sandboxtest.StartPortServer(t, context.Background(), c, port)
	return d, key, port
}

// get sends a GET to the daemon and returns the status, body and response.
func get(t *testing.T, d *daemon, path string, hdr map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", d.ts.URL+path, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

// The proxy carries requests to the neuron's server with the API's token
// or a signed URL, and never hands the neuron the token, the signed
// parameter or its cookie.
func TestPortProxy(t *testing.T) {
	d, key, port := portDaemon(t)
	base := fmt.Sprintf("/v1/neurons/web/ports/%d", port)
	tok := map[string]string{"Authorization": "Bearer tok"}

	code, body, _ := get(t, d, base+"/some/path?q=1", tok)
	if code != 200 || body != `hello from the neuron: GET /some/path?q=1 auth="" cookie=""` {
		t.Fatalf("with the token: %d %q", code, body)
	}
	if code, _, _ := get(t, d, base+"/", nil); code != 401 {
		t.Fatalf("without a token: %d", code)
	}
	signed := portsign.Sign(key, "web", port, time.Now().Add(time.Hour))
	code, body, resp := get(t, d, base+"/x?a=1&"+portsign.Param+"="+signed, map[string]string{"Cookie": "app=1"})
	if code != 200 || body != `hello from the neuron: GET /x?a=1 auth="" cookie="app=1"` {
		t.Fatalf("with a signed URL: %d %q", code, body)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == portsign.Cookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Path != base+"/" || !cookie.HttpOnly || cookie.Value != signed {
		t.Fatalf("the signed URL's cookie: %+v", cookie)
	}
	// The page's later requests carry the cookie, and their own
	// Authorization reaches the app.
	code, body, _ = get(t, d, base+"/asset.js", map[string]string{"Cookie": portsign.Cookie + "=" + signed + "; app=2", "Authorization": "Basic YXBw"})
	if code != 200 || body != `hello from the neuron: GET /asset.js auth="Basic YXBw" cookie="app=2"` {
		t.Fatalf("with the cookie: %d %q", code, body)
	}
	for name, tc := range map[string]string{
		"another port":   portsign.Sign(key, "web", port+1, time.Now().Add(time.Hour)),
		"another neuron": portsign.Sign(key, "web2", port, time.Now().Add(time.Hour)),
		"another key":    portsign.Sign([]byte(strings.Repeat("x", portsign.KeySize)), "web", port, time.Now().Add(time.Hour)),
		"expired":        portsign.Sign(key, "web", port, time.Now().Add(-time.Second)),
	} {
		if code, body, _ := get(t, d, base+"/?"+portsign.Param+"="+tc, nil); code != 401 {
			t.Errorf("a signed URL for %s: %d %q", name, code, body)
		}
	}
	// A signed URL lets in nothing but its port.
	if code, _, _ := get(t, d, "/v1/neurons/web?"+portsign.Param+"="+signed, nil); code != 401 {
		t.Errorf("a signed URL on another route: %d", code)
	}
	// By host: <port>-<id>.<domain>, the server sees the path as it is.
	host := fmt.Sprintf("%d-web.cortex.test", port)
	code, body, _ = get(t, d, "/app/index.html", map[string]string{"Host": host, "Authorization": "Bearer tok"})
	if code != 200 || body != `hello from the neuron: GET /app/index.html auth="" cookie=""` {
		t.Fatalf("routed by host: %d %q", code, body)
	}
	_, _, resp = get(t, d, "/?"+portsign.Param+"="+signed, map[string]string{"Host": host})
	if c := resp.Cookies(); len(c) != 1 || c[0].Path != "/" {
		t.Fatalf("a signed URL by host: cookies %+v", c)
	}
	if code, _, _ := get(t, d, "/v1/neurons", map[string]string{"Host": host, "Authorization": "Bearer tok"}); code != 200 {
		// /v1/neurons under the port's host is the app's path, not the API.
		t.Fatalf("the app's own /v1/neurons: %d", code)
	}
	// Nothing listening: 502 naming the port.
	closed := sandboxtest.FreePort(t)
	code, body, _ = get(t, d, fmt.Sprintf("/v1/neurons/web/ports/%d/", closed), tok)
	if code != 502 || !strings.Contains(body, fmt.Sprintf("nothing listens on port %d in neuron web", closed)) {
		t.Fatalf("a closed port: %d %q", code, body)
	}
	if code, _, _ := get(t, d, "/v1/neurons/web/ports/0/", tok); code == 200 {
		t.Fatalf("port 0 answered")
	}
	// A stopped neuron: NOT_RUNNING.
	if err := d.c.Destroy(context.Background(), "web", false); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, d, base+"/", tok); code != 409 || !strings.Contains(body, "NOT_RUNNING") {
		t.Fatalf("a stopped neuron: %d %q", code, body)
	}
}

// WebSocket and SSE through the proxy: upgraded, and unbuffered.
func TestPortProxyStreams(t *testing.T) {
	d, _, port := portDaemon(t)
	base := fmt.Sprintf("%s/v1/neurons/web/ports/%d", d.ts.URL, port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer tok"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "echo: hi" {
		t.Fatalf("websocket: %q %v", b, err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/sse", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for n < 3 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: tick ") {
			n++
		}
	}
	if n < 3 {
		t.Fatalf("SSE: %d events, %v", n, sc.Err())
	}
}

// The SDK's DialPort: a raw connection to the port through the daemon.
func TestTunnel(t *testing.T) {
	d, _, port := portDaemon(t)
	ctx := context.Background()
	conn, err := d.c.Neuron("web").DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 2 { // one connection, two requests
		fmt.Fprintf(conn, "GET /t%d HTTP/1.1\r\nHost: n\r\n\r\n", i)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(string(b), fmt.Sprintf("hello from the neuron: GET /t%d", i)) {
			t.Fatalf("through the tunnel: %q", b)
		}
		if br.Buffered() > 0 {
			t.Fatalf("%d bytes past the answer", br.Buffered())
		}
	}
	if _, err := d.c.Neuron("web").DialPort(ctx, sandboxtest.FreePort(t)); !errors.As(err, &cortex.NotFoundError{}) {
		t.Fatalf("a closed port: %v", err)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/neurons/web/tunnel/%d", d.ts.URL, port), nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a tunnel without Upgrade: %d", resp.StatusCode)
	}
}
