package gemini

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// reply is one scripted answer of the fake server.
type reply struct {
	status int
	header map[string]string
	body   string // served as is
	hold   bool   // after the body, keep the stream open until the client leaves
	hangup bool   // close the connection without answering
}

// fakeServer speaks the Gemini API's wire format (streamGenerateContent
// with alt=sse, countTokens, error JSON) from scripted replies and records
// exactly what it was sent.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	replies  []reply // the last one repeats
	bodies   [][]byte
	auth     []string
	paths    []string
	attempts int
}

func newFakeServer(t *testing.T, replies ...reply) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("X-Goog-Api-Key"))
	f.paths = append(f.paths, r.URL.RequestURI())
	rep := f.replies[min(f.attempts, len(f.replies)-1)]
	f.attempts++
	f.mu.Unlock()

	if rep.hangup {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	status := rep.status
	if status == 0 {
		status = http.StatusOK
	}
	if status == http.StatusOK {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, rep.body)
	w.(http.Flusher).Flush()
	if rep.hold {
		<-r.Context().Done()
	}
}

func (f *fakeServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

func (f *fakeServer) lastBody() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[len(f.bodies)-1]
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const testKeyEnv = "CORTEX_TEST_GEMINI_KEY"

func TestMain(m *testing.M) {
	os.Setenv(testKeyEnv, "gm-test-key")
	os.Exit(m.Run())
}

// sleeps records the waits between retries instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newTestProvider builds a provider against f.
func newTestProvider(t *testing.T, f *fakeServer, cfg llm.Config, opts ...llm.Option) (*Provider, *sleeps) {
	t.Helper()
	cfg.Provider = "gemini"
	if cfg.KeyEnv == "" {
		cfg.KeyEnv = testKeyEnv
	}
	if cfg.Model == "" {
		cfg.Model = "gemini-2.5-flash"
	}
	cfg.BaseURL = f.srv.URL
	s := &sleeps{}
	p, err := New(cfg, append([]llm.Option{llm.WithSleep(s.sleep), llm.WithHTTPClient(f.srv.Client())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// recorder collects streamed events.
type recorder struct {
	mu     sync.Mutex
	events []llm.Event
}

func (r *recorder) on(e llm.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []llm.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []llm.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

func userRequest(text string) *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: text}}}}}
}
