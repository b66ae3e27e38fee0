package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/portsign"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// The port proxy (docs/ports.md): /v1/neurons/{id}/ports/{port}/{path...}
// is carried to an HTTP server on the neuron's own loopback through its
// channel (link.Client.DialPort), WebSocket and SSE included, unbuffered;
// with Options.Domain, so is any request to <port>-<id>.<domain>. Access
// needs the API's token, or a signed URL (portsign) for that neuron and
// port, whose token the proxy then keeps in a cookie for the browser's
// later requests. Neither the token nor the cookie nor the signed
// parameter ever reaches the neuron.

// portPath matches the proxy's paths: the neuron, the port, the rest.
var portPath = regexp.MustCompile(`^/v1/neurons/([^/]+)/ports/([0-9]{1,5})(/.*)?$`)

// portAuth is how a proxied request was let in.
type portAuth int

const (
	byToken portAuth = iota + 1
	bySignature
	byE2BTraffic // E2B's rule for a sandbox made through its API (e2bPorts)
)

type portAuthKey struct{}

// hostRouted is set on a request routed by its Host (<port>-<id>.<domain>).
type hostRoutedKey struct{}

// portTarget is a port request's neuron and port, read from the path as
// the router reads it (escaped: "web%2Fports%2F80" is no id).
func portTarget(r *http.Request) (id string, port int, ok bool) {
	m := portPath.FindStringSubmatch(r.URL.EscapedPath())
	if m == nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(m[2])
	if err != nil || port < 1 || port > 65535 || ids.Validate(m[1]) != nil {
		return "", 0, false
	}
	return m[1], port, true
}

// signedPort reports whether r carries a valid signed token for its
// neuron and port (in the query or in the cookie the proxy set), and the
// token and where it came from.
func (s *Server) signedPort(r *http.Request) (token string, fromQuery bool, by string, err error) {
	id, port, ok := portTarget(r)
	if !ok {
		return "", false, "", errNoSignature
	}
	inst, err := portsign.Instance(s.opts.Set.Layout().OverlayDir(id))
	if err != nil {
		inst = "" // no such neuron: nothing verifies
	}
	if t := r.URL.Query().Get(portsign.Param); t != "" {
		by, err := portsign.Verify(s.opts.URLKey, id, inst, port, t, time.Now())
		return t, true, by, err
	}
	cookies := r.CookiesNamed(portsign.Cookie)
	if len(cookies) == 0 {
		return "", false, "", errNoSignature
	}
	// Cookies ride along with requests other sites make: only a page of
	// the port's own origin (or a person typing the address) uses one.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "", false, "", fmt.Errorf("a signed URL's cookie is not taken from a request another site's page made (Sec-Fetch-Site: %s)", site)
	}
	err = errNoSignature
	for _, c := range cookies { // another app of the origin may have set one too
		if by, err = portsign.Verify(s.opts.URLKey, id, inst, port, c.Value, time.Now()); err == nil {
			return c.Value, false, by, nil
		}
	}
	return "", false, "", err
}

// errNoSignature: the request carries no signed URL at all.
var errNoSignature = errors.New("no signed URL")

// hostTarget reads a host of the form <port>-<id>.<domain>: under is
// whether the host is under the domain at all; err says what is wrong
// with one that is and is not of that form.
func (s *Server) hostTarget(hostport string) (port int, id string, under bool, err error) {
	if s.opts.Domain == "" {
		return 0, "", false, nil
	}
	suffix := "." + strings.ToLower(strings.Trim(s.opts.Domain, "."))
	host := strings.ToLower(hostport)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(host, suffix)
	if !ok {
		return 0, "", false, nil // the API's own name
	}
	if strings.Contains(label, ".") {
		// Under the domain is only ever a port: never the API.
		return 0, "", true, cortex.APIError{Code: cortex.CodeNotFound, Message: fmt.Sprintf(
			"host %q: a neuron's port is reached at <port>-<id>%s", hostport, suffix)}
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok || ids.Validate(id) != nil {
		return 0, "", true, cortex.APIError{Code: cortex.CodeNotFound, Message: fmt.Sprintf(
			"host %q: a neuron's port is reached at <port>-<id>%s (an id of lower-case letters, digits and '-')", hostport, suffix)}
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return 0, "", true, cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf("host %q: %q is no port (1-65535)", hostport, p)}
	} else {
		port = n
	}
	return port, id, true, nil
}

