package ctxsource_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/ctxsource"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/model"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

type lister struct {
	mu     sync.Mutex
	states []*sandbox.State
}

func (l *lister) List(context.Context) ([]*sandbox.State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*sandbox.State, len(l.states))
	for i, s := range l.states {
		out[i] = s.Copy()
	}
	return out, nil
}

func indented(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// A neuron's status, state.json and policy.json are rendered from the
// model's record: state.json is the API's JSON of the neuron, byte for
// byte; a neuron the model kept is not rendered again.
func TestNeuronFiles(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := &lister{states: []*sandbox.State{
		{ID: "a", Mode: "process", Status: sandbox.StatusRunning, PID: 42, CreatedAt: created,
			Policy: &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkNone}}},
		{ID: "b", Mode: "nsbox", Status: sandbox.StatusStopped, CreatedAt: created},
	}}
	m := model.New(l, model.WithUID(func(st *sandbox.State) int { return 1000 + st.PID }))
	ctx := context.Background()
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	src := ctxsource.New(nil, layout.Layout{}, m, api.NeuronOf)
	s1 := src.Snapshot()
	a, b := s1.ByID["a"], s1.ByID["b"]
	if got := string(a.Status); got != "running mode=process pid=42 created=2026-01-02T03:04:05Z\n" {
		t.Errorf("status %q", got)
	}
	if a.UID != 1042 || !a.Running || b.UID != -1 || b.Running {
		t.Errorf("a: uid %d running %v; b: uid %d running %v", a.UID, a.Running, b.UID, b.Running)
	}
	if want := indented(t, api.NeuronOf(l.states[0])); string(a.State) != want {
		t.Errorf("state.json\n%s\nwant the API's\n%s", a.State, want)
	}
	if want := indented(t, api.NeuronOf(l.states[0]).Policy); string(a.Policy) != want {
		t.Errorf("policy.json\n%s\nwant\n%s", a.Policy, want)
	}
	if string(b.Policy) != "null\n" {
		t.Errorf("a stopped neuron's policy: %q", b.Policy)
	}
	l.mu.Lock()
	l.states[1].Status, l.states[1].PID, l.states[1].Pending = sandbox.StatusRunning, 7, true
	l.mu.Unlock()
	if _, err := m.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := src.Snapshot()
	if s2.ByID["a"] != a {
		t.Error("an unchanged neuron was rendered again")
	}
	if got := string(s2.ByID["b"].Status); got != "running mode=nsbox pid=7 created=2026-01-02T03:04:05Z pending=true\n" {
		t.Errorf("b's status after its change: %q", got)
	}
}
