package llmtest

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// NewProvider builds the provider under test against s, with opts after
// its own (which record its waits in the Sleeps it returns).
type NewProvider func(s *Server, opts ...llm.Option) (llm.Provider, *Sleeps)

// userRequest is a one-line question.
func userRequest() *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: "hi"}}}}}
}

// CancelMidStream checks that a stream cancelled by its caller, while the
// server holds it open after head (the start of a stream with text in
// it), returns context.Canceled at once and leaves no goroutine behind.
func CancelMidStream(t *testing.T, head string, newProvider NewProvider) {
	t.Helper()
	before := runtime.NumGoroutine()
	s := Serve(t, Reply{Body: head, Hold: true})
	transport := &http.Transport{}
	p, _ := newProvider(s, llm.WithHTTPClient(&http.Client{Transport: transport}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(ctx, userRequest(), func(e llm.Event) {
			if e.Kind == llm.EventText {
				cancel()
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not return after cancel")
	}
	transport.CloseIdleConnections()
	s.Close()
	WaitGoroutines(t, before)
}

// ResetBeforeOutputRetried checks that a connection closed before any
// answer is retried once, after a wait, and the stream then succeeds.
func ResetBeforeOutputRetried(t *testing.T, stream string, newProvider NewProvider) {
	t.Helper()
	s := Serve(t, Reply{Hangup: true}, Reply{Body: stream})
	p, waits := newProvider(s)
	if _, err := p.Stream(context.Background(), userRequest(), nil); err != nil {
		t.Fatal(err)
	}
	if s.Count() != 2 || len(waits.All()) != 1 {
		t.Errorf("attempts = %d, sleeps = %v", s.Count(), waits.All())
	}
}