// routeByHost sends a request to <port>-<id>.<domain> to the port proxy:
// its path becomes the proxy's path for that neuron and port. Requests
// to any other host pass on unchanged.
func (s *Server) routeByHost(next http.Handler) http.Handler {
	if s.opts.Domain == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port, id, under, err := s.hostTarget(r.Host)
		switch {
		case err != nil:
			writeError(w, err)
			return
		case !under:
			next.ServeHTTP(w, r)
			return
		}
		r2 := r.Clone(context.WithValue(r.Context(), hostRoutedKey{}, true))
		r2.URL.Path = "/v1/neurons/" + id + "/ports/" + strconv.Itoa(port) + r.URL.Path
		r2.URL.RawPath = ""
		next.ServeHTTP(w, r2)
	})
}

// portProxy serves a port request, authorized already (authenticate, the
// gate): it is carried to the port in the neuron.
func (s *Server) portProxy(w http.ResponseWriter, r *http.Request) {
	id, port, ok := portTarget(r)
	if !ok {
		writeError(w, cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf("%s: a port is 1-65535", r.URL.Path)})
		return
	}
	if r.PathValue("id") != id || r.PathValue("port") != strconv.Itoa(port) {
		writeError(w, cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf("%s: not a port of one neuron", r.URL.EscapedPath())})
		return
	}
	hostRouted, _ := r.Context().Value(hostRoutedKey{}).(bool)
	prefix := "/v1/neurons/" + id + "/ports/" + strconv.Itoa(port)
	cookiePath := prefix + "/"
	if hostRouted {
		cookiePath = "/"
	}
	auth, _ := r.Context().Value(portAuthKey{}).(portAuth)
	if auth == bySignature {
		if token, fromQuery, _, err := s.signedPort(r); err == nil && fromQuery {
			// The browser keeps it for the page's later requests, and the
			// address bar (history, Referer) loses it at once.
			exp, _ := strconv.ParseInt(strings.SplitN(token, ".", 2)[0], 10, 64)
			http.SetCookie(w, &http.Cookie{Name: portsign.Cookie, Value: token, Path: cookiePath, Expires: time.Unix(exp, 0),
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				u := *r.URL
				if hostRouted {
					u.Path = strings.TrimPrefix(u.Path, prefix)
					u.RawPath = ""
				}
				q := u.Query()
				q.Del(portsign.Param)
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", hex.EncodeToString([]byte(id))+":"+strconv.Itoa(port)
			if !hostRouted {
				pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
				pr.Out.URL.RawPath = ""
				if pr.Out.URL.Path == "" {
					pr.Out.URL.Path = "/"
				}
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			} else {
				pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			}
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host // the name the client used, as a reverse proxy passes it
			s.scrubPortRequest(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error {
			return scrubPortResponse(resp, r, prefix, hostRouted, cookiePath, auth)
		},
		Transport:     s.ports,
		FlushInterval: -1, // every write of the server goes out at once: SSE, long polls
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.portError(w, r, id, port, err)
		},
	}
	// A WebSocket or an SSE stream lasts as long as its client wants, or
	// until the daemon stops.
	ctx, done := s.streamContext(r)
	defer done()
	rp.ServeHTTP(w, r.WithContext(ctx))
}

// scrubPortRequest takes out of a request bound for a neuron what is the
// host's: the cookie and query parameter of a signed URL, and every
// Authorization value that holds the API's token or an API key's
// (however the request was let in); an app's own Authorization passes.
func (s *Server) scrubPortRequest(out *http.Request) {
	// A credential of the daemon (its token, a key of either form) never
	// reaches a neuron, in whichever header a client sent it; E2B's
	// headers are the daemon's own.
	for _, h := range []string{"Authorization", "X-Api-Key", "X-Access-Token"} {
		if vals := out.Header.Values(h); len(vals) > 0 {
			out.Header.Del(h)
			for _, v := range vals {
				if !s.isCredential(v) {
					out.Header.Add(h, v)
				}
			}
		}
	}
	if s.opts.E2B {
		for _, h := range []string{e2bTrafficHeader, "E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Access-Token"} {
			out.Header.Del(h) // an envd token does not say what it is
		}
	}
	q := out.URL.Query()
	if q.Has(portsign.Param) {
		q.Del(portsign.Param)
		out.URL.RawQuery = q.Encode()
	}
	cookies := out.Cookies()
	out.Header.Del("Cookie")
	for _, c := range cookies {
		if c.Name != portsign.Cookie {
			out.AddCookie(c)
		}
	}
}

// isCredential reports whether a header's value holds one of the
// daemon's credentials: its token, or anything of an API key's form.
func (s *Server) isCredential(v string) bool {
	return s.opts.Token != "" && strings.Contains(v, s.opts.Token) || strings.Contains(v, apikey.Prefix) || strings.Contains(v, apikey.E2BPrefix)
}

// scrubPortResponse keeps a neuron's answer to what concerns its port:
//   - a redirect stays under the port (an absolute path is put under the
//     port's prefix); one that would take a client holding the API's token
//     elsewhere (another route, host or port, where the client would send
//     the token) is refused with a 502;
//   - cookies stay the port's: never the signed URL's, no Domain, and
//     under the port's path when ports share the daemon's origin;
//   - headers that would reach beyond the port are dropped: the daemon's
//     own (X-Cortex-*), Service-Worker-Allowed, Clear-Site-Data.
func scrubPortResponse(resp *http.Response, in *http.Request, prefix string, hostRouted bool, cookiePath string, auth portAuth) error {
	h := resp.Header
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-cortex-") {
			h.Del(k)
		}
	}
	h.Del("Service-Worker-Allowed")
	h.Del("Clear-Site-Data")
	if loc := h.Get("Location"); loc != "" {
		fixed, err := keepUnder(loc, in, prefix, hostRouted, auth == byToken)
		if err != nil {
			return err
		}
		h.Set("Location", fixed)
	}
	if cookies := resp.Cookies(); len(cookies) > 0 {
		h.Del("Set-Cookie")
		for _, c := range cookies {
			if c.Name == portsign.Cookie {
				continue
			}
			c.Domain = ""
			if !hostRouted {
				c.Path = strings.TrimSuffix(cookiePath, "/") + "/" + strings.TrimPrefix(c.Path, "/")
			}
			if v := c.String(); v != "" {
				h.Add("Set-Cookie", v)
			}
		}
	}
	return nil
}

