package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// proxyRig is a proxy on loopback in front of a real HTTP server on
// loopback. Names resolve through a table; dials are recorded, and an
// address the table made up (a public one) is dialled at the server
// instead, so that name rules can be tested without the Internet.
type proxyRig struct {
	t         *testing.T
	p         *Proxy
	proxy     string // host:port
	server    *http.Server
	origin    netip.AddrPort // the real server
	resolved  atomic.Int32
	mu        sync.Mutex
	dialled   []string
	logged    []Decision
	seen      chan *http.Request
	hostAddrs []netip.Addr
}

func newRig(t *testing.T, rules []string, names map[string][]netip.Addr) *proxyRig {
	t.Helper()
	rig := &proxyRig{t: t, seen: make(chan *http.Request, 16)}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rig.origin = netip.MustParseAddrPort(sln.Addr().String())
	rig.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.seen <- r
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "origin saw %s %s host=%s body=%q", r.Method, r.RequestURI, r.Host, body)
	})}
	go rig.server.Serve(sln)
	t.Cleanup(func() { rig.server.Close() })
	for i, r := range rules {
		rules[i] = strings.ReplaceAll(r, "ORIGIN", fmt.Sprint(rig.origin.Port()))
	}
	pol, err := allowlist.Parse(rules)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	p := &Proxy{
		Policy: pol,
		Resolve: func(ctx context.Context, name string) ([]netip.Addr, error) {
			rig.resolved.Add(1)
			if a, ok := names[name]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("network: %s: no such host", name)
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			rig.mu.Lock()
			rig.dialled = append(rig.dialled, addr)
			rig.mu.Unlock()
			ap := netip.MustParseAddrPort(addr)
			if allowlist.Public(ap.Addr()) {
				addr = rig.origin.String()
			}
			return d.DialContext(ctx, network, addr)
		},
		HostAddrs: func() []netip.Addr {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			return rig.hostAddrs
		},
		Log: func(dec Decision) {
			rig.mu.Lock()
			rig.logged = append(rig.logged, dec)
			rig.mu.Unlock()
		},
	}
	rig.p = p

	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rig.proxy = pln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, pln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return rig
}

// client is an HTTP client that goes through the proxy for everything.
func (rig *proxyRig) client() *http.Client {
	u, _ := url.Parse("http://" + rig.proxy)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: false}, Timeout: 10 * time.Second}
}

