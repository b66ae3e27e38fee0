package model_test

import (
	"context"
	"sync"
	"testing"
	"time"

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
	if got := string(a.Status); got != "running mode=process pid=42 created=2026-01-02T03:04:05Z\n" {
		t.Errorf("status %q", got)
	}
	if a.UID != 1042 || s1.Get("b").UID != -1 {
		t.Errorf("uids %d %d; want 1042 and -1 (stopped)", a.UID, s1.Get("b").UID)
	}
	if string(s1.Get("b").PolicyJSON) != "null\n" {
		t.Errorf("a stopped neuron's policy: %q", s1.Get("b").PolicyJSON)
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

func TestRunRefreshesOnInvalidate(t *testing.T) {
	l := &lister{}
	m := model.New(l, model.WithInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond)
	l.mu.Lock()
	l.states = []*sandbox.State{{ID: "x", Status: sandbox.StatusStopped}}
	l.mu.Unlock()
	m.Invalidate()
	for deadline := time.Now().Add(5 * time.Second); m.Snapshot().Get("x") == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Invalidate did not refresh")
		}
	}
}
