// Package llmtest is the plumbing of the fake vendor servers the provider
// tests run against: an HTTP server that records every request exactly and
// answers from a script, scripted answers that stream an event stream
// event by event as the vendors' APIs do, and recorders for a provider's
// retry waits and streamed events.
//
// What a vendor's wire looks like (its paths, headers, bodies, errors)
// is not here: each provider's tests say it, in recorded fixtures, and
// check requests against it. Nothing here may be used outside tests.
package llmtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Request is one request the server received, as it was sent.
type Request struct {
	Method string
	Path   string // the URL's path
	URI    string // the path and the query
	Header http.Header
	Body   []byte
}

// Options shape a Server beyond its script.
type Options struct {
	// Check vets a request as the vendor's API would (method, path,
	// headers, body) and returns what is wrong with it: each problem fails
	// the test, and the request is answered with Reject, not the script.
	Check  func(r *Request) []string
	Reject http.Handler
	// Exhausted answers a request past the end of the script and fails
	// the test; nil: the script's last answer repeats (retries against a
	// failing server).
	Exhausted http.Handler
	// Header is set on every answer (a request id).
	Header map[string]string
}

// Server is a fake vendor API on a loopback port.
type Server struct {
	// URL is the server's base URL.
	URL string

	t    testing.TB
	srv  *httptest.Server
	opts Options

	mu     sync.Mutex
	script []http.Handler
	reqs   []Request
}

// NewServer starts a server whose n-th request is answered by script[n];
// it is closed when the test ends.
func NewServer(t testing.TB, opts Options, script ...http.Handler) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts, script: script}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("fake server: reading the body: %v", err)
	}
	req := Request{Method: r.Method, Path: r.URL.Path, URI: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	var h http.Handler
	switch {
	case n < len(s.script):
		h = s.script[n]
	case s.opts.Exhausted == nil && len(s.script) > 0:
		h = s.script[len(s.script)-1]
	}
	s.mu.Unlock()

	for k, v := range s.opts.Header {
		w.Header().Set(k, v)
	}
	if s.opts.Check != nil {
		if problems := s.opts.Check(&req); len(problems) > 0 {
			for _, p := range problems {
				s.t.Errorf("fake server: request %d: %s", n+1, p)
			}
			s.opts.Reject.ServeHTTP(w, r)
			return
		}
	}
	if h == nil {
		s.t.Errorf("fake server: unexpected request %d to %s", n+1, r.URL.Path)
		if s.opts.Exhausted != nil {
			s.opts.Exhausted.ServeHTTP(w, r)
		} else {
			http.Error(w, "no answer scripted", http.StatusInternalServerError)
		}
		return
	}
	h.ServeHTTP(w, r)
}

// Serve starts a server with no options: the script's last answer
// repeats, and no request is refused.
func Serve(t testing.TB, script ...http.Handler) *Server {
	t.Helper()
	return NewServer(t, Options{}, script...)
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Count returns how many requests were received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// Last returns the last request received (the zero Request before any).
func (s *Server) Last() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return Request{}
	}
	return s.reqs[len(s.reqs)-1]
}

// Client returns a client for the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Close closes the server and every connection to it.
func (s *Server) Close() { s.srv.Close() }

// Reply is one scripted answer. A 200 (the default) is an event stream,
// written event by event ("\n\n" ends one) with a flush after each, as
// the vendors' APIs stream; another status, or JSON, is a JSON body.
type Reply struct {
	Status int
	Header map[string]string
	Body   string
	// JSON makes a 200's body JSON (a count of tokens), not a stream.
	JSON bool
	// Hold keeps the stream open after the body until the client leaves.
	Hold bool
	// Hangup closes the connection without an answer.
	Hangup bool
}

// ServeHTTP answers r with the reply.
func (rep Reply) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rep.Hangup {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	stream := status == http.StatusOK && !rep.JSON
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	if stream {
		WriteSSE(w, rep.Body)
	} else {
		io.WriteString(w, rep.Body) //nolint:errcheck // the client reports a short body itself
	}
	if rep.Hold {
		<-r.Context().Done()
	}
}

// WriteSSE writes an event stream to w event by event, flushing each, and
// stops early once the client has gone away.
func WriteSSE(w http.ResponseWriter, stream string) {
	fl, _ := w.(http.Flusher)
	for _, ev := range strings.SplitAfter(stream, "\n\n") {
		if _, err := io.WriteString(w, ev); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// Fixture returns the text of testdata/name, a recorded exchange.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return string(b)
}

// Sleeps stands in for a provider's wait between retries (llm.WithSleep):
// it records each wait instead of waiting.
type Sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

// Sleep records d and returns at once (ctx's error, if it is done).
func (s *Sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

// All returns the waits so far.
func (s *Sleeps) All() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// Events collects a provider's streamed events (On is the callback).
type Events struct {
	mu   sync.Mutex
	list []llm.Event
}

// On records ev.
func (e *Events) On(ev llm.Event) {
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
}

// All returns the events so far, in order.
func (e *Events) All() []llm.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]llm.Event(nil), e.list...)
}

// Kinds returns the kinds of the events so far, in order.
func (e *Events) Kinds() []llm.EventKind {
	var out []llm.EventKind
	for _, ev := range e.All() {
		out = append(out, ev.Kind)
	}
	return out
}

// Of returns the events of one kind, in order.
func (e *Events) Of(kind llm.EventKind) []llm.Event {
	var out []llm.Event
	for _, ev := range e.All() {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// Text joins the text of the events of one kind.
func (e *Events) Text(kind llm.EventKind) string {
	var b strings.Builder
	for _, ev := range e.Of(kind) {
		b.WriteString(ev.Text)
	}
	return b.String()
}

// WaitGoroutines fails the test if more than want goroutines are still
// running after a while: the test's own outlived it.
func WaitGoroutines(t testing.TB, want int) {
	t.Helper()
	if !waittest.Until(30*time.Second, func() bool { return runtime.NumGoroutine() <= want }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left, want %d:\n%s", runtime.NumGoroutine(), want, buf[:runtime.Stack(buf, true)])
	}
}
