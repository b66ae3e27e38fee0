// Package model is the in-memory picture of the cortex that readers share:
// every neuron's record, with the bytes readers serve precomputed, kept
// fresh by a watcher. Readers (the /ctx filesystem today; the HTTP API can
// adopt it) take a Snapshot, which never changes after it is published, so
// a read costs an atomic load and a map lookup — no disk, no channel call.
//
// Freshness: the watcher lists the neurons every Interval (default 500 ms),
// and Invalidate (called after every write that changes a neuron) asks for
// a refresh at once; a reader therefore sees a change at most one interval
// late. The model never writes anything.
package model

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// DefaultInterval is how often the watcher lists the neurons.
const DefaultInterval = 500 * time.Millisecond

// Lister lists neurons: a *sandbox.Set.
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
	// Status is one line: "running mode=process pid=12 created=...".
	Status []byte
	// JSON is the API's JSON of the neuron (GET /v1/neurons/{id}).
	JSON []byte
	// PolicyJSON is the isolation it runs under, as enforced ("null" when
	// stopped).
	PolicyJSON []byte
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

// New returns a model over src with an empty snapshot; call Refresh or Run.
func New(src Lister, opts ...Option) *Model {
	m := &Model{src: src, uid: AgentUID, interval: DefaultInterval, kick: make(chan struct{}, 1)}
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
// changed. Neurons whose record did not change keep their bytes.
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

// neuron builds the reader's view of st, reusing prev when nothing changed.
func (m *Model) neuron(st *sandbox.State, prev *Neuron) *Neuron {
	js, _ := json.MarshalIndent(NeuronOf(st), "", "  ") // plain data: cannot fail
	js = append(js, '\n')
	uid := -1
	if st.Status == sandbox.StatusRunning {
		uid = m.uid(st)
	}
	if prev != nil && prev.UID == uid && bytes.Equal(prev.JSON, js) {
		return prev
	}
	pol := []byte("null\n")
	if v := NeuronOf(st).Policy; v != nil {
		pol, _ = json.MarshalIndent(v, "", "  ")
		pol = append(pol, '\n')
	}
	return &Neuron{State: st.Copy(), UID: uid, Status: []byte(StatusLine(st)), JSON: js, PolicyJSON: pol}
}

// StatusLine is a neuron's status as one line a shell can parse: the
// status word, then key=value fields.
func StatusLine(st *sandbox.State) string {
	var b strings.Builder
	b.WriteString(string(st.Status))
	fmt.Fprintf(&b, " mode=%s pid=%d", st.Mode, st.PID)
	if !st.CreatedAt.IsZero() {
		fmt.Fprintf(&b, " created=%s", st.CreatedAt.UTC().Format(time.RFC3339))
	}
	if st.Pending {
		b.WriteString(" pending=true")
	}
	b.WriteByte('\n')
	return b.String()
}

// NeuronOf is the API's JSON shape of a neuron.
func NeuronOf(st *sandbox.State) cortex.Neuron {
	n := cortex.Neuron{ID: st.ID, Mode: st.Mode, Status: string(st.Status), PID: st.PID, Workdir: st.Workdir,
		CreatedAt: st.CreatedAt, AgentVersion: st.AgentVersion}
	if st.Owner != nil {
		n.Owner = &cortex.Owner{PID: st.Owner.PID, Command: st.Owner.Command, Since: st.Owner.Since}
	}
	if p := st.Policy; p != nil {
		n.Policy = &cortex.Policy{Network: cortex.Network{Mode: string(p.Network.Mode), Allow: p.Network.Allow},
			Limits: cortex.Limits(p.Limits), Image: p.Image, NestedUserns: p.NestedUserns, Ctx: p.Ctx, CtxWritable: p.CtxWritable}
	}
	return n
}

// AgentUID is the real uid of the neuron's agent process on the host, or
// -1. The state's PID is the agent itself in process mode, but the
// sandbox's PID 1 in nsbox (root, when the host is), whose child is the
// agent under the neuron's own uid: a root PID is looked past to its
// first child that is not root.
func AgentUID(st *sandbox.State) int {
	if st.PID <= 0 {
		return -1
	}
	pid := st.PID
	for depth := 0; ; depth++ {
		uid := procUID(pid)
		if uid != 0 || depth == 2 {
			return uid
		}
		child := firstChild(pid)
		if child <= 0 {
			return uid
		}
		pid = child
	}
}

// procUID reads a process's real uid, or -1.
func procUID(pid int) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				if u, err := strconv.Atoi(fs[0]); err == nil {
					return u
				}
			}
		}
	}
	return -1
}

// firstChild returns the lowest-numbered child of pid, or 0. Children are
// listed per thread of the parent (the thread that forked them), and a Go
// parent forks from any of its threads: every thread's list is read.
func firstChild(pid int) int {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0
	}
	lowest := 0
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && (lowest == 0 || c < lowest) {
				lowest = c
			}
		}
	}
	return lowest
}
