package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

const (
	placeholderA = "cxsecret-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	placeholderB = "cxsecret-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	valueA       = "sk-the-real-value-of-A"
	valueB       = "ghp_the-real-value-of-B"
)

// secretRig: a proxy with two secrets, A for the HTTPS server sa and B for
// the HTTPS server sb, in front of those and of a plain HTTP server and a
// third HTTPS server (no secret's). Every server records what reached it.
type secretRig struct {
	p          *Proxy
	proxy      string
	s          *Secrets
	sa, sb, so *httptest.Server // HTTPS: A's, B's, no secret's
	plain      *httptest.Server
	mu         sync.Mutex
	seen       []string // every header value and target any server got
	logged     []string
}

func newSecretRig(t *testing.T) *secretRig {
	t.Helper()
	rig := &secretRig{}
	record := func(w http.ResponseWriter, r *http.Request) {
		rig.mu.Lock()
		rig.seen = append(rig.seen, r.RequestURI, r.Host)
		for _, vs := range r.Header {
			rig.seen = append(rig.seen, vs...)
		}
		rig.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		if r.URL.Path == "/echo" { // a server that quotes the request
			w.Header().Set("X-Echo", auth)
			fmt.Fprintf(w, "you sent %s", auth)
			return
		}
		// What the server got, in words the proxy's mask does not match.
		auth = strings.NewReplacer(base64.StdEncoding.EncodeToString([]byte("x-access-token:"+valueA)), "BASIC-A",
			valueA, "VALUE-A", valueB, "VALUE-B").Replace(auth)
		fmt.Fprintf(w, "auth=%s body=%s", auth, body)
	}
	// Three HTTPS servers on three loopback addresses, so that each is a
	// host of its own.
	tlsOn := func(addr string) *httptest.Server {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("loopback %s: %v", addr, err)
		}
		s := httptest.NewUnstartedServer(http.HandlerFunc(record))
		s.Listener = ln
		s.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t, ln.Addr().(*net.TCPAddr).IP)}}
		s.StartTLS()
		t.Cleanup(s.Close)
		return s
	}
	rig.sa, rig.sb, rig.so = tlsOn("127.0.0.1:0"), tlsOn("127.0.0.2:0"), tlsOn("127.0.0.3:0")
	rig.plain = httptest.NewServer(http.HandlerFunc(record))
	t.Cleanup(rig.plain.Close)
	roots := x509.NewCertPool()
	for _, s := range []*httptest.Server{rig.sa, rig.sb} {
		roots.AddCert(s.Certificate())
	}
	var err error
	rig.s, err = NewSecrets([]Secret{
		{Name: "A", Placeholder: placeholderA, Value: valueA, Hosts: []string{rig.sa.Listener.Addr().String()}},
		{Name: "B", Placeholder: placeholderB, Value: valueB, Hosts: []string{rig.sb.Listener.Addr().String()}},
	}, roots)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := allowlist.Parse([]string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	rig.p = &Proxy{Policy: pol, Dial: d.DialContext, Secrets: rig.s,
		Resolve: func(context.Context, string) ([]netip.Addr, error) { return nil, fmt.Errorf("no names here") },
		Log: func(dec Decision) {
			rig.mu.Lock()
			rig.logged = append(rig.logged, dec.String())
			rig.mu.Unlock()
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rig.p.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	rig.proxy = ln.Addr().String()
	return rig
}

// selfSigned is a server certificate for ip, its own root.
func selfSigned(t *testing.T, ip net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// client is what a program in the neuron uses: the proxy, and trust in the
// neuron's authority and in what else it is given.
func (rig *secretRig) client(t *testing.T, extra ...*x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rig.s.CAPEM()) {
		t.Fatal("the authority's PEM holds no certificate")
	}
	for _, c := range extra {
		pool.AddCert(c)
	}
	u, _ := url.Parse("http://" + rig.proxy)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: false}}
}

func (rig *secretRig) do(t *testing.T, c *http.Client, method, target, auth, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (rig *secretRig) sawAny(subs ...string) string {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, s := range rig.seen {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return s
			}
		}
	}
	return ""
}

