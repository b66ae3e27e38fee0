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
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of one proxied connection's request.
const (
	maxRequestHead  = 64 << 10
	headTimeout     = 30 * time.Second
	dialTimeout     = 15 * time.Second
	defaultMaxConns = 512
	// lingerAfterServer is how long a connection stays once the server
	// has closed its side.
	lingerAfterServer = 30 * time.Second
)

// Decision is what the proxy did with one request, for the log.
type Decision struct {
	Method string
	Host   string
	Port   int
	// Allowed says whether the request was let through; Reason says why
	// not, or which rule let it through.
	Allowed bool
	Reason  string
	// Addr is where the proxy connected, when it did.
	Addr netip.AddrPort
}

func (d Decision) String() string {
	target := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	if !d.Allowed {
		return fmt.Sprintf("egress deny %s %s: %s", d.Method, target, d.Reason)
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
	Policy *Policy
	// Resolve looks a name up; Dial connects to an address.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	// Log, when set, is told every decision.
	Log func(Decision)
	// MaxConns caps the connections open at once (0: 512).
	MaxConns int
}

// Serve answers connections on ln until ctx ends or ln fails, and then
// closes every connection it still has and waits for them.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	max := p.MaxConns
	if max <= 0 {
		max = defaultMaxConns
	}
	slots := make(chan struct{}, max)
	var wg sync.WaitGroup
	defer wg.Wait()
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
		select {
		case slots <- struct{}{}:
		default:
			c.Write([]byte(response(503, "nsys-cortex egress: too many connections at once")))
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			p.handle(ctx, c)
		}()
	}
}

// response is a whole HTTP response with a text body.
func response(code int, body string) string {
	status := map[int]string{400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
		502: "Bad Gateway", 503: "Service Unavailable"}[code]
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"+
		"Connection: close\r\n\r\n%s\n", code, status, len(body)+1, body)
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
	line, err := tp.ReadLine()
	if err != nil {
		return
	}
	method, target, proto, ok := splitRequestLine(line)
	if !ok {
		io.WriteString(c, response(400, "nsys-cortex egress: malformed request line"))
		return
	}
	header, err := tp.ReadMIMEHeader()
	if err != nil {
		io.WriteString(c, response(400, "nsys-cortex egress: malformed request headers"))
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
	if err != nil {
		io.WriteString(c, response(400, "nsys-cortex egress: "+err.Error()))
		return
	}
	d := Decision{Method: method, Host: host, Port: port}
	up, err := p.connect(ctx, &d)
	p.log(d)
	if err != nil {
		code := 502
		if !d.Allowed {
			code = 403
		}
		io.WriteString(c, response(code, "nsys-cortex egress: "+err.Error()))
		return
	}
	defer up.Close()
	stopUp := context.AfterFunc(ctx, func() { up.Close() })
	defer stopUp()
	c.SetReadDeadline(time.Time{})
	lim.n = 1 << 62 // the body is not the head
	if method == "CONNECT" {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
	} else if _, err := io.WriteString(up, originRequest(method, path, proto, host, port, header)); err != nil {
		return
	}
	splice(c, br, up)
}

func splitRequestLine(line string) (method, target, proto string, ok bool) {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || !strings.HasPrefix(proto, "HTTP/1.") {
		return "", "", "", false
	}
	return method, target, proto, true
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
// alone on the request line, no hop-by-hop headers, and one request per
// connection.
func originRequest(method, path, proto, host string, port int, h textproto.MIMEHeader) string {
	for _, name := range h.Values("Connection") {
		for _, f := range strings.Split(name, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
	if h.Get("Host") == "" {
		hp := host
		if port != 80 {
			hp = net.JoinHostPort(host, strconv.Itoa(port))
		} else if strings.Contains(host, ":") {
			hp = "[" + host + "]"
		}
		h.Set("Host", hp)
	}
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
// say what was decided.
func (p *Proxy) connect(ctx context.Context, d *Decision) (net.Conn, error) {
	deny := func(why string) (net.Conn, error) {
		d.Allowed, d.Reason = false, why
		return nil, errors.New(why)
	}
	var candidates []netip.Addr
	var reasons []string
	if a, err := netip.ParseAddr(d.Host); err == nil {
		a = a.Unmap()
		r, ok := p.Policy.AddrAllowed(a, d.Port)
		if !ok {
			return deny(fmt.Sprintf("%s port %d is not on this neuron's allow-list", a, d.Port))
		}
		candidates, reasons = []netip.Addr{a}, []string{"rule " + r.String()}
	} else {
		nameRule, ok := p.Policy.NameAllowed(d.Host, d.Port)
		if !ok {
			return deny(fmt.Sprintf("%s port %d is not on this neuron's allow-list", d.Host, d.Port))
		}
		rctx, cancel := context.WithTimeout(ctx, dialTimeout)
		addrs, err := p.Resolve(rctx, d.Host)
		cancel()
		if err != nil {
			d.Allowed, d.Reason = true, "rule "+nameRule.String()
			return nil, err
		}
		var refused []string
		for _, a := range addrs {
			if r, ok := p.Policy.AddrAllowed(a, d.Port); ok {
				candidates, reasons = append(candidates, a), append(reasons, "rules "+nameRule.String()+" and "+r.String())
			} else if Public(a) {
				candidates, reasons = append(candidates, a), append(reasons, "rule "+nameRule.String())
			} else {
				refused = append(refused, a.String())
			}
		}
		if len(candidates) == 0 {
			return deny(fmt.Sprintf("%s resolves to %s, which is not a public address; only an address rule allows that",
				d.Host, strings.Join(refused, ", ")))
		}
	}
	d.Allowed = true
	var lastErr error
	for i, a := range candidates {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		ap := netip.AddrPortFrom(a, uint16(d.Port))
		c, err := p.Dial(dctx, "tcp", ap.String())
		cancel()
		if err == nil {
			d.Addr, d.Reason = ap, reasons[i]
			return c, nil
		}
		lastErr = err
	}
	d.Reason = reasons[0]
	return nil, fmt.Errorf("connecting to %s port %d: %w", d.Host, d.Port, lastErr)
}

func (p *Proxy) log(d Decision) {
	if p.Log != nil {
		p.Log(d)
	}
}

// splice copies both ways until both directions end: what the client
// already sent (buffered in br) goes first. Each direction's end is passed
// on as a half close, as TLS and other protocols over a tunnel expect;
// once the server has finished, a client that neither sends nor closes
// gets lingerAfterServer to do so.
func splice(client net.Conn, br *bufio.Reader, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(up, br)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		io.Copy(client, up)
		closeWrite(client)
		client.SetReadDeadline(time.Now().Add(lingerAfterServer))
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
