package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/protocol/egressca"
)

// Secret is a value the neuron never holds. The neuron's environment has
// Placeholder in its place; the proxy puts Value in place of Placeholder
// in the headers of HTTPS requests to Hosts, and only there.
type Secret struct {
	Name        string
	Placeholder string
	Value       string
	// Hosts are "host" or "host:port" (port 443 when none is given).
	Hosts []string
}

// MinPlaceholder is the shortest placeholder accepted: long enough that
// it never turns up in a request by chance.
const MinPlaceholder = 24

// Secrets terminates the HTTPS of the hosts its secrets are for, with a
// certificate authority of its own that only the neuron trusts, and puts
// the secrets into those requests' headers. Every other host stays an
// opaque CONNECT tunnel.
type Secrets struct {
	list  []Secret
	hosts map[string][]int // host:port -> indexes into list
	roots *x509.CertPool   // what the real servers are checked against; nil: the system's
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey // the authority's, and every leaf's
	pem   []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewSecrets checks list and makes the authority: a new key that never
// leaves this process, constrained to the secrets' hosts. roots checks
// the real servers (nil: the system's roots).
func NewSecrets(list []Secret, roots *x509.CertPool) (*Secrets, error) {
	var hosts []string
	for _, sec := range list {
		hosts = append(hosts, sec.Hosts...)
	}
	certPEM, keyPEM, err := egressca.New(hosts)
	if err != nil {
		return nil, err
	}
	return NewSecretsWith(list, roots, certPEM, keyPEM)
}

// NewSecretsWith checks list and takes the authority made for it
// (egressca.New, by whoever starts the proxy: in kube mode the host, at
// the create, since every host that holds the neuron's tunnel must sign
// with the one authority the neuron trusts).
func NewSecretsWith(list []Secret, roots *x509.CertPool, certPEM, keyPEM []byte) (*Secrets, error) {
	s := &Secrets{list: list, hosts: map[string][]int{}, roots: roots, leaves: map[string]*tls.Certificate{}}
	for i, sec := range list {
		if err := CheckSecretName(sec.Name); err != nil {
			return nil, err
		}
		if len(sec.Placeholder) < MinPlaceholder || strings.ContainsAny(sec.Placeholder, "\x00\r\n ") {
			return nil, fmt.Errorf("secret %s: a placeholder of at least %d bytes, without spaces or line ends", sec.Name, MinPlaceholder)
		}
		if sec.Value == "" || strings.ContainsAny(sec.Value, "\x00\r\n") {
			return nil, fmt.Errorf("secret %s: the value is empty or holds a NUL or a line end (it goes into a header)", sec.Name)
		}
		if len(sec.Hosts) == 0 {
			return nil, fmt.Errorf("secret %s: no host to send it to", sec.Name)
		}
		for j := range list[:i] {
			if list[j].Name == sec.Name || strings.Contains(list[j].Placeholder, sec.Placeholder) || strings.Contains(sec.Placeholder, list[j].Placeholder) {
				return nil, fmt.Errorf("secret %s: named twice, or its placeholder overlaps %s's", sec.Name, list[j].Name)
			}
		}
		for _, h := range sec.Hosts {
			host, port, err := allowlist.SecretHost(h)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", sec.Name, err)
			}
			hp := net.JoinHostPort(host, strconv.Itoa(port))
			s.hosts[hp] = append(s.hosts[hp], i)
		}
	}
	ca, key, err := egressca.Parse(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	s.ca, s.key, s.pem = ca, key, certPEM
	return s, nil
}

// CAPEM is the authority's certificate, for the neuron's trust store.
func (s *Secrets) CAPEM() []byte { return s.pem }

// CheckSecretName refuses a name that is not an environment variable's.
func CheckSecretName(name string) error {
	if len(name) > 128 || !protocol.ValidEnvName(name) {
		return fmt.Errorf("secret name %q: letters, digits and '_', not starting with a digit", name)
	}
	return nil
}

// terminates reports whether the proxy terminates CONNECTs to host:port.
func (s *Secrets) terminates(host string, port int) bool {
	if s == nil {
		return false
	}
	_, ok := s.hosts[s.key4(host, port)]
	return ok
}

func (s *Secrets) key4(host string, port int) string {
	return net.JoinHostPort(allowlist.CanonicalHost(host), strconv.Itoa(port))
}

// stray names the first secret whose placeholder is in a request's
// target or headers (Basic credentials decoded) and which is not for
// host:port ("" if none; with host "", plain HTTP, no secret may go at
// all).
func (s *Secrets) stray(target string, h textproto.MIMEHeader, host string, port int) string {
	if s == nil {
		return ""
	}
	bound := s.hosts[s.key4(host, port)]
	for i, sec := range s.list {
		if host != "" && slices.Contains(bound, i) {
			continue
		}
		if strings.Contains(target, sec.Placeholder) {
			return sec.Name
		}
		for _, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, sec.Placeholder) || strings.Contains(basic(v), sec.Placeholder) {
					return sec.Name
				}
			}
		}
	}
	return ""
}