// TestSecretsPutOnlyForTheirHosts: the proxy puts A's value in place of
// A's placeholder for A's host (a header, Basic credentials, two requests
// on one connection), and refuses, without forwarding, a placeholder sent
// to any other host: B's host, or plain HTTP.
func TestSecretsPutOnlyForTheirHosts(t *testing.T) {
	rig := newSecretRig(t)
	c := rig.client(t)
	for i := range 2 { // the second on the same kept-alive connection
		code, body, err := rig.do(t, c, "POST", rig.sa.URL+"/v1/models", "Bearer "+placeholderA, "hello")
		if err != nil || code != 200 || body != "auth=Bearer VALUE-A body=hello" {
			t.Fatalf("request %d to A's host: %d %q %v", i, code, body, err)
		}
	}
	userPass := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + placeholderA))
	code, body, err := rig.do(t, c, "GET", rig.sa.URL+"/", "Basic "+userPass, "")
	want := "auth=Basic BASIC-A body="
	if err != nil || code != 200 || body != want {
		t.Fatalf("Basic credentials to A's host: %d %q %v", code, body, err)
	}

	// A's placeholder to B's host (terminated, B's secret would go in).
	code, body, err = rig.do(t, c, "GET", rig.sb.URL+"/", "Bearer "+placeholderA, "")
	if err != nil || code != 403 || !strings.Contains(body, "placeholder of secret A") {
		t.Errorf("A's placeholder to B's host: %d %q %v", code, body, err)
	}
	// In the URL, not a header.
	code, _, err = rig.do(t, c, "GET", rig.sb.URL+"/?key="+placeholderA, "", "")
	if err != nil || code != 403 {
		t.Errorf("A's placeholder in a URL to B's host: %d %v", code, err)
	}
	// Plain HTTP, even to an allowed host.
	code, body, err = rig.do(t, c, "GET", rig.plain.URL+"/", "Bearer "+placeholderA, "")
	if err != nil || code != 403 || !strings.Contains(body, "only over HTTPS") {
		t.Errorf("A's placeholder over plain HTTP: %d %q %v", code, body, err)
	}
	if s := rig.sawAny(placeholderA, valueB); s != "" {
		t.Errorf("a server got %q", s)
	}
	// B's own secret does go to B's host.
	if code, body, err := rig.do(t, c, "GET", rig.sb.URL+"/", "token "+placeholderB, ""); err != nil || body != "auth=token VALUE-B body=" {
		t.Errorf("B's placeholder to B's host: %d %q %v", code, body, err)
	}
	rig.mu.Lock()
	logged := strings.Join(rig.logged, "\n")
	rig.mu.Unlock()
	for _, want := range []string{"secret A put in", "secret B put in", "egress deny GET " + rig.sb.Listener.Addr().String() + ": the request carries the placeholder of secret A"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %q:\n%s", want, logged)
		}
	}
	if strings.Contains(logged, valueA) || strings.Contains(logged, valueB) {
		t.Errorf("a secret's value is in the log:\n%s", logged)
	}
}

// TestSecretsOtherHostsStayTunnels: HTTPS to a host no secret is for is
// an opaque tunnel: the client sees the server's own certificate (it
// trusts that alone, not the neuron's authority).
func TestSecretsOtherHostsStayTunnels(t *testing.T) {
	rig := newSecretRig(t)
	pool := x509.NewCertPool()
	pool.AddCert(rig.so.Certificate())
	u, _ := url.Parse("http://" + rig.proxy)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, body, err := rig.do(t, c, "GET", rig.so.URL+"/", "Bearer "+placeholderA, ""); err != nil || code != 200 {
		t.Fatalf("through the tunnel: %d %q %v", code, body, err)
	}
	// And A's host is terminated: its own certificate is not what the
	// client sees.
	pool = x509.NewCertPool()
	pool.AddCert(rig.sa.Certificate())
	c = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if _, _, err := rig.do(t, c, "GET", rig.sa.URL+"/", "", ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("A's host with only its own certificate trusted: %v", err)
	}
}

// TestSecretsCheckTheRealServer: a server for a secret's host whose
// certificate the roots do not vouch for gets nothing, and the client a
// 502 that says why.
func TestSecretsCheckTheRealServer(t *testing.T) {
	rig := newSecretRig(t)
	rig.s.roots = x509.NewCertPool() // trusts nothing
	code, body, err := rig.do(t, rig.client(t), "GET", rig.sa.URL+"/", "Bearer "+placeholderA, "")
	if err != nil || code != 502 || !strings.Contains(body, "TLS with the server") {
		t.Errorf("an untrusted server: %d %q %v", code, body, err)
	}
	if s := rig.sawAny(valueA, placeholderA); s != "" {
		t.Errorf("the untrusted server got %q", s)
	}
}