// errRedirectOut: a neuron's redirect would take a client holding the
// API's token out of its port.
var errRedirectOut = errors.New("the neuron's server redirected out of its port")

// keepUnder resolves a neuron's Location against the client's URL and
// keeps it under the port (path mode: an absolute path is put under the
// prefix). Leaving the port is refused when the client holds the token.
func keepUnder(loc string, in *http.Request, prefix string, hostRouted, tokenHolder bool) (string, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", errRedirectOut
	}
	if u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/") && !hostRouted {
		u.Path = prefix + u.Path // the app's root is the port's prefix here
		u.RawPath = ""
		return u.String(), nil
	}
	if u.Scheme == "" && u.Host == "" {
		return loc, nil // relative: under the port by construction (or the app's own path)
	}
	if !tokenHolder {
		return loc, nil // a browser going elsewhere carries no token
	}
	if strings.EqualFold(u.Host, in.Host) && (hostRouted || strings.HasPrefix(u.EscapedPath(), prefix+"/")) {
		return loc, nil
	}
	return "", errRedirectOut
}

// portError answers a request the proxy could not carry: nothing listens
// (502, naming the port), the neuron is stopped (409 NOT_RUNNING), or it
// went away meanwhile.
func (s *Server) portError(w http.ResponseWriter, r *http.Request, id string, port int, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	var (
		ae     cortex.APIError
		closed *portClosedError
	)
	switch {
	case errors.Is(err, errRedirectOut):
		badGateway(w, cortex.CodePolicyDenied, fmt.Sprintf(
			"the server on port %d of neuron %s redirected out of its port, where this client would send the API's token: refused", port, id))
		return
	case errors.As(err, &ae):
	case errors.As(err, &closed):
		badGateway(w, cortex.CodeNotFound, fmt.Sprintf("nothing listens on port %d in neuron %s (start the server there, listening on 127.0.0.1 or ::1)", port, id))
		return
	default:
		s.noteFailure(r, err)
		ae = apiError(err)
	}
	writeError(w, ae)
}

// portTransport reaches ports in neurons: its addresses are
// hex(id):port, dialled through each neuron's channel. Connections are
// kept alive between requests, as to any server.
func (s *Server) portTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			h, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			idb, err := hex.DecodeString(h)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			c, err := s.client(ctx, string(idb))
			if err != nil {
				return nil, err
			}
			conn, err := c.DialPort(ctx, port)
			switch {
			case err != nil && errdefs.IsNotRunning(err):
				s.forget(string(idb))
			case err != nil && errdefs.IsNotFound(err):
				err = &portClosedError{err}
			}
			return conn, err
		},
		MaxIdleConnsPerHost:    16,
		MaxConnsPerHost:        64, // per neuron and port: each holds a channel window
		MaxResponseHeaderBytes: 1 << 20,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  0, // a long poll may wait for its answer
	}
}

