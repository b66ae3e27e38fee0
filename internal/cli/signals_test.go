package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Until SIGINT, SIGTERM and SIGHUP are caught (App.AwaitSignals), they end
// the CLI where it stands. So a command waits for them before it changes
// anything: `version` never; `exec` through a daemon once the daemon found
// the neuron and before it asks for the exec, and here before it looks
// the neuron up (a lookup can enforce a deadline); every other command
// before it runs. A daemon and a mode here record the order of what they
// are asked and of the wait.
func TestSignalsCaughtBeforeChanges(t *testing.T) {
	configEnv(t)
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note(r.Method + " " + r.URL.Path)
		if r.Method == http.MethodGet && r.URL.Path == "/v1/neurons/n1" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"n1","mode":"process","status":"running"}`))
			return
		}
		http.Error(w, `{"error":{"code":"INTERNAL","message":"recorded"}}`, http.StatusInternalServerError)
	}))
	defer srv.Close()
	run := func(a *App, args ...string) []string {
		t.Helper()
		mu.Lock()
		order = nil
		mu.Unlock()
		a.Stdout, a.Stderr, a.Stdin = io.Discard, io.Discard, strings.NewReader("")
		a.AwaitSignals = func() { note("signals") }
		a.Run(context.Background(), args)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
	if got := run(&App{}, "--api", srv.URL, "version"); len(got) != 0 {
		t.Errorf("version: %q, want no wait and no request", got)
	}
	got := run(&App{}, "--api", srv.URL, "exec", "n1", "--", "true")
	if len(got) < 3 || got[0] != "GET /v1/neurons/n1" || got[1] != "signals" || !strings.HasSuffix(got[2], "/exec") {
		t.Errorf("exec: %q, want the neuron found, then the wait, then the exec", got)
	}
	if got := run(&App{}, "--api", srv.URL, "destroy", "n1"); len(got) < 2 || got[0] != "signals" {
		t.Errorf("destroy: %q, want the wait first", got)
	}
	local := &App{Backends: []sandbox.Backend{{Name: "rec", New: func(sandbox.Env) (sandbox.Manager, error) { return recording{note: note}, nil }}}}
	if got := run(local, "exec", "n1", "--", "true"); !slices.Equal(got, []string{"signals", "get n1", "connect n1"}) {
		t.Errorf("local exec: %q, want the wait, then the find, then the connection", got)
	}
	// Only those two say where they wait; a third must be added here.
	var late []string
	for _, c := range (&App{}).rootCommand().Commands() {
		if c.Annotations[lateSignals] != "" {
			late = append(late, c.Name())
		}
	}
	if !slices.Equal(late, []string{"exec", "version"}) {
		t.Errorf("commands that wait for the signals themselves: %q", late)
	}
}

// recording is a mode that knows one running neuron and notes what it is
// asked; anything else it is asked panics (the nil Manager).
type recording struct {
	sandbox.Manager
	note func(string)
}

func (r recording) Get(_ context.Context, id string) (*sandbox.State, error) {
	r.note("get " + id)
	return &sandbox.State{ID: id, Mode: "rec", Status: sandbox.StatusRunning}, nil
}

func (r recording) Connect(_ context.Context, id string) (*link.Client, error) {
	r.note("connect " + id)
	return nil, errors.New("recorded")
}

func (recording) Close() error { return nil }