// credentialHeaders are the headers a secret's value may be put into:
// where APIs take a key (Authorization; Anthropic's x-api-key, Azure's
// api-key, Google's x-goog-api-key, GitLab's private-token). Any other
// header, echoed back by a server (an error that quotes it, a debug
// endpoint), would hand the value to the neuron.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Private-Token"}

// credential returns v with the placeholder p replaced by value when p is
// the whole credential v holds: v itself, "SCHEME p" (Bearer, token), or
// a part of Basic credentials ("Basic base64(user:p)"). ok is false when
// p is in v in any other way.
func credential(v, p, value string) (string, bool) {
	switch {
	case v == p:
		return value, true
	case strings.HasPrefix(strings.ToLower(v), "basic "):
		user, pass, found := strings.Cut(basic(v), ":")
		switch {
		case found && pass == p && !strings.Contains(user, p):
			return v[:6] + base64.StdEncoding.EncodeToString([]byte(user+":"+value)), true
		case found && user == p && !strings.Contains(pass, p):
			return v[:6] + base64.StdEncoding.EncodeToString([]byte(value+":"+pass)), true
		}
		return v, false
	}
	scheme, rest, found := strings.Cut(v, " ")
	if found && rest == p && validToken(scheme) {
		return scheme + " " + value, true
	}
	return v, false
}

// put puts the values of the secrets for host:port in place of their
// placeholders in h and returns the names it put, or names a secret whose
// placeholder is somewhere it may not go: another header than a
// credential one, or a part of a credential rather than the whole.
func (s *Secrets) put(target string, h textproto.MIMEHeader, host string, port int) (put []string, misplaced string) {
	for _, i := range s.hosts[s.key4(host, port)] {
		sec := s.list[i]
		if strings.Contains(target, sec.Placeholder) {
			return nil, sec.Name + " (in the target, not a credential header)"
		}
		used := false
		for name, vs := range h {
			for j, v := range vs {
				if !strings.Contains(v, sec.Placeholder) && !strings.Contains(basic(v), sec.Placeholder) {
					continue
				}
				if !slices.Contains(credentialHeaders, name) {
					return nil, sec.Name + " (in " + name + ", not a credential header)"
				}
				nv, ok := credential(v, sec.Placeholder, sec.Value)
				if !ok {
					return nil, sec.Name + " (in " + name + ", not the whole credential)"
				}
				vs[j], used = nv, true
			}
		}
		if used {
			put = append(put, sec.Name)
		}
	}
	return put, ""
}

// mask is what a secret's value becomes where a server sends it back: as
// long as the value, so that the answer's framing holds.
func mask(value string) string {
	m := "[value of a cortex secret]"
	if len(m) >= len(value) {
		return strings.Repeat("*", len(value))
	}
	return m + strings.Repeat("*", len(value)-len(m))
}

// scrubber masks the secrets' values in what passes through it (a
// server's answer, which may quote the request). A value split across
// writes is caught: the last len(value)-1 bytes wait for the next write
// or for Flush. Compressed answers are not looked into.
type scrubber struct {
	w      flushing
	values []string
	hold   []byte
	keep   int
}

func (s *Secrets) scrubber(w *bufio.Writer, host string, port int) *scrubber {
	sc := &scrubber{w: flushing{w}}
	for _, i := range s.hosts[s.key4(host, port)] {
		v := s.list[i].Value
		sc.values = append(sc.values, v)
		sc.keep = max(sc.keep, len(v)-1)
	}
	return sc
}

func (sc *scrubber) Write(b []byte) (int, error) {
	sc.hold = append(sc.hold, b...)
	sc.maskAll()
	if n := len(sc.hold) - sc.keep; n > 0 {
		if _, err := sc.w.Write(sc.hold[:n]); err != nil {
			return 0, err
		}
		sc.hold = append(sc.hold[:0], sc.hold[n:]...)
	}
	return len(b), nil
}

// Flush writes what is held: the end of a chunk or a body.
func (sc *scrubber) Flush() error {
	sc.maskAll()
	_, err := sc.w.Write(sc.hold)
	sc.hold = sc.hold[:0]
	return err
}

// maskString masks the values in s.
func (sc *scrubber) maskString(s string) string {
	for _, v := range sc.values {
		s = strings.ReplaceAll(s, v, mask(v))
	}
	return s
}

func (sc *scrubber) maskAll() {
	for _, v := range sc.values {
		for i := bytes.Index(sc.hold, []byte(v)); i >= 0; i = bytes.Index(sc.hold, []byte(v)) {
			copy(sc.hold[i:], mask(v))
		}
	}
}

// basic decodes a header value's Basic credentials ("" if it has none).
func basic(v string) string {
	if len(v) < 6 || !strings.EqualFold(v[:6], "Basic ") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
	if err != nil {
		return ""
	}
	return string(b)
}

// leaf is the certificate the proxy shows the neuron for host, made on
// first use and kept.
func (s *Secrets) leaf(host string) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.leaves[host]; ok {
		return c, nil
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		// No common name: OpenSSL checks one that looks like a host name
		// against the authority's name constraints, an address too.
		SerialNumber: egressca.Serial(),
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     s.ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &s.key.PublicKey, s.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: s.key}
	s.leaves[host] = c
	return c, nil
}