// TestSecretsAuthorityIsConstrained: the neuron's authority signs for its
// secrets' hosts only; a certificate it made for any other name would not
// verify, so even its key could not be used against other hosts.
func TestSecretsAuthorityIsConstrained(t *testing.T) {
	s, err := NewSecrets([]Secret{{Name: "K", Placeholder: placeholderA, Value: "v", Hosts: []string{"api.example.com"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CAPEM())
	for host, ok := range map[string]bool{"api.example.com": true, "evil.example.org": false, "10.0.0.1": false} {
		leaf, err := s.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(leaf.Certificate[0])
		_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host})
		if (err == nil) != ok {
			t.Errorf("a certificate for %s verifies: %v, want %v", host, err, ok)
		}
	}
}

// TestNewSecretsRefuses: bad names, short placeholders, values that would
// break a header, overlapping placeholders and bad hosts.
func TestNewSecretsRefuses(t *testing.T) {
	ok := Secret{Name: "K", Placeholder: placeholderA, Value: "v", Hosts: []string{"api.example.com"}}
	for name, bad := range map[string][]Secret{
		"name":        {{Name: "1K", Placeholder: placeholderA, Value: "v", Hosts: ok.Hosts}},
		"short":       {{Name: "K", Placeholder: "short", Value: "v", Hosts: ok.Hosts}},
		"line end":    {{Name: "K", Placeholder: placeholderA, Value: "v\r\nX-Evil: 1", Hosts: ok.Hosts}},
		"no host":     {{Name: "K", Placeholder: placeholderA, Value: "v"}},
		"wildcard":    {{Name: "K", Placeholder: placeholderA, Value: "v", Hosts: []string{"*.example.com"}}},
		"bad host":    {{Name: "K", Placeholder: placeholderA, Value: "v", Hosts: []string{"a b"}}},
		"twice":       {ok, ok},
		"overlapping": {ok, {Name: "L", Placeholder: placeholderA + "x", Value: "v", Hosts: ok.Hosts}},
	} {
		if _, err := NewSecrets(bad, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// rawTLS opens a CONNECT tunnel to target through the proxy and TLS over
// it, trusting the neuron's authority: a client that writes what it likes.
func (rig *secretRig) rawTLS(t *testing.T, target string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", rig.proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("CONNECT: %q %v", line, err)
	}
	br.ReadString('\n')
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rig.s.CAPEM())
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: host})
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc, bufio.NewReader(tc)
}

