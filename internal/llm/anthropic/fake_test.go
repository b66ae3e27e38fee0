package anthropic

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// testKeyEnv holds the key every test provider reads; set once in TestMain
// so tests can run in parallel without t.Setenv.
const (
	testKeyEnv = "CORTEX_ANTHROPIC_TEST_KEY"
	testKey    = "sk-ant-test-0123456789abcdef"
)

func TestMain(m *testing.M) {
	os.Setenv(testKeyEnv, testKey)
	os.Exit(m.Run())
}

// recorded is one request the fake server received.
type recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

// fakeServer speaks Anthropic's wire format: each request is answered by
// the next handler in the queue. It fails the test when a request lacks
// the headers the real API requires.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	handlers []http.HandlerFunc
	reqs     []recorded
}

func newFakeServer(t *testing.T, handlers ...http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, handlers: handlers}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("fake server: reading body: %v", err)
	}
	f.mu.Lock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, recorded{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	var h http.HandlerFunc
	if n < len(f.handlers) {
		h = f.handlers[n]
	}
	f.mu.Unlock()

	if !f.checkHeaders(r, body) {
		writeJSON(w, http.StatusUnauthorized, nil,
			`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	}
	if h == nil {
		f.t.Errorf("fake server: unexpected request %d to %s", n+1, r.URL.Path)
		writeJSON(w, http.StatusInternalServerError, nil,
			`{"type":"error","error":{"type":"api_error","message":"fake server has no answer queued"}}`)
		return
	}
	h(w, r)
}

func (f *fakeServer) checkHeaders(r *http.Request, body []byte) bool {
	ok := true
	fail := func(format string, args ...any) {
		f.t.Errorf("fake server: "+format, args...)
		ok = false
	}
	if r.Method != http.MethodPost {
		fail("method %s, want POST", r.Method)
	}
	if r.URL.Path != "/v1/messages" && r.URL.Path != "/v1/messages/count_tokens" {
		fail("path %s", r.URL.Path)
	}
	if got := r.Header.Get("x-api-key"); got != testKey {
		fail("x-api-key %q, want the test key", got)
	}
	if r.Header.Get("anthropic-version") == "" {
		fail("no anthropic-version header")
	}
	if got := r.Header.Get("authorization"); got != "" {
		fail("authorization header sent (%d bytes): the key belongs in x-api-key only", len(got))
	}
	if ct := r.Header.Get("content-type"); !strings.HasPrefix(ct, "application/json") {
		fail("content-type %q", ct)
	}
	if !json.Valid(body) {
		fail("body is not JSON: %s", body)
	}
	return ok
}

func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// provider returns a Provider pointed at the fake server, its waits
// recorded rather than slept.
func (f *fakeServer) provider(cfg llm.Config, opts ...llm.Option) (*Provider, *sleepRecorder) {
	f.t.Helper()
	cfg.BaseURL = f.srv.URL
	cfg.KeyEnv = testKeyEnv
	if cfg.Model == "" {
		cfg.Model = "claude-sonnet-4-5"
	}
	rec := &sleepRecorder{}
	opts = append([]llm.Option{llm.WithSleep(rec.sleep), func(o *llm.Options) { o.Backoff.Rand = func() float64 { return 0.5 } }}, opts...)
	p, err := New(cfg, opts...)
	if err != nil {
		f.t.Fatalf("New: %v", err)
	}
	return p, rec
}

// sleepRecorder stands in for the retry wait.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// sse answers with a recorded event stream, flushing event by event as the
// real API does.
func sse(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	data := readFixture(t, name)
	return sseBody(data)
}

func sseBody(data string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		w.Header().Set("cache-control", "no-cache")
		w.Header().Set("request-id", "req_fake")
		w.WriteHeader(http.StatusOK)
		fl, _ := w.(http.Flusher)
		for _, ev := range strings.SplitAfter(data, "\n\n") {
			if _, err := io.WriteString(w, ev); err != nil {
				return // client went away
			}
			if fl != nil {
				fl.Flush()
			}
		}
	}
}

// jsonAnswer answers with a JSON body (an error or count_tokens).
func jsonAnswer(t *testing.T, status int, header map[string]string, name string) http.HandlerFunc {
	t.Helper()
	data := readFixture(t, name)
	return func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status, header, data) }
}

func writeJSON(w http.ResponseWriter, status int, header map[string]string, body string) {
	w.Header().Set("content-type", "application/json")
	w.Header().Set("request-id", "req_fake")
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	io.WriteString(w, body) //nolint:errcheck // the client reports a short body itself
}

// dropConnection closes the TCP connection without answering.
func dropConnection(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Errorf("fake server: cannot hijack")
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			t.Errorf("fake server: hijack: %v", err)
			return
		}
		conn.Close()
	}
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return string(b)
}

// collector gathers streamed events.
type collector struct {
	mu     sync.Mutex
	events []llm.Event
}

func (c *collector) on(ev llm.Event) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
}

func (c *collector) text(kind llm.EventKind) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, ev := range c.events {
		if ev.Kind == kind {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

func (c *collector) kinds() []llm.EventKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []llm.EventKind
	for _, ev := range c.events {
		out = append(out, ev.Kind)
	}
	return out
}

func (c *collector) of(kind llm.EventKind) []llm.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []llm.Event
	for _, ev := range c.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}
