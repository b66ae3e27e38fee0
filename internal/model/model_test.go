package model_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/model"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

type lister struct {
	mu     sync.Mutex
	states []*sandbox.State
	lists  int // how many times List was called
}

func (l *lister) List(context.Context) ([]*sandbox.State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lists++
	out := make([]*sandbox.State, len(l.states))
	for i, s := range l.states {
		out[i] = s.Copy()
	}
	return out, nil
}

func TestModel(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := &lister{states: []*sandbox.State{
		{ID: "a", Mode: "process", Status: sandbox.StatusRunning, PID: 42, CreatedAt: created,
			Policy: &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkNone}}},
		{ID: "b", Mode: "nsbox", Status: sandbox.StatusStopped, CreatedAt: created},
	}}
	m := model.New(l, model.WithUID(func(st *sandbox.State) int { return 1000 + st.PID }))
	ctx := context.Background()
	var changes int
	m.Subscribe(func(old, cur *model.Snapshot) { changes++ })
	s1, err := m.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := s1.Get("a")
	if a.State.ID != "a" || a.State.PID != 42 || !a.State.CreatedAt.Equal(created) {
		t.Errorf("state %+v", a.State)
	}
	if a.UID != 1042 || s1.Get("b").UID != -1 {
		t.Errorf("uids %d %d; want 1042 and -1 (stopped)", a.UID, s1.Get("b").UID)
	}
	// Nothing changed: the same snapshot.
	if s2, _ := m.Refresh(ctx); s2 != s1 || changes != 1 {
		t.Fatalf("an unchanged refresh published (changes %d)", changes)
	}
	// One neuron changes: a new version; the other keeps its bytes.
	l.mu.Lock()
	l.states[1].Status, l.states[1].PID = sandbox.StatusRunning, 7
	l.mu.Unlock()
	s3, _ := m.Refresh(ctx)
	if s3.Version != s1.Version+1 || s3.Get("a") != a || s3.Get("b").UID != 1007 || m.Snapshot() != s3 {
		t.Fatalf("after a change: version %d, a reused %v", s3.Version, s3.Get("a") == a)
	}
}

// The uid comes from the lister when it tells one (a *sandbox.Set asks the
// neuron's mode), and is -1 otherwise.
func TestUIDFromLister(t *testing.T) {
	states := []*sandbox.State{{ID: "r", Status: sandbox.StatusRunning, PID: 9}}
	s, err := model.New(&uidLister{lister: lister{states: states}}).Refresh(context.Background())
	if err != nil || s.Get("r").UID != 2009 {
		t.Fatalf("uid %d (%v), want the lister's 2009", s.Get("r").UID, err)
	}
	if s, _ := model.New(&lister{states: states}).Refresh(context.Background()); s.Get("r").UID != -1 {
		t.Fatalf("uid %d from a lister that tells none, want -1", s.Get("r").UID)
	}
}

type uidLister struct{ lister }

func (l *uidLister) AgentUID(st *sandbox.State) int { return 2000 + st.PID }

func TestRunRefreshesOnInvalidate(t *testing.T) {
	l := &lister{}
	m := model.New(l, model.WithInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// Run's first refresh has listed no neurons; the next refresh, an hour
	// away by the ticker, can only come from Invalidate.
	waittest.For(t, 10*time.Second, "Run's first refresh", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lists > 0
	})
	l.mu.Lock()
	l.states = []*sandbox.State{{ID: "x", Status: sandbox.StatusStopped}}
	l.mu.Unlock()
	m.Invalidate()
	waittest.For(t, 10*time.Second, "Invalidate to refresh", func() bool { return m.Snapshot().Get("x") != nil })
}
