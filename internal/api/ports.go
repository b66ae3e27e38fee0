package api

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
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
)

type portAuthKey struct{}

// hostRouted is set on a request routed by its Host (<port>-<id>.<domain>).
type hostRoutedKey struct{}

// portTarget is a port request's neuron and port.
func portTarget(r *http.Request) (id string, port int, ok bool) {
	m := portPath.FindStringSubmatch(r.URL.Path)
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
func (s *Server) signedPort(r *http.Request) (token string, fromQuery bool, err error) {
	id, port, ok := portTarget(r)
	if !ok {
		return "", false, errNoSignature
	}
	if t := r.URL.Query().Get(portsign.Param); t != "" {
		return t, true, portsign.Verify(s.opts.URLKey, id, port, t, time.Now())
	}
	if c, err := r.Cookie(portsign.Cookie); err == nil {
		return c.Value, false, portsign.Verify(s.opts.URLKey, id, port, c.Value, time.Now())
	}
	return "", false, errNoSignature
}

// errNoSignature: the request carries no signed URL at all.
var errNoSignature = errors.New("no signed URL")

// routeByHost sends a request to <port>-<id>.<domain> to the port proxy:
// its path becomes the proxy's path for that neuron and port. Requests
// to any other host pass on unchanged.
func (s *Server) routeByHost(next http.Handler) http.Handler {
	if s.opts.Domain == "" {
		return next
	}
	suffix := "." + strings.ToLower(strings.Trim(s.opts.Domain, "."))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		label, ok := strings.CutSuffix(host, suffix)
		if !ok || strings.Contains(label, ".") {
			next.ServeHTTP(w, r)
			return
		}
		p, id, ok := strings.Cut(label, "-")
		if !ok || ids.Validate(id) != nil {
			writeError(w, cortex.APIError{Code: cortex.CodeNotFound, Message: fmt.Sprintf(
				"host %q: a neuron's port is reached at <port>-<id>%s (an id of lower-case letters, digits and '-')", r.Host, suffix)})
			return
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			writeError(w, cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf("host %q: %q is no port (1-65535)", r.Host, p)})
			return
		}
		r2 := r.Clone(context.WithValue(r.Context(), hostRoutedKey{}, true))
		r2.URL.Path = "/v1/neurons/" + id + "/ports/" + p + r.URL.Path
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
	hostRouted, _ := r.Context().Value(hostRoutedKey{}).(bool)
	prefix := "/v1/neurons/" + id + "/ports/" + strconv.Itoa(port)
	if r.Context().Value(portAuthKey{}) == bySignature {
		if token, fromQuery, err := s.signedPort(r); err == nil && fromQuery {
			// The browser keeps it for the page's later requests.
			path := prefix + "/"
			if hostRouted {
				path = "/"
			}
			exp, _ := strconv.ParseInt(strings.SplitN(token, ".", 2)[0], 10, 64)
			http.SetCookie(w, &http.Cookie{Name: portsign.Cookie, Value: token, Path: path, Expires: time.Unix(exp, 0),
				HttpOnly: true, SameSite: http.SameSiteLaxMode})
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
			scrubPortRequest(pr.Out, r.Context().Value(portAuthKey{}) == byToken)
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
// host's: the cookie and query parameter of a signed URL, and the API's
// token when it was what let the request in.
func scrubPortRequest(out *http.Request, tokenAuth bool) {
	if tokenAuth {
		out.Header.Del("Authorization")
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
	case errors.As(err, &ae):
	case errors.As(err, &closed):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Cortex-Error", string(cortex.CodeNotFound))
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "{\"error\":{\"code\":%q,\"message\":%q}}\n", cortex.CodeNotFound,
			fmt.Sprintf("nothing listens on port %d in neuron %s (start the server there, listening on 127.0.0.1 or ::1)", port, id))
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
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // a long poll may wait for its answer
	}
}

// portClosedError: nothing listens on the port in the neuron.
type portClosedError struct{ err error }

func (e *portClosedError) Error() string { return e.err.Error() }
func (e *portClosedError) Unwrap() error { return e.err }

// tokenOK reports whether r carries the API's token.
func (s *Server) tokenOK(r *http.Request) bool {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), []byte(s.opts.Token)) == 1
}

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
	u, err := portsign.URL(s.opts.URLKey, scheme+"://"+r.Host, s.opts.Domain, st.ID, req.Port, exp)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, cortex.PortURL{URL: u, ExpiresAt: exp.UTC()})
}
