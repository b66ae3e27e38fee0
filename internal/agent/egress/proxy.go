package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// Limits of one proxied connection's request.
const (
	maxRequestHead  = 64 << 10
	headTimeout     = 30 * time.Second
	dialTimeout     = 15 * time.Second
	defaultMaxConns = 512
	defaultLinger   = 2 * time.Minute
)

// Decision is what the proxy did with one request, for the log.
type Decision struct {
	Method string
	// Host and Port are the destination asked for; Host is empty when the
	// request was too malformed to have one.
	Host string
	Port int
	// Allowed says whether the request was let through; Reason says why
	// not, or which rule let it through.
	Allowed bool
	Reason  string
	// Addr is where the proxy connected, when it did; Err why it could not
	// (the request was allowed, but resolving or connecting failed).
	Addr netip.AddrPort
	Err  error
}

func (d Decision) String() string {
	if d.Host == "" {
		return fmt.Sprintf("egress bad request: %s", d.Reason)
	}
	target := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	switch {
	case !d.Allowed:
		return fmt.Sprintf("egress deny %s %s: %s", d.Method, target, d.Reason)
	case d.Err != nil:
		return fmt.Sprintf("egress allow %s %s (%s) failed: %v", d.Method, target, d.Reason, d.Err)
	}
	return fmt.Sprintf("egress allow %s %s -> %s (%s)", d.Method, target, d.Addr, d.Reason)
}

// Proxy is an HTTP proxy that lets through only what its Policy allows:
// CONNECT tunnels (HTTPS, and anything else a client tunnels) and plain
// HTTP requests in absolute form. It decides on the name the client asked
// for and on every address that name resolves to; it resolves a name only
// when a name rule allows it, so that a denied name never reaches DNS
// (which would otherwise carry whatever the neuron encodes in it).
type Proxy struct {
	Policy *allowlist.List
	// Resolve looks a name up; Dial connects to an address.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	// HostAddrs, when set, returns this host's own addresses: a name rule
	// never reaches them (an address rule may).
	HostAddrs func() []netip.Addr
	// Log, when set, is told every decision.
	Log func(Decision)
	// MaxConns caps the connections open at once (0: 512).
	MaxConns int
	// Secrets, when set, are put into the HTTPS requests to their hosts
	// (see Secrets); a plain HTTP request that carries a placeholder is
	// refused.
	Secrets *Secrets
	// Linger is how long a tunnel stays once its client has closed its
	// side and the server sends nothing (0: 2 minutes); the client gets a
	// quarter of that once the server has closed.
	Linger time.Duration

	counts counters // what it let through (Stats)
}

// maxConns is MaxConns, or its default.
func (p *Proxy) maxConns() int {
	if p.MaxConns <= 0 {
		return defaultMaxConns
	}
	return p.MaxConns
}

// Serve answers connections on ln until ctx ends or ln fails, and then
// closes every connection it still has and waits for them.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	slots := make(chan struct{}, p.maxConns())
	return ServeConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		select {
		case slots <- struct{}{}:
		default:
			c.Write([]byte(response(503, "connection_limit_reached", "too many connections at once")))
			c.Close()
			return
		}
		defer func() { <-slots }()
		p.handle(ctx, c)
	})
}

// ServeConns accepts connections on ln until ctx ends or ln fails (a
// timeout is retried), and handles each in a goroutine of its own. It
// closes ln when ctx ends; when it returns, the context its handlers got
// has ended and every handler has returned.
func ServeConns(ctx context.Context, ln net.Listener, handle func(context.Context, net.Conn)) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(ctx, c)
		}()
	}
}

// response is a whole HTTP response with a text body, and the reason in a
// Proxy-Status header (RFC 9209) too: HTTPS clients show a CONNECT
// response's headers (curl -v), never its body.
func response(code int, errType, reason string) string {
	status := map[int]string{400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
		502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}[code]
	body := "nsys-cortex egress: " + reason + "\n"
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nProxy-Status: nsys-cortex; error=%s; details=%s\r\n"+
		"Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, status, errType, sfString(reason), len(body), body)
}

// sfString quotes s as a structured-field string (printable ASCII only).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteByte('?')
		}
	}
	b.WriteByte('"')
	return b.String()
}

// headLimit caps what the request line and headers may take.
type headLimit struct {
	r io.Reader
	n int
}

func (h *headLimit) Read(b []byte) (int, error) {
	if h.n <= 0 {
		return 0, errors.New("request head too large")
	}
	if len(b) > h.n {
		b = b[:h.n]
	}
	n, err := h.r.Read(b)
	h.n -= n
	return n, err
}

