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
	return d, key, startPortServer(t, d, "web")
}

// startPortServer starts the port server in neuron id, on a free port.
func startPortServer(t *testing.T, d *daemon, id string) int {
	t.Helper()
	m, st, err := d.set.FindExact(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(context.Background(), st.ID)
	if err != nil {
		t.Fatal(err)
	}
	port := sandboxtest.FreePort(t)
	sandboxtest.StartPortServer(t, context.Background(), c, port)
	return port
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

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
	inst, err := portsign.Instance(d.lay.OverlayDir("web"))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(id string, port int, exp time.Duration) string {
		return portsign.Sign(key, id, inst, port, time.Now().Add(exp), "")
	}
	signed := sign("web", port, time.Hour)
	// The signed URL sets the cookie and sends the browser on without
	// the token in its address.
	req, _ := http.NewRequest("GET", d.ts.URL+base+"/x?a=1&"+portsign.Param+"="+signed, nil)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == portsign.Cookie {
			cookie = c
		}
	}
	if resp.StatusCode != 303 || resp.Header.Get("Location") != base+"/x?a=1" {
		t.Fatalf("a signed URL: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	if cookie == nil || cookie.Path != base+"/" || !cookie.HttpOnly || cookie.Value != signed {
		t.Fatalf("the signed URL's cookie: %+v", cookie)
	}
	// The page's requests carry the cookie (among others of the origin),
	// and their own Authorization reaches the app; the token never does.
	code, body, _ = get(t, d, base+"/asset.js", map[string]string{"Cookie": portsign.Cookie + "=junk; " + portsign.Cookie + "=" + signed + "; app=2", "Authorization": "Basic YXBw"})
	if code != 200 || body != `hello from the neuron: GET /asset.js auth="Basic YXBw" cookie="app=2"` {
		t.Fatalf("with the cookie: %d %q", code, body)
	}
	if code, body, _ := get(t, d, base+"/a", map[string]string{"Cookie": portsign.Cookie + "=" + signed, "Authorization": "Bearer tok"}); code != 200 || !strings.Contains(body, `auth=""`) {
		t.Fatalf("the token beside a cookie reached the neuron: %d %q", code, body)
	}
	if code, _, _ := get(t, d, base+"/a", map[string]string{"Cookie": portsign.Cookie + "=" + signed, "Sec-Fetch-Site": "cross-site"}); code != 401 {
		t.Fatalf("a cookie sent by another site's page: %d", code)
	}
	for name, tc := range map[string]string{
		"another port":               sign("web", port+1, time.Hour),
		"another neuron":             sign("web2", port, time.Hour),
		"another key":                portsign.Sign([]byte(strings.Repeat("x", portsign.KeySize)), "web", inst, port, time.Now().Add(time.Hour), ""),
		"another instance of the id": portsign.Sign(key, "web", "other", port, time.Now().Add(time.Hour), ""),
		"expired":                    sign("web", port, -time.Second),
	} {
		if code, body, _ := get(t, d, base+"/?"+portsign.Param+"="+tc, nil); code != 401 {
			t.Errorf("a signed URL for %s: %d %q", name, code, body)
		}
	}
	// A signature lets in nothing but its port: not another route, not
	// one the router reads apart from the check (escaped slashes).
	if code, _, _ := get(t, d, "/v1/neurons/web?"+portsign.Param+"="+signed, nil); code != 401 {
		t.Errorf("a signed URL on another route: %d", code)
	}
	esc := fmt.Sprintf("/v1/neurons/web%%2Fports%%2F%d/exec?%s=%s", port, portsign.Param, signed)
	if code, _, _ := get(t, d, esc, nil); code != 401 {
		t.Errorf("a signed URL with escaped slashes onto another route: %d", code)
	}
	// The neuron's answers stay its port's: redirects under the prefix,
	// none out of it for a token holder; cookies scoped; no daemon headers.
	req, _ = http.NewRequest("DELETE", d.ts.URL+base+"/redirect?to=/v1/neurons/victim", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err = noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Location") != base+"/v1/neurons/victim" {
		t.Fatalf("a redirect to an absolute path: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	if code, body, _ := get(t, d, base+"/redirect?to=http://127.0.0.1:1/steal", tok); code != 502 || !strings.Contains(body, "redirected out of its port") {
		t.Fatalf("a redirect out for a token holder: %d %q", code, body)
	}
	_, _, resp = get(t, d, base+"/hostile-headers?n=1", tok)
	if c := resp.Header.Values("Set-Cookie"); len(c) != 1 || !strings.Contains(c[0], "Path="+base+"/") || strings.Contains(strings.ToLower(c[0]), "domain") {
		t.Fatalf("the neuron's cookies: %q", c)
	}
	if resp.Header.Get("Service-Worker-Allowed") != "" || resp.Header.Get("X-Cortex-Error") != "" {
		t.Fatal("Service-Worker-Allowed or the daemon's own header passed")
	}
	get(t, d, base+"/hostile-headers?n=2", tok)
	if _, m, _ := get(t, d, "/metrics", tok); strings.Contains(m, "NOT_A_CODE") {
		t.Fatal("a neuron's header became a metrics series")
	}
	// By host: <port>-<id>.<domain>, the server sees the path as it is.
	host := fmt.Sprintf("%d-web.cortex.test", port)
	code, body, _ = get(t, d, "/app/index.html", map[string]string{"Host": host, "Authorization": "Bearer tok"})
	if code != 200 || body != `hello from the neuron: GET /app/index.html auth="" cookie=""` {
		t.Fatalf("routed by host: %d %q", code, body)
	}
	req, _ = http.NewRequest("GET", d.ts.URL+"/?"+portsign.Param+"="+signed, nil)
	req.Host = host
	resp, err = noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Cookies(); len(c) != 1 || c[0].Path != "/" || resp.Header.Get("Location") != "/" {
		t.Fatalf("a signed URL by host: cookies %+v, to %q", c, resp.Header.Get("Location"))
	}
	// Under the domain there is nothing but ports: never the API.
	if code, _, _ := get(t, d, "/v1/neurons/victim", map[string]string{"Host": "x." + host, "Authorization": "Bearer tok"}); code != 404 {
		t.Fatalf("another name under the domain: %d", code)
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
	// A URL opens the neuron it was made for, not a later one of the id.
	if err := d.c.Destroy(context.Background(), "web", true); err != nil {
		t.Fatal(err)
	}
	d.create(t, "web")
	if code, _, _ := get(t, d, base+"/?"+portsign.Param+"="+signed, nil); code != 401 {
		t.Fatalf("a URL of a wiped neuron opened the new one of its id: %d", code)
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

// /healthz answers a supervisor's probe without a token, and says
// nothing but that the daemon serves; a neuron's port by its host name
// keeps its own /healthz.
func TestHealthzProbe(t *testing.T) {
	d, _, port := portDaemon(t)
	code, body, resp := get(t, d, "/healthz", nil)
	if code != 200 || body != "ok\n" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, _, _ := get(t, d, "/v1/health", nil); code != 401 {
		t.Errorf("/v1/health without the token: %d", code)
	}
	if code, _, _ := get(t, d, "/healthz", map[string]string{"Host": fmt.Sprintf("%d-web.cortex.test", port)}); code != 401 {
		t.Errorf("a neuron's /healthz by its host, without the token: %d (the daemon's probe answered it)", code)
	}
}