func (rig *proxyRig) get(target string) (int, string) {
	rig.t.Helper()
	resp, err := rig.client().Get(target)
	if err != nil {
		rig.t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// raw sends a request through the proxy by hand and returns the first
// response line and what followed.
func (rig *proxyRig) raw(req string) (string, string) {
	rig.t.Helper()
	c, err := net.Dial("tcp", rig.proxy)
	if err != nil {
		rig.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	b, _ := io.ReadAll(c)
	line, rest, _ := strings.Cut(string(b), "\r\n")
	return line, rest
}

func TestProxyPlainHTTP(t *testing.T) {
	rig := newRig(t, []string{"127.0.0.1:ORIGIN"}, nil)
	code, body := rig.get(fmt.Sprintf("http://127.0.0.1:%d/a/b?c=d", rig.origin.Port()))
	if code != 200 || !strings.Contains(body, "origin saw GET /a/b?c=d") {
		t.Fatalf("allowed request: %d %q", code, body)
	}
	// Hop-by-hop headers stay with the proxy; the body goes through.
	line, rest := rig.raw(fmt.Sprintf("POST http://127.0.0.1:%d/p HTTP/1.1\r\nHost: h.test\r\nProxy-Authorization: Basic c2VjcmV0\r\n"+
		"Connection: X-Drop\r\nX-Drop: 1\r\nX-Keep: 2\r\nContent-Length: 5\r\n\r\nhello", rig.origin.Port()))
	// The Host header is the URL's, whatever the client said.
	if !strings.HasPrefix(line, "HTTP/1.1 200") || !strings.Contains(rest, fmt.Sprintf(`origin saw POST /p host=127.0.0.1:%d body="hello"`, rig.origin.Port())) {
		t.Fatalf("raw POST: %q %q", line, rest)
	}
	<-rig.seen
	r := <-rig.seen
	if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("X-Drop") != "" || r.Header.Get("X-Keep") != "2" {
		t.Errorf("headers the origin saw: %v", r.Header)
	}
}

func TestProxyDenies(t *testing.T) {
	rig := newRig(t, []string{"127.0.0.1:ORIGIN", "allowed.test:443", "loopy.test", "*.pub.test"},
		map[string][]netip.Addr{
			"loopy.test":   {netip.MustParseAddr("127.0.0.1")},
			"a.pub.test":   {netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("169.254.169.254")},
			"allowed.test": {netip.MustParseAddr("203.0.113.5")},
		})
	other := rig.origin.Port() + 1
	cases := []struct{ req, want string }{
		// Another port of an allowed address.
		{fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\n\r\n", other), "127.0.0.1 port " + fmt.Sprint(other) + " is not on this neuron's allow-list"},
		{fmt.Sprintf("CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", other), "is not on this neuron's allow-list"},
		// An allowed name on another port.
		{"CONNECT allowed.test:80 HTTP/1.1\r\n\r\n", "allowed.test port 80 is not on this neuron's allow-list"},
		// A name not listed, and one under a wildcard's domain itself.
		{"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", "evil.test port 443 is not"},
		{"CONNECT pub.test:443 HTTP/1.1\r\n\r\n", "pub.test port 443 is not"},
		// Names that resolve to the host's loopback or the local network.
		{fmt.Sprintf("GET http://loopy.test:%d/ HTTP/1.1\r\n\r\n", other), "loopy.test resolves to 127.0.0.1, which is not a public address"},
		{"CONNECT a.pub.test:443 HTTP/1.1\r\n\r\n", "resolves to 10.0.0.5, 169.254.169.254"},
	}
	for _, tc := range cases {
		line, rest := rig.raw(tc.req)
		if !strings.HasPrefix(line, "HTTP/1.1 403") || !strings.Contains(rest, tc.want) {
			t.Errorf("%q: %q %q, want 403 saying %q", tc.req, line, rest, tc.want)
		}
	}
	// A denied name is never looked up (a lookup would carry what the
	// neuron encodes in the name to the DNS server).
	if n := rig.resolved.Load(); n != 2 {
		t.Errorf("%d lookups, want 2 (loopy.test and a.pub.test only)", n)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.dialled) != 0 {
		t.Errorf("denied requests dialled %v", rig.dialled)
	}
	if len(rig.logged) != len(cases) || rig.logged[0].Allowed || !strings.HasPrefix(rig.logged[0].String(), "egress deny GET 127.0.0.1:") {
		t.Errorf("log: %v", rig.logged)
	}
}

func TestProxyNameRules(t *testing.T) {
	rig := newRig(t, []string{"allowed.test", "loopy.test", "127.0.0.1:ORIGIN"}, map[string][]netip.Addr{
		"allowed.test": {netip.MustParseAddr("203.0.113.5")},
		"loopy.test":   {netip.MustParseAddr("127.0.0.1")},
	})
	code, body := rig.get("http://allowed.test/x")
	if code != 200 || !strings.Contains(body, "host=allowed.test") {
		t.Fatalf("allowed name: %d %q", code, body)
	}
	// A loopback address is reachable by name when an address rule says so.
	code, body = rig.get(fmt.Sprintf("http://loopy.test:%d/y", rig.origin.Port()))
	if code != 200 || !strings.Contains(body, "GET /y") {
		t.Fatalf("name with an address rule: %d %q", code, body)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.dialled) != 2 || rig.dialled[0] != "203.0.113.5:80" {
		t.Errorf("dialled %v", rig.dialled)
	}
	if s := rig.logged[1].String(); !strings.Contains(s, "rules loopy.test and 127.0.0.1:") {
		t.Errorf("log: %s", s)
	}
}

func TestProxyConnectTunnel(t *testing.T) {
	rig := newRig(t, []string{"127.0.0.1:ORIGIN"}, nil)
	c, err := net.Dial("tcp", rig.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The request inside the tunnel is sent with the CONNECT, before the
	// proxy answers: what the proxy buffered must still reach the server.
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\nGET /in/tunnel HTTP/1.1\r\nHost: t\r\n\r\n", rig.origin.Port())
	c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "origin saw GET /in/tunnel") {
		t.Fatalf("through the tunnel: %q", b)
	}
}

func TestProxyBadRequests(t *testing.T) {
	rig := newRig(t, []string{"127.0.0.1"}, nil)
	cases := []struct{ req, code, want string }{
		{"nonsense\r\n\r\n", "400", "malformed request line"},
		{"GET / HTTP/1.1\r\n\r\n", "400", "absolute http:// URL"},
		{"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", "400", "https goes through CONNECT"},
		{"GET http://u:p@127.0.0.1/ HTTP/1.1\r\n\r\n", "400", "credentials"},
		{"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", "400", "want host:port"},
		{"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n", "400", "want host:port"},
		{"GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", maxRequestHead) + "\r\n\r\n", "431", "larger than 64 KiB"},
		{"CONNECT " + strings.Repeat("a", 300) + ".com:443 HTTP/1.1\r\n\r\n", "400", "is not a host name or address"},
		{"CONNECT bad_host!:443 HTTP/1.1\r\n\r\n", "400", "is not a host name or address"},
		{"CONNECT *.example.com:443 HTTP/1.1\r\n\r\n", "400", "is not a host name or address"},
		// Allowed, but nothing listens there.
		{"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n", "502", "connecting to 127.0.0.1 port 1"},
	}
	for _, tc := range cases {
		line, rest := rig.raw(tc.req)
		if !strings.HasPrefix(line, "HTTP/1.1 "+tc.code) || !strings.Contains(rest, tc.want) {
			t.Errorf("%.60q: %q %q, want %s %q", tc.req, line, rest, tc.code, tc.want)
		}
	}
	// Every one is in the log, none with a host name longer than DNS allows.
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if len(rig.logged) != len(cases) {
		t.Fatalf("%d decisions logged for %d requests: %v", len(rig.logged), len(cases), rig.logged)
	}
	for _, d := range rig.logged {
		if len(d.String()) > 300 {
			t.Errorf("a log line of %d bytes: %.100s", len(d.String()), d)
		}
	}
	if s := rig.logged[len(cases)-1].String(); !strings.Contains(s, "egress allow CONNECT 127.0.0.1:1 (rule 127.0.0.1) failed: connecting") {
		t.Errorf("a failed connection is logged as %q", s)
	}
}

// A denial's reason is in a Proxy-Status header too: HTTPS clients show
// the CONNECT response's headers, never its body.
func TestProxyStatusHeader(t *testing.T) {
	rig := newRig(t, []string{"allowed.test", "gone.test"}, map[string][]netip.Addr{"allowed.test": {netip.MustParseAddr("10.0.0.1")}})
	for req, want := range map[string]string{
		"CONNECT denied.test:443 HTTP/1.1\r\n\r\n":  `Proxy-Status: nsys-cortex; error=http_request_denied; details="denied.test port 443 is not on this neuron's allow-list"`,
		"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n": `Proxy-Status: nsys-cortex; error=destination_ip_prohibited; details="allowed.test resolves to 10.0.0.1, which is not a public address`,
		"CONNECT gone.test:443 HTTP/1.1\r\n\r\n":    `Proxy-Status: nsys-cortex; error=dns_error; details="network: gone.test: no such host"`,
	} {
		line, rest := rig.raw(req)
		if !strings.HasPrefix(line, "HTTP/1.1 4") && !strings.HasPrefix(line, "HTTP/1.1 5") || !strings.Contains(rest, want) {
			t.Errorf("%q: %q %q, want %q", req, line, rest, want)
		}
	}
}

// A name rule never reaches the host's own addresses, even public ones:
// whoever controls the name's DNS could point it at services the host
// listens with on every address.
func TestProxyRefusesHostAddresses(t *testing.T) {
	rig := newRig(t, []string{"self.test"}, map[string][]netip.Addr{"self.test": {netip.MustParseAddr("198.51.100.7")}})
	rig.mu.Lock()
	rig.hostAddrs = []netip.Addr{netip.MustParseAddr("198.51.100.7")}
	rig.mu.Unlock()
	line, rest := rig.raw("CONNECT self.test:443 HTTP/1.1\r\n\r\n")
	if !strings.HasPrefix(line, "HTTP/1.1 403") || !strings.Contains(rest, "this host's own") {
		t.Fatalf("%q %q", line, rest)
	}
}

func TestProxyServeEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	pol, _ := allowlist.Parse([]string{"127.0.0.1"})
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open until the listener closes
		}
	}()
	var d net.Dialer
	p := &Proxy{Policy: pol, Dial: d.DialContext, MaxConns: 2}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", up.Addr())
		line, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("tunnel %d: %q", i, line)
		}
		conns = append(conns, c)
	}
	// A third connection is over the cap.
	line, _ := (&proxyRig{t: t, proxy: ln.Addr().String()}).raw("CONNECT " + up.Addr().String() + " HTTP/1.1\r\n\r\n")
	if !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Errorf("over the cap: %q", line)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("a tunnel outlived Serve: %v", err)
		}
	}
	up.Close()
	waittest.Until(30*time.Second, func() bool { return runtime.NumGoroutine() <= before+1 })
	if n := runtime.NumGoroutine(); n > before+1 {
		t.Errorf("%d goroutines left, %d before", n, before)
	}
}

// A client that leaves a tunnel to a server that never answers gives its
// slot back after the linger.
func TestProxyTunnelToASilentServerEnds(t *testing.T) {
	pol, _ := allowlist.Parse([]string{"127.0.0.1"})
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, send nothing, close nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	var d net.Dialer
	p := &Proxy{Policy: pol, Dial: d.DialContext, MaxConns: 1, Linger: 300 * time.Millisecond}
	addr := serving(t, p)
	connect := func() string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\nsome bytes", silent.Addr())
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	if line := connect(); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("first tunnel: %q", line)
	}
	// The client has gone; its slot is held until the linger ends.
	var line string
	given := func() bool {
		line = connect()
		if !strings.HasPrefix(line, "HTTP/1.1 200") && !strings.HasPrefix(line, "HTTP/1.1 503") {
			t.Fatalf("the slot was not given back: %q", line)
		}
		return strings.HasPrefix(line, "HTTP/1.1 200")
	}
	if !waittest.Until(30*time.Second, given) {
		t.Fatalf("the slot was not given back: %q", line)
	}
}

// serving serves p on a loopback listener until the test ends, and
// returns its address.
func serving(t *testing.T, p *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}
