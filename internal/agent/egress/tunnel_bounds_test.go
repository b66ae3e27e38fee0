package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// hostileGuest is the guest's end of a tunnel spoken by hand, as a guest
// that wants to hurt the host would: the handshake, then yamux.
func hostileGuest(t *testing.T, p *Proxy) (*yamux.Session, chan error) {
	t.Helper()
	guestSide, hostSide := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.ServeTunnel(ctx, hostSide) }()
	t.Cleanup(func() { cancel(); guestSide.Close(); <-done })
	fmt.Fprintf(guestSide, "%s0123456789abcdef\n", tunnelHello)
	br := bufio.NewReader(guestSide)
	line, err := br.ReadString('\n')
	if err != nil || line != tunnelReady+"0123456789abcdef\n" {
		t.Fatalf("the host's answer: %q %v", line, err)
	}
	sess, err := yamux.Client(struct {
		io.Reader
		io.WriteCloser
	}{br, guestSide}, tunnelConfig())
	if err != nil {
		t.Fatal(err)
	}
	return sess, done
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// A guest that has its connections refused and then keeps sending on
// them, never closing, does not fill the host's memory with what it
// sends (the adversarial review's 200 streams held 198 MB of yamux
// buffers on the host): the proxy's closed streams are drained. One that
// holds more streams open than the proxy serves and the host drains has
// its session ended.
func TestTunnelHostBoundsAGuest(t *testing.T) {
	pol, _ := allowlist.Parse([]string{"allowed.test:443"})
	p := &Proxy{Policy: pol, MaxConns: 4, Dial: (&net.Dialer{}).DialContext}
	sess, _ := hostileGuest(t, p)
	junk := make([]byte, 256<<10)
	before := heapInUse()
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		fmt.Fprintf(st, "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(st), nil)
		if err != nil || res.StatusCode != http.StatusForbidden {
			t.Fatalf("stream %d: %v %v", i, res, err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); st.Write(junk) }() // never closed
	}
	wg.Wait() // the host took it all: it reads what it is done with
	if grew := int64(heapInUse()) - int64(before); grew > 32<<20 {
		t.Errorf("the host's heap grew %d MiB for 200 refused streams kept sending", grew>>20)
	}
	// Past what the host holds open: the session ends, and the guest is
	// told to open no more streams on it.
	for i := 0; ; i++ {
		st, err := sess.OpenStream()
		if err == yamux.ErrRemoteGoAway {
			break
		}
		if err != nil || i == 400 {
			t.Fatalf("stream %d past the bound (%d open): %v", 200+i, sess.NumStreams(), err)
		}
		fmt.Fprintf(st, "CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
	}
}

// slowFirstWrite delays the first write (the host's answer to a hello)
// by d, so that it comes as the guest gives up waiting for it.
type slowFirstWrite struct {
	net.Conn
	d    time.Duration
	once sync.Once
}

func (c *slowFirstWrite) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.d) }) // fault injection: the answer's lateness
	return c.Conn.Write(b)
}

// An answer that comes just as the guest's hello retry fires is taken or
// let go, never left with the stream's reader blocked on it (which froze
// the tunnel for good, its Attach never done): a connection still gets
// through, and the stream's end is still seen.
func TestTunnelLateAnswer(t *testing.T) {
	old := helloRetry
	helloRetry = 30 * time.Millisecond
	defer func() { helloRetry = old }()
	allowed := origin(t, "allowed")
	pol, _ := allowlist.Parse([]string{allowed})
	p := &Proxy{Policy: pol, Dial: (&net.Dialer{}).DialContext}
	for i := 0; i < 20; i++ {
		guestSide, hostSide := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- p.ServeTunnel(ctx, &slowFirstWrite{Conn: hostSide, d: helloRetry}) }()
		g := &GuestTunnel{}
		done := g.Attach(guestSide)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gctx, gcancel := context.WithCancel(context.Background())
		guestServed := make(chan struct{})
		go func() { defer close(guestServed); g.Serve(gctx, ln) }()
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})}, Timeout: 5 * time.Second}
		res, err := c.Get("http://" + allowed + "/")
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.TrimSpace(string(body)) != "allowed" {
			t.Fatalf("try %d: %q", i, body)
		}
		cancel()
		<-served
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("try %d: the guest's stream ended, and its reader did not see it", i)
		}
		gcancel()
		<-guestServed
		guestSide.Close()
	}
}

// A request's method is an HTTP token of at most maxMethod bytes: one of
// 60 KB (which went into the log's line whole) or of odd bytes is
// answered 400, before any decision.
func TestProxyRefusesOddMethods(t *testing.T) {
	pol, _ := allowlist.Parse([]string{"allowed.test:80"})
	var logged []Decision
	var mu sync.Mutex
	p := &Proxy{Policy: pol, Dial: (&net.Dialer{}).DialContext, Log: func(d Decision) { mu.Lock(); logged = append(logged, d); mu.Unlock() }}
	addr := serving(t, p)
	for _, m := range []string{strings.Repeat("M", 60000), strings.Repeat("M", maxMethod+1), "GE\x01T", "G\"ET"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%s http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", m)
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 400") {
			t.Errorf("method %.40q: %q", m, line)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range logged {
		if len(d.Method) > maxMethod {
			t.Errorf("a decision logged with a method of %d bytes", len(d.Method))
		}
	}
	if !isMethod("GET") || !isMethod("CONNECT") || !isMethod("M-SEARCH") {
		t.Error("an ordinary method refused")
	}
}
