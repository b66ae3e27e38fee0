package sandboxtest

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

var portServer struct {
	once sync.Once
	path string
	err  error
}

// PortServer builds (once per test binary) the static server RunPorts
// runs inside neurons: plain HTTP at /, /big?n=BYTES, a WebSocket echo at
// /ws, an SSE stream at /sse, /upload counting what it reads.
func PortServer(t testing.TB) string {
	t.Helper()
	portServer.once.Do(func() {
		if p := os.Getenv("NSYS_CORTEX_TEST_PORTSERVER"); p != "" {
			portServer.path = p // built beforehand (a test run as another user)
			return
		}
		_, file, _, _ := runtime.Caller(0)
		dir, err := os.MkdirTemp("", "portserver")
		if err != nil {
			portServer.err = err
			return
		}
		portServer.path = filepath.Join(dir, "portserver")
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", portServer.path, "./testdata/portserver")
		cmd.Dir = filepath.Dir(file)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			portServer.err = err
			portServer.path = string(out)
		}
	})
	if portServer.err != nil {
		t.Fatalf("building the port server: %v: %s", portServer.err, portServer.path)
	}
	return portServer.path
}

// FreePort is a TCP port nothing listens on on the host's loopback now:
// where a port server listens in a neuron that shares the host's network
// (process mode), and harmlessly elsewhere.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartPortServer copies the port server into the neuron c talks to and
// runs it in the background on port, returning once it answers.
func StartPortServer(t testing.TB, ctx context.Context, c *link.Client, port int) {
	t.Helper()
	bin, err := os.ReadFile(PortServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "portserver", bin, &link.WriteOptions{Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"./portserver", strconv.Itoa(port)}}}); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 60*time.Second, "the port server to listen in the neuron", func() bool {
		conn, err := c.DialPort(ctx, port)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// RunPorts runs the conformance suite of port access through the channel
// (link.Client.DialPort) against a mode: a real HTTP server inside the
// neuron, its WebSocket echo and its SSE stream, reached with no network
// policy (the neuron has none), and a port nothing listens on.
func RunPorts(t *testing.T, cfg Config) {
	f := newFixture(t, cfg)
	m := f.manager()
	f.create(m, "web")
	c := f.connect(m, "web")
	port := FreePort(t)
	StartPortServer(t, f.ctx, c, port)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return c.DialPort(ctx, port)
	}}}
	defer hc.CloseIdleConnections()

	t.Run("HTTP", func(t *testing.T) {
		for range 3 { // kept-alive connections are reused
			resp, err := hc.Get("http://neuron/some/path?q=1")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.HasPrefix(string(b), "hello from the neuron: GET /some/path?q=1") {
				t.Fatalf("GET through the port: %q", b)
			}
		}
		resp, err := hc.Post("http://neuron/upload", "application/octet-stream", io.LimitReader(zeros{}, 5<<20))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "5242880" {
			t.Fatalf("POST of 5 MiB: the server read %q", b)
		}
	})
	t.Run("WebSocket", func(t *testing.T) {
		ws, _, err := websocket.Dial(f.ctx, "ws://neuron/ws", &websocket.DialOptions{HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		for _, msg := range []string{"one", "two"} {
			if err := ws.Write(f.ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, b, err := ws.Read(f.ctx)
			if err != nil || string(b) != "echo: "+msg {
				t.Fatalf("websocket echo of %q: %q %v", msg, b, err)
			}
		}
	})
	t.Run("SSE", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://neuron/sse", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// Events arrive one by one as the server flushes them, not when
		// a buffer fills: the stream never ends, so reading three of them
		// proves it.
		sc := bufio.NewScanner(resp.Body)
		var got []string
		for len(got) < 3 && sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				got = append(got, l)
			}
		}
		if len(got) < 3 || got[0] != "data: tick 0" {
			t.Fatalf("SSE events: %q %v", got, sc.Err())
		}
	})
	t.Run("NothingListens", func(t *testing.T) {
		if _, err := c.DialPort(f.ctx, FreePort(t)); !protocol.HasCode(err, protocol.CodeNotFound) {
			t.Fatalf("a port nothing listens on: %v, want NOT_FOUND", err)
		}
	})
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