// bufConn is a connection whose first bytes were already read into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// idleRequest is how long a terminated connection waits for its next
// request.
const idleRequest = 2 * time.Minute

// terminate serves a CONNECT to a secret's host: TLS with the neuron,
// TLS with the real server (checked against s.roots), and between them
// HTTP/1.1 requests, one at a time, with the secrets put in. A request
// that carries another secret's placeholder is refused and ends the
// connection.
func (p *Proxy) terminate(ctx context.Context, c net.Conn, br *bufio.Reader, up net.Conn, d Decision) {
	s := p.Secrets
	// Every spelling of a host gets the one certificate.
	cert, err := s.leaf(allowlist.CanonicalHost(d.Host))
	if err != nil {
		p.log(Decision{Method: d.Method, Host: d.Host, Port: d.Port, Allowed: true, Reason: d.Reason, Addr: d.Addr, Err: err})
		return
	}
	client := tls.Server(bufConn{c, br}, &tls.Config{Certificates: []tls.Certificate{*cert},
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	hctx, cancel := context.WithTimeout(ctx, headTimeout)
	err = client.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return // the neuron's client gave up, or does not trust the authority
	}
	// A server named by address is checked against its certificate's
	// addresses, as crypto/tls does for an address in ServerName.
	server := tls.Client(up, &tls.Config{ServerName: d.Host, RootCAs: s.roots,
		NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	hctx, cancel = context.WithTimeout(ctx, dialTimeout)
	err = server.HandshakeContext(hctx)
	cancel()
	if err != nil {
		d.Err = fmt.Errorf("TLS with the server: %w", err)
		p.log(d)
		// The 502 answers the client's request, once it has come: sent
		// before it, it is a response no request asked for, which a
		// client may drop as unsolicited (Go's transport does, and its
		// request then fails without saying why). The server's
		// connection is of no more use meanwhile.
		up.Close()
		client.SetReadDeadline(time.Now().Add(headTimeout))
		if _, err := readRequest(bufio.NewReader(&headLimit{r: client, n: maxRequestHead})); err == nil {
			io.WriteString(client, response(502, "tls_certificate_error", d.Err.Error()))
		}
		return
	}
	// Heads are bounded both ways as the proxy's own are; bodies are not
	// heads.
	clim, slim := &headLimit{r: client}, &headLimit{r: server}
	cr, sr := bufio.NewReader(clim), bufio.NewReader(slim)
	cw, sw := bufio.NewWriter(client), bufio.NewWriter(server)
	hostHeader := allowlist.CanonicalHost(d.Host)
	if strings.Contains(hostHeader, ":") {
		hostHeader = "[" + hostHeader + "]"
	}
	if d.Port != 443 {
		hostHeader += ":" + strconv.Itoa(d.Port)
	}
	for {
		client.SetReadDeadline(time.Now().Add(idleRequest))
		clim.n = maxRequestHead
		req, err := readRequest(cr)
		client.SetReadDeadline(time.Time{})
		clim.n = 1 << 62
		if err != nil {
			if !errors.Is(err, io.EOF) {
				io.WriteString(client, response(400, "http_request_error", err.Error()))
			}
			return
		}
		rd := Decision{Method: req.method, Host: d.Host, Port: d.Port, Addr: d.Addr}
		if name := s.stray(req.target, req.header, d.Host, d.Port); name != "" {
			rd.Reason = fmt.Sprintf("the request carries the placeholder of secret %s, which is not for %s", name, s.key4(d.Host, d.Port))
			p.log(rd)
			io.WriteString(client, response(403, "http_request_denied", rd.Reason))
			return
		}
		put, misplaced := s.put(req.target, req.header, d.Host, d.Port)
		if misplaced != "" {
			rd.Reason = "the request carries the placeholder of secret " + misplaced + ": a value goes only into a credential header, whole"
			p.log(rd)
			io.WriteString(client, response(403, "http_request_denied", rd.Reason))
			return
		}
		rd.Allowed, rd.Reason = true, d.Reason
		if len(put) > 0 {
			rd.Reason += "; secret " + strings.Join(put, ", ") + " put in"
		}
		p.log(rd)
		if req.expect {
			// The server's 100 would come only once it has the body; the
			// client sends the body only once it has a 100.
			if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		// The server is the one the CONNECT named, and so is the Host it
		// is told: a request may not ask another site behind the same
		// address (domain fronting) for what the secret opens.
		req.header.Set("Host", hostHeader)
		if err := req.writeTo(sw, cr, &p.counts.bytes); err != nil {
			return
		}
		slim.n = maxRequestHead
		more, upgraded, err := relayResponse(cw, sr, slim, req, s.scrubber(cw, d.Host, d.Port), &p.counts.bytes)
		if err != nil {
			return
		}
		if upgraded {
			splice(client, cr, bufConn{server, sr}, defaultLinger, &p.counts.bytes)
			return
		}
		if !more || req.close {
			return
		}
	}
}