// TestSecretsFraming: what a hostile client writes on a terminated
// connection. Bodies framed two ways, absolute targets and unknown
// codings are refused; the Host the server gets is the CONNECT's, whatever
// the client says (no fronting to another site behind the address); every
// pipelined request is checked on its own, so one that smuggles another
// secret's placeholder behind an innocent one is refused and never reaches
// the server; chunked bodies and answers pass whole.
func TestSecretsFraming(t *testing.T) {
	rig := newSecretRig(t)
	a := rig.sa.Listener.Addr().String()
	send := func(raw string) string {
		t.Helper()
		c, br := rig.rawTLS(t, a)
		io.WriteString(c, raw)
		out, _ := io.ReadAll(br)
		return string(out)
	}
	for name, raw := range map[string]string{
		"CL and TE":      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"two lengths":    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"gzip coding":    "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"absolute":       "GET https://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"signed length":  "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
		"bad chunk size": "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	} {
		if out := send(raw); strings.Contains(out, " 200 ") {
			t.Errorf("%s: answered %q", name, out)
		}
	}
	// Fronting: the client names another site; the server is told its own.
	out := send("GET /front HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " + placeholderA + "\r\nConnection: close\r\n\r\n")
	if !strings.Contains(out, " 200 ") {
		t.Fatalf("a request naming another Host: %q", out)
	}
	// Pipelined: an innocent request, then one with B's placeholder, in
	// one write.
	out = send("GET /first HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + placeholderA + "\r\n\r\n" +
		"GET /second HTTP/1.1\r\nHost: x\r\nX-Key: " + placeholderB + "\r\n\r\n")
	if !strings.Contains(out, "auth=Bearer VALUE-A") || !strings.Contains(out, " 403 ") || !strings.Contains(out, "placeholder of secret B") {
		t.Errorf("pipelined requests: %q", out)
	}
	// A chunked upload, its answer whole.
	out = send("POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n")
	if !strings.Contains(out, "body=hello world") {
		t.Errorf("a chunked upload: %q", out)
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	sawFront, sawSecond := false, false
	for _, s := range rig.seen {
		sawFront = sawFront || s == "evil.example"
		sawSecond = sawSecond || s == "/second"
	}
	if sawFront || sawSecond {
		t.Errorf("the server got a fronted Host (%v) or the smuggled request (%v): %q", sawFront, sawSecond, rig.seen)
	}
}

// TestSecretsGoOnlyIntoCredentials: a value goes only into a credential
// header, as the whole credential; a placeholder anywhere else in a
// request to its own host is refused (a server that quotes the header
// would hand the value back). And what a server sends back is masked: a
// server that echoes the credential shows the neuron a mask, not the
// value.
func TestSecretsGoOnlyIntoCredentials(t *testing.T) {
	rig := newSecretRig(t)
	c := rig.client(t)
	for name, h := range map[string][2]string{
		"another header":       {"OpenAI-Organization", placeholderA},
		"part of a credential": {"Authorization", "Bearer x" + placeholderA},
		"two in Basic":         {"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(placeholderA+":"+placeholderA))},
		"in the target":        {"X-Nothing", "x"},
	} {
		req, _ := http.NewRequest("GET", rig.sa.URL+"/?key="+placeholderA, nil)
		if name != "in the target" {
			req, _ = http.NewRequest("GET", rig.sa.URL+"/", nil)
		}
		req.Header.Set(h[0], h[1])
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(body), "placeholder of secret A") {
			t.Errorf("%s: %d %q, want 403", name, resp.StatusCode, body)
		}
	}
	for _, hdr := range []string{"X-Api-Key", "Api-Key"} {
		req, _ := http.NewRequest("GET", rig.sa.URL+"/", nil)
		req.Header.Set(hdr, placeholderA)
		if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", hdr, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	req, _ := http.NewRequest("GET", rig.sa.URL+"/echo", nil)
	req.Header.Set("Authorization", "Bearer "+placeholderA)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), valueA) || strings.Contains(resp.Header.Get("X-Echo"), valueA) ||
		!strings.Contains(string(body), mask(valueA)) {
		t.Errorf("an echo of the credential: header %q, body %q", resp.Header.Get("X-Echo"), body)
	}
	if s := rig.sawAny(placeholderA + ":"); s != "" {
		t.Errorf("a server got %q", s)
	}
}

// TestScrubberAcrossWrites: a value split across writes is masked whole,
// and the bytes that pass keep their number.
func TestScrubberAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	sc := &scrubber{w: flushing{bw}, values: []string{"sk-0123456789"}, keep: len("sk-0123456789") - 1}
	in := "abc sk-0123456789 def sk-01234"
	for i := 0; i < len(in); i += 3 {
		sc.Write([]byte(in[i:min(i+3, len(in))]))
	}
	sc.Write([]byte("56789!"))
	sc.Flush()
	got := out.String()
	if strings.Contains(got, "sk-0123456789") || len(got) != len(in)+len("56789!") {
		t.Errorf("scrubbed: %q", got)
	}
}

// TestSecretsOneCertificateAHost: every spelling of a secret's host gets
// the one certificate (a neuron cannot grow PID 1's memory by spelling
// a host many ways), and an address with a zone is no destination.
func TestSecretsOneCertificateAHost(t *testing.T) {
	rig := newSecretRig(t)
	port := rig.sa.Listener.Addr().(*net.TCPAddr).Port
	for _, h := range []string{"127.0.0.1", "::ffff:127.0.0.1", "::ffff:7f00:1"} {
		rig.rawTLS(t, net.JoinHostPort(h, strconv.Itoa(port)))
	}
	rig.s.mu.Lock()
	n := len(rig.s.leaves)
	rig.s.mu.Unlock()
	if n != 1 {
		t.Errorf("%d certificates for one host", n)
	}
	c, err := net.Dial("tcp", rig.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT [::ffff:127.0.0.1%%zone1]:%d HTTP/1.1\r\n\r\n", port)
	if line, _ := bufio.NewReader(c).ReadString('\n'); !strings.Contains(line, " 400 ") {
		t.Errorf("a zoned address: %q", line)
	}
}