func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetReadDeadline(time.Now().Add(headTimeout))
	lim := &headLimit{r: c, n: maxRequestHead}
	br := bufio.NewReader(lim)
	tp := textproto.NewReader(br)
	fail := func(code int, errType, reason string) {
		p.log(Decision{Reason: reason})
		io.WriteString(c, response(code, errType, reason))
	}
	line, err := tp.ReadLine()
	if err != nil {
		p.badHead(err, lim, fail)
		return
	}
	method, target, proto, ok := splitRequestLine(line)
	if !ok {
		fail(400, "http_request_error", "malformed request line")
		return
	}
	header, err := tp.ReadMIMEHeader()
	if err != nil {
		p.badHead(err, lim, fail)
		return
	}
	var host string
	var port int
	var path string
	if method == "CONNECT" {
		host, port, err = splitHostPort(target, 0)
	} else {
		host, port, path, err = absoluteHTTP(target)
	}
	if err == nil {
		err = checkHost(host)
	}
	if err != nil {
		fail(400, "http_request_error", err.Error())
		return
	}
	d := Decision{Method: method, Host: host, Port: port}
	if method != "CONNECT" {
		if name := p.Secrets.stray(target, header, "", 0); name != "" {
			d.Reason = fmt.Sprintf("the request carries the placeholder of secret %s: secrets go only over HTTPS, to their own hosts", name)
			p.log(d)
			io.WriteString(c, response(403, "http_request_denied", d.Reason))
			return
		}
	}
	up, errType, err := p.connect(ctx, &d)
	d.Err = err
	if !d.Allowed {
		d.Err = nil
	}
	p.log(d)
	if err != nil {
		code := 502
		switch {
		case !d.Allowed:
			code = 403
		case errType == "connection_timeout":
			code = 504
		}
		io.WriteString(c, response(code, errType, err.Error()))
		return
	}
	defer up.Close()
	p.counts.conns.Add(1)
	stopUp := context.AfterFunc(ctx, func() { up.Close() })
	defer stopUp()
	c.SetReadDeadline(time.Time{})
	lim.n = 1 << 62 // the body is not the head
	if method == "CONNECT" {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		if p.Secrets.terminates(host, port) {
			p.terminate(ctx, c, br, up, d)
			return
		}
	} else if _, err := io.WriteString(up, originRequest(method, path, proto, host, port, header)); err != nil {
		return
	}
	linger := p.Linger
	if linger <= 0 {
		linger = defaultLinger
	}
	splice(c, br, up, linger, &p.counts.bytes)
}

// badHead answers a request whose head could not be read: too large, too
// slow, or cut short (a client that went away gets nothing, and no log).
func (p *Proxy) badHead(err error, lim *headLimit, fail func(int, string, string)) {
	var ne net.Error
	switch {
	case lim.n <= 0:
		fail(431, "http_request_error", fmt.Sprintf("request head larger than %d KiB", maxRequestHead>>10))
	case errors.As(err, &ne) && ne.Timeout():
		fail(400, "http_request_error", fmt.Sprintf("no whole request head within %s", headTimeout))
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
	default:
		fail(400, "http_request_error", "malformed request head")
	}
}

// checkHost refuses a destination that is neither an address nor a host
// name, before it is logged or looked up.
func checkHost(host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("%.64q: an address with a zone is not a destination", host)
		}
		return nil
	}
	if allowlist.CheckHostName(host) != nil {
		if len(host) > 64 {
			host = host[:64] + "..."
		}
		return fmt.Errorf("%q is not a host name or address", host)
	}
	return nil
}

func splitRequestLine(line string) (method, target, proto string, ok bool) {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isMethod(method) || target == "" || !strings.HasPrefix(proto, "HTTP/1.") {
		return "", "", "", false
	}
	return method, target, proto, true
}

// maxMethod bounds a request's method: the longest in use is far shorter,
// and the method goes into the log's lines.
const maxMethod = 32

// isMethod says whether m is a method: an HTTP token of at most maxMethod
// bytes.
func isMethod(m string) bool {
	if m == "" || len(m) > maxMethod {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// splitHostPort reads "host:port" (IPv6 in brackets); def is the port when
// none is given (0: one is required).
func splitHostPort(s string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		if def == 0 {
			return "", 0, fmt.Errorf("target %q: want host:port", s)
		}
		host, ps = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), strconv.Itoa(def)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("target %q: want host:port", s)
	}
	return host, port, nil
}

// absoluteHTTP reads a proxy request's absolute-form target.
func absoluteHTTP(target string) (host string, port int, path string, err error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return "", 0, "", fmt.Errorf("target %q: a proxy request names an absolute http:// URL", target)
	}
	if u.Scheme != "http" {
		return "", 0, "", fmt.Errorf("target %q: only http:// goes in a plain request; https goes through CONNECT", target)
	}
	if u.User != nil {
		return "", 0, "", fmt.Errorf("target %q: credentials in the URL are not passed on", target)
	}
	host, port, err = splitHostPort(u.Host, 80)
	if err != nil {
		return "", 0, "", err
	}
	path = u.RequestURI()
	return host, port, path, nil
}