// portClosedError: nothing listens on the port in the neuron.
type portClosedError struct{ err error }

func (e *portClosedError) Error() string { return e.err.Error() }
func (e *portClosedError) Unwrap() error { return e.err }

// TunnelProtocol is the Upgrade of a raw TCP tunnel to a port (GET
// /v1/neurons/{id}/tunnel/{port}): after the 101, the connection is the
// port's, both ways (port-forward through a daemon).
const TunnelProtocol = "cortex-tcp"

// tunnel upgrades the request to a raw TCP connection to a port in the
// neuron. The port is dialled first, so a closed port or a stopped neuron
// is an ordinary HTTP error.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), TunnelProtocol) || !headerHas(r.Header, "Connection", "upgrade") {
		writeError(w, cortex.APIError{Code: cortex.CodeBadRequest, Message: "a tunnel needs Connection: Upgrade and Upgrade: " + TunnelProtocol})
		return
	}
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf("port %q: give 1-65535", r.PathValue("port"))})
		return
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	ctx, done := s.streamContext(r)
	defer done()
	conn, err := c.DialPort(ctx, port)
	if err != nil {
		if errdefs.IsNotFound(err) {
			err = &portClosedError{err}
		}
		s.portError(w, r, id, port, err)
		return
	}
	defer conn.Close()
	nc, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, cortex.APIError{Code: cortex.CodeInternal, Message: "this connection cannot be taken over for a tunnel: " + err.Error()})
		return
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close(); conn.Close() })
	defer stop()
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+TunnelProtocol+"\r\n\r\n"); err != nil {
		return
	}
	up := make(chan struct{})
	go func() {
		defer close(up)
		io.Copy(conn, rw.Reader) // what the client had sent already, then the rest
		if hc, ok := conn.(interface{ CloseWrite() error }); ok {
			hc.CloseWrite()
		}
	}()
	io.Copy(nc, conn)
	nc.Close()
	conn.Close()
	<-up
}

// DefaultURLExpiry is how long a signed URL works unless asked otherwise.
const DefaultURLExpiry = time.Hour

// portURL answers a signed URL of a port of the neuron (POST .../urls).
func (s *Server) portURL(w http.ResponseWriter, r *http.Request) {
	var req cortex.PortURLRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case req.Port < 1 || req.Port > 65535:
		writeError(w, badRequest("port %d: give 1-65535", req.Port))
		return
	case req.ExpiresInMs < 0 || time.Duration(req.ExpiresInMs)*time.Millisecond > portsign.MaxExpiry:
		writeError(w, badRequest("expiresInMs %d: give up to %d (30 days)", req.ExpiresInMs, portsign.MaxExpiry.Milliseconds()))
		return
	case len(s.opts.URLKey) == 0:
		writeError(w, cortex.APIError{Code: cortex.CodeUnavailable, Message: "this daemon has no key to sign URLs with"})
		return
	}
	_, st, err := s.opts.Set.FindExact(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if s.opts.Domain != "" && !portsign.HostSafeID(st.ID) {
		writeError(w, badRequest("neuron %s: a URL under %s needs an id of lower-case letters, digits and '-' (a host name's label)", st.ID, s.opts.Domain))
		return
	}
	d := DefaultURLExpiry
	if req.ExpiresInMs > 0 {
		d = time.Duration(req.ExpiresInMs) * time.Millisecond
	}
	exp := time.Now().Add(d).Truncate(time.Second)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	inst, err := portsign.Instance(s.opts.Set.Layout().OverlayDir(st.ID))
	if err != nil {
		writeError(w, err)
		return
	}
	by := ""
	if k := keyOf(r); k != nil {
		by = k.Name // the URL is the key's: refused once it is gone, counted and audited as its
	}
	u, err := portsign.URL(s.opts.URLKey, scheme+"://"+r.Host, s.opts.Domain, st.ID, inst, req.Port, exp, by)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, cortex.PortURL{URL: u, ExpiresAt: exp.UTC()})
}

// badGateway answers 502 with an error of code: the proxy's own answer
// about the neuron's server.
func badGateway(w http.ResponseWriter, code cortex.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Cortex-Error", string(code))
	w.WriteHeader(http.StatusBadGateway)
	json.NewEncoder(w).Encode(cortex.ErrorBody{Error: cortex.APIError{Code: code, Message: msg}})
}
