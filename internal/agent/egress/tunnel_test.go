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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// tunnelRig is the guest's end and the host's end of a tunnel, joined
// through a switch that can put a new host process in place, as a
// snapshot restore does: the guest resumes, and the host's end is new.
type tunnelRig struct {
	t               *testing.T
	guest           *GuestTunnel
	proxy           string // the guest's listener
	allowed, denied string // origins the rules allow and do not
	policy          *allowlist.List
	switchSide      net.Conn // the switch's end of the guest's stream
	mu              sync.Mutex
	host            *tunnelHost
}

// tunnelHost is one host process's end.
type tunnelHost struct {
	conn   net.Conn // the switch's end of the host's stream
	done   chan error
	cancel context.CancelFunc
}

func origin(t *testing.T, text string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, text) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func newTunnelRig(t *testing.T) *tunnelRig {
	r := &tunnelRig{t: t, allowed: origin(t, "allowed"), denied: origin(t, "denied")}
	pol, err := allowlist.Parse([]string{r.allowed})
	if err != nil {
		t.Fatal(err)
	}
	r.policy = pol
	guestSide, switchSide := net.Pipe()
	r.switchSide = switchSide
	r.guest = &GuestTunnel{Logf: t.Logf}
	r.guest.Attach(guestSide)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.proxy = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); r.guest.Serve(ctx, ln) }()
	r.newHost("")
	pumped := make(chan struct{})
	go func() { // the guest's bytes go to whichever host is current
		defer close(pumped)
		buf := make([]byte, 32<<10)
		for {
			n, err := switchSide.Read(buf)
			if n > 0 {
				r.mu.Lock()
				h := r.host
				r.mu.Unlock()
				h.conn.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-served
		switchSide.Close()
		guestSide.Close()
		<-pumped
		r.stopHost()
	})
	return r
}

// newHost puts a new host's end in place; stale is what it reads first
// (the remains of a session the guest had with the last one).
func (r *tunnelRig) newHost(stale string) {
	hostSide, conn := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	h := &tunnelHost{conn: conn, done: make(chan error, 1), cancel: cancel}
	var d net.Dialer
	p := &Proxy{Policy: r.policy, Dial: d.DialContext,
		Resolve: func(context.Context, string) ([]netip.Addr, error) { return nil, fmt.Errorf("no names here") }}
	go func() { h.done <- p.ServeTunnel(ctx, hostSide) }()
	go func() { // the host's bytes go to the guest
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				r.switchSide.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	if stale != "" {
		conn.Write([]byte(stale))
	}
	r.mu.Lock()
	r.host = h
	r.mu.Unlock()
}

// stopHost ends the current host's end, as the VMM's exit does.
func (r *tunnelRig) stopHost() {
	r.mu.Lock()
	h := r.host
	r.mu.Unlock()
	h.conn.Close()
	select {
	case err := <-h.done:
		if err != nil {
			r.t.Errorf("the host's end: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.t.Fatal("the host's end did not return after its stream ended")
	}
}

// get fetches http://origin/ through the guest's listener.
func (r *tunnelRig) get(origin string) (int, string) {
	r.t.Helper()
	pu, _ := url.Parse("http://" + r.proxy)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	resp, err := c.Get("http://" + origin + "/")
	if err != nil {
		r.t.Fatalf("GET %s through the tunnel: %v", origin, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *tunnelRig) wantAllowed() {
	r.t.Helper()
	if code, body := r.get(r.allowed); code != 200 || body != "allowed" {
		r.t.Fatalf("allowed origin: %d %q", code, body)
	}
}

// The host decides: what the rules allow goes through, in absolute form
// and through CONNECT, and nothing else does.
func TestTunnelCarriesWhatTheHostAllows(t *testing.T) {
	r := newTunnelRig(t)
	r.wantAllowed()
	if code, body := r.get(r.denied); code != 403 {
		t.Fatalf("denied origin: %d %q", code, body)
	}
	c, err := net.Dial("tcp", r.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", r.allowed, r.allowed)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", r.allowed)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "allowed" {
		t.Fatalf("through CONNECT: %q", b)
	}
	// Many at once share the one stream.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); r.wantAllowed() }()
	}
	wg.Wait()
}

// A restore: the guest resumes in its old session, the host's end is a
// new process reading leftovers first. Reset starts a new session with it.
func TestTunnelNewHostAfterRestore(t *testing.T) {
	r := newTunnelRig(t)
	r.wantAllowed()
	r.stopHost()
	r.newHost("\x00\x01\x02 the remains of the old session\n" + tunnelReady + "not-a-nonce\n\xff")
	r.guest.Reset()
	r.wantAllowed()
	if code, _ := r.get(r.denied); code != 403 {
		t.Fatalf("denied origin after the restore: %d", code)
	}
}

// A hello the host misses (it read it as part of a session the guest had
// given up) is said again, and the guest gets through.
func TestTunnelHelloAgain(t *testing.T) {
	old := helloRetry
	helloRetry = 200 * time.Millisecond
	t.Cleanup(func() { helloRetry = old })
	r := newTunnelRig(t)
	r.wantAllowed()
	r.guest.Reset() // the host's session lives on and swallows the next hello
	r.wantAllowed()
}

// The host's end returns, without error, once its stream ends; the guest
// answers its programs with a 502 that says why.
func TestTunnelEnds(t *testing.T) {
	r := newTunnelRig(t)
	r.wantAllowed()
	r.switchSide.Close() // the port and the VMM's end are gone
	code, body := r.get(r.allowed)
	if code != 502 || !strings.Contains(body, "egress proxy is down") {
		t.Fatalf("after the stream ended: %d %q", code, body)
	}
}

// bigOrigin serves size bytes to every request.
func bigOrigin(b *testing.B, size int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// fetch downloads http://origin/ through the proxy at proxy, discarding it.
func fetch(b *testing.B, proxy, origin string) {
	pu, _ := url.Parse("http://" + proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	resp, err := c.Get("http://" + origin + "/")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
		b.Fatalf("%d %v", resp.StatusCode, err)
	}
}

// BenchmarkDownload: 32 MiB from an allowed origin, through the proxy on
// loopback (as nsbox serves it) and through the tunnel a VM's guest uses
// (a yamux stream over one Unix socket pair, as QEMU's chardev carries it;
// the guest's emulated CPU is not part of this).
func BenchmarkDownload(b *testing.B) {
	const size = 32 << 20
	origin := bigOrigin(b, size)
	pol, err := allowlist.Parse([]string{origin})
	if err != nil {
		b.Fatal(err)
	}
	var d net.Dialer
	p := &Proxy{Policy: pol, Dial: d.DialContext}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("proxy", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.Serve(ctx, ln)
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			fetch(b, ln.Addr().String(), origin)
		}
	})
	b.Run("tunnel", func(b *testing.B) {
		guestSide, hostSide := socketPair(b)
		go p.ServeTunnel(ctx, hostSide)
		g := &GuestTunnel{}
		g.Attach(guestSide)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go g.Serve(ctx, ln)
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			fetch(b, ln.Addr().String(), origin)
		}
	})
}