// hopByHop are headers that belong to the client's connection to the proxy.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
	"Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

// originRequest rewrites a proxy request for the origin server: the path
// alone on the request line, the Host the URL names, no hop-by-hop
// headers, and one request per connection.
func originRequest(method, path, proto, host string, port int, h textproto.MIMEHeader) string {
	for _, name := range connectionTokens(h) {
		h.Del(name)
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
	// The URL names the server; a Host header that says otherwise is
	// replaced (RFC 9112, 3.2.2), or the checked name would not be the one
	// the server acts on.
	hp := host
	if port != 80 {
		hp = net.JoinHostPort(host, strconv.Itoa(port))
	} else if strings.Contains(host, ":") {
		hp = "[" + host + "]"
	}
	h.Set("Host", hp)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", method, path, proto)
	for name, values := range h {
		for _, v := range values {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// connect decides on d and, when allowed, connects. d.Allowed and d.Reason
// say what was decided; errType names a failure as Proxy-Status does.
func (p *Proxy) connect(ctx context.Context, d *Decision) (net.Conn, string, error) {
	deny := func(errType, why string) (net.Conn, string, error) {
		d.Allowed, d.Reason = false, why
		return nil, errType, errors.New(why)
	}
	var candidates []netip.Addr
	var reasons []string
	if a, err := netip.ParseAddr(d.Host); err == nil {
		a = a.Unmap()
		r, ok := p.Policy.AddrAllowed(a, d.Port)
		if !ok {
			return deny("http_request_denied", fmt.Sprintf("%s port %d is not on this neuron's allow-list", a, d.Port))
		}
		candidates, reasons = []netip.Addr{a}, []string{"rule " + r.String()}
	} else {
		nameRule, ok := p.Policy.NameAllowed(d.Host, d.Port)
		if !ok {
			return deny("http_request_denied", fmt.Sprintf("%s port %d is not on this neuron's allow-list", d.Host, d.Port))
		}
		d.Allowed, d.Reason = true, "rule "+nameRule.String()
		rctx, cancel := context.WithTimeout(ctx, dialTimeout)
		addrs, err := p.Resolve(rctx, d.Host)
		cancel()
		if err != nil {
			return nil, "dns_error", err
		}
		own := p.hostAddrs()
		var refused []string
		for _, a := range addrs {
			switch r, ok := p.Policy.AddrAllowed(a, d.Port); {
			case ok:
				candidates, reasons = append(candidates, a), append(reasons, "rules "+nameRule.String()+" and "+r.String())
			case allowlist.Public(a) && !slices.Contains(own, a.Unmap()):
				candidates, reasons = append(candidates, a), append(reasons, "rule "+nameRule.String())
			default:
				refused = append(refused, a.String())
			}
		}
		if len(candidates) == 0 {
			return deny("destination_ip_prohibited", fmt.Sprintf("%s resolves to %s, which is not a public address "+
				"(loopback, local network, special range, or this host's own); only an address rule allows that",
				d.Host, strings.Join(refused, ", ")))
		}
	}
	d.Allowed, d.Reason = true, reasons[0]
	var lastErr error
	for i, a := range candidates {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		ap := netip.AddrPortFrom(a, uint16(d.Port))
		c, err := p.Dial(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			d.Addr, d.Reason = ap, reasons[i]
			return c, "", nil
		}
		lastErr = err
	}
	errType := "destination_unavailable"
	var ne net.Error
	switch {
	case errors.Is(lastErr, syscall.ECONNREFUSED):
		errType = "connection_refused"
	case errors.As(lastErr, &ne) && ne.Timeout():
		errType = "connection_timeout"
	}
	return nil, errType, fmt.Errorf("connecting to %s port %d: %w", d.Host, d.Port, lastErr)
}

func (p *Proxy) hostAddrs() []netip.Addr {
	if p.HostAddrs == nil {
		return nil
	}
	return p.HostAddrs()
}

func (p *Proxy) log(d Decision) {
	if p.Log != nil {
		p.Log(d)
	}
}

// splice copies both ways until both directions end: what the client
// already sent (buffered in br) goes first. Each direction's end is passed
// on as a half close, as TLS and other protocols over a tunnel expect.
// Once one side has finished, the other gets a while to finish too (see
// Proxy.Linger), so that a peer that neither sends nor closes cannot hold
// a connection, and one of the proxy's slots, forever.
func splice(client net.Conn, br *bufio.Reader, up net.Conn, linger time.Duration, n *atomic.Int64) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(up, counting{br, n})
		closeWrite(up)
		up.SetReadDeadline(time.Now().Add(linger))
	}()
	go func() {
		defer wg.Done()
		io.Copy(client, counting{up, n})
		closeWrite(client)
		client.SetReadDeadline(time.Now().Add(linger / 4))
	}()
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
