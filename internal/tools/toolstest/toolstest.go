// Package toolstest gives tests a real neuron (process mode: a real agent
// over a real channel) and a tool kit on it.
package toolstest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/memory"
)

// Recorder is an audit log in memory.
type Recorder struct {
	mu    sync.Mutex
	Facts []map[string]any
}

// Record keeps one fact.
func (r *Recorder) Record(event string, f map[string]any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]any{"event": event}
	for k, v := range f {
		c[k] = v
	}
	r.Facts = append(r.Facts, c)
	return nil
}

// Last returns the latest fact of event, or nil.
func (r *Recorder) Last(event string) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.Facts) - 1; i >= 0; i-- {
		if r.Facts[i]["event"] == event {
			return r.Facts[i]
		}
	}
	return nil
}

// Env is one test's neuron and a kit on it.
type Env struct {
	T      testing.TB
	Ctx    context.Context
	Set    *sandbox.Set
	Layout layout.Layout
	State  *sandbox.State
	Kit    *tools.Kit
	Audit  *Recorder
	Home   string // the neuron's $HOME on the host
}

var agent = sync.OnceValues(sandboxtest.BuildAgent)

// New creates a process-mode neuron in a fresh home and a kit on it under
// the preset policy. The caller's TestMain must allow insecure modes
// (sandbox.EnvAllowInsecure).
func New(t testing.TB, preset string, opts ...tools.Option) *Env {
	t.Helper()
	return NewOn(t, process.Backend(), preset, opts...)
}

// NewOn is New with the neuron run by backend b (the only one of the set).
func NewOn(t testing.TB, b sandbox.Backend, preset string, opts ...tools.Option) *Env {
	t.Helper()
	return NewTuned(t, b, nil, preset, opts...)
}

// NewTuned is NewOn with the set's environment changed by tune first.
func NewTuned(t testing.TB, b sandbox.Backend, tune func(*sandbox.Env), preset string, opts ...tools.Option) *Env {
	t.Helper()
	return newEnv(t, b, tune, sandbox.CreateOptions{}, preset, opts...)
}

// NewCreated is New with the neuron created with create's options (its
// environment, say).
func NewCreated(t testing.TB, create sandbox.CreateOptions, preset string, opts ...tools.Option) *Env {
	t.Helper()
	return newEnv(t, process.Backend(), nil, create, preset, opts...)
}

func newEnv(t testing.TB, b sandbox.Backend, tune func(*sandbox.Env), create sandbox.CreateOptions, preset string, opts ...tools.Option) *Env {
	t.Helper()
	bin, err := agent()
	if err != nil {
		t.Fatal(err)
	}
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	senv := sandbox.Env{Layout: lay, Exclusive: true, AgentBinary: func() (string, error) { return bin, nil }}
	if tune != nil {
		tune(&senv)
	}
	set := sandbox.NewSet(senv, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	m, err := set.Manager(b.Name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Create(ctx, "tk1", create)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		all, _ := set.List(context.Background())
		for _, s := range all {
			m.Destroy(context.Background(), s.ID, sandbox.DestroyOptions{})
		}
		set.Close()
	})
	p, err := policy.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	memPath := filepath.Join(lay.Home, "memory", "tk1.db")
	all := append([]tools.Option{tools.WithPolicy(p), tools.WithAudit(rec),
		tools.WithMemory(func() (*memory.Store, error) { return memory.Open(memPath) })}, opts...)
	kit, err := tools.New(tools.NewSetNeuron(set, lay, st.ID), all...)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Ctx: ctx, Set: set, Layout: lay, State: st, Kit: kit, Audit: rec, Home: filepath.Dir(st.Workdir)}
}

// Call runs a tool and fails the test unless its error state is wantErr.
func (e *Env) Call(name string, input any, wantErr bool) string {
	e.T.Helper()
	b, err := json.Marshal(input)
	if err != nil {
		e.T.Fatal(err)
	}
	r := e.Kit.Call(e.Ctx, name, b)
	if r.IsError != wantErr {
		e.T.Fatalf("%s %s: isError=%v, want %v: %s", name, b, r.IsError, wantErr, r.Text)
	}
	return r.Text
}

// File is a path of the neuron's workspace, on the host.
func (e *Env) File(rel string) string { return filepath.Join(e.State.Workdir, rel) }

// Put writes a workspace file from the host (behind the kit's back).
func (e *Env) Put(rel, content string) {
	e.T.Helper()
	p := e.File(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.T.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.T.Fatal(err)
	}
}

// Get reads a workspace file from the host.
func (e *Env) Get(rel string) string {
	e.T.Helper()
	b, err := os.ReadFile(e.File(rel))
	if err != nil {
		e.T.Fatal(err)
	}
	return string(b)
}
