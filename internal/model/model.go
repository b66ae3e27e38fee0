// Package model is the in-memory picture of the cortex that readers share:
// every neuron's record and the host uid its agent runs as, kept fresh by
// a watcher. Readers (the /ctx filesystem today; the HTTP API can adopt
// it) take a Snapshot, which never changes after it is published, so a
// read costs an atomic load and a map lookup — no disk, no channel call.
// What a reader serves of a neuron (the API's JSON, a status line) is the
// reader's to render: a neuron that did not change keeps its *Neuron, so a
// reader renders once per change.
//
// It knows no mode: which uid a neuron's agent runs as is the mode's
// answer (sandbox.AgentUIDer, asked through the Lister).
//
// Freshness: the watcher lists the neurons every Interval (default 500 ms),
// and Invalidate (called after every write that changes a neuron) asks for
// a refresh at once; a reader therefore sees a change at most one interval
// late. The model never writes anything.
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// DefaultInterval is how often the watcher lists the neurons.
const DefaultInterval = 500 * time.Millisecond

// Lister lists neurons: a *sandbox.Set. When it also tells a running
// neuron's agent uid (sandbox.Set.AgentUID), the model asks it.
type Lister interface {
	List(ctx context.Context) ([]*sandbox.State, error)
}

// Neuron is one neuron as readers see it. Nothing in it changes after it
// is published.
type Neuron struct {
	State *sandbox.State
	// UID is the host uid the neuron's agent runs as (-1 when unknown:
	// the neuron is stopped).
	UID int
	// record is State as JSON: how a refresh tells a change.
	record []byte
}

// Snapshot is the set of neurons at one moment, sorted by id.
type Snapshot struct {
	// Version grows by one with every change.
	Version uint64
	At      time.Time
	Neurons []*Neuron
	byID    map[string]*Neuron
}

// Get returns neuron id, or nil.
func (s *Snapshot) Get(id string) *Neuron { return s.byID[id] }

// UIDFunc says which host uid a neuron's agent runs as (-1: unknown).
type UIDFunc func(st *sandbox.State) int

// Model holds the current snapshot.
type Model struct {
	src      Lister
	uid      UIDFunc
	interval time.Duration

	cur  atomic.Pointer[Snapshot]
	kick chan struct{}

	mu   sync.Mutex // serializes refreshes and subscribers
	subs []func(old, cur *Snapshot)
	err  error
}

// Option shapes a Model.
type Option func(*Model)

// WithInterval sets how often the watcher refreshes.
func WithInterval(d time.Duration) Option { return func(m *Model) { m.interval = d } }

// WithUID replaces how a neuron's host uid is found (tests map uids).
func WithUID(f UIDFunc) Option { return func(m *Model) { m.uid = f } }

// agentUIDer is a Lister that tells a neuron's agent uid.
type agentUIDer interface {
	AgentUID(st *sandbox.State) int
}

// New returns a model over src with an empty snapshot; call Refresh or Run.
func New(src Lister, opts ...Option) *Model {
	uid := func(*sandbox.State) int { return -1 }
	if u, ok := src.(agentUIDer); ok {
		uid = u.AgentUID
	}
	m := &Model{src: src, uid: uid, interval: DefaultInterval, kick: make(chan struct{}, 1)}
	for _, o := range opts {
		o(m)
	}
	m.cur.Store(&Snapshot{At: time.Now(), byID: map[string]*Neuron{}})
	return m
}

// Snapshot returns the current snapshot (never nil).
func (m *Model) Snapshot() *Snapshot { return m.cur.Load() }

// Err is the last refresh's error (nil when it succeeded).
func (m *Model) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Subscribe calls f after every refresh that changed something.
func (m *Model) Subscribe(f func(old, cur *Snapshot)) {
	m.mu.Lock()
	m.subs = append(m.subs, f)
	m.mu.Unlock()
}

// Invalidate asks the watcher to refresh now (it does not wait).
func (m *Model) Invalidate() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run refreshes every interval and on Invalidate until ctx ends.
func (m *Model) Run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		m.Refresh(ctx) // the error is kept for Err; the old snapshot stays
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// Refresh lists the neurons now and publishes a new snapshot if anything
// changed. Neurons whose record and uid did not change are kept as they
// were (the same *Neuron).
func (m *Model) Refresh(ctx context.Context) (*Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	states, err := m.src.List(ctx)
	m.err = err
	old := m.cur.Load()
	if err != nil {
		return old, err
	}
	next := &Snapshot{Version: old.Version, At: time.Now(), Neurons: make([]*Neuron, 0, len(states)),
		byID: make(map[string]*Neuron, len(states))}
	changed := len(states) != len(old.Neurons)
	for _, st := range states {
		n := m.neuron(st, old.byID[st.ID])
		if n != old.byID[st.ID] {
			changed = true
		}
		next.Neurons = append(next.Neurons, n)
		next.byID[st.ID] = n
	}
	if !changed {
		return old, nil
	}
	next.Version++
	m.cur.Store(next)
	for _, f := range m.subs {
		f(old, next)
	}
	return next, nil
}

// neuron is st as readers see it, reusing prev when nothing changed.
func (m *Model) neuron(st *sandbox.State, prev *Neuron) *Neuron {
	rec, _ := json.Marshal(st) // plain data: cannot fail
	uid := -1
	if st.Status == sandbox.StatusRunning {
		uid = m.uid(st)
	}
	if prev != nil && prev.UID == uid && bytes.Equal(prev.record, rec) {
		return prev
	}
	return &Neuron{State: st.Copy(), UID: uid, record: rec}
}
