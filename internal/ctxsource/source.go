// Package ctxsource feeds /ctx (internal/ctxfs) from the running system:
// neurons from the in-memory model (internal/model) over a sandbox set,
// processes, terminals and health through each neuron's channel, receipts
// from launch, sessions, agents and the audit log from the home directory.
// Writes go through the same calls the HTTP API makes for the same verbs.
//
// It lives outside ctxfs so that the projection itself never imports a
// backend or the channel (DESIGN.md, layers).
package ctxsource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/model"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// Cache lifetimes: how stale a listing may be.
const (
	ProcTTL    = 250 * time.Millisecond // processes and terminals of a neuron
	HealthTTL  = time.Second            // an agent's health report
	RecordsTTL = time.Second            // receipts, sessions, agents
)

// Render is the API's view of a neuron (api.NeuronOf): /ctx serves its
// JSON as the neuron's state.json and its Policy's as policy.json, byte
// for byte what the API answers.
type Render func(st *sandbox.State) cortex.Neuron

// Source is the real system as ctxfs sees it.
type Source struct {
	set    *sandbox.Set
	lay    layout.Layout
	model  *model.Model
	render Render
	snap   atomic.Pointer[ctxfs.Snapshot]

	// renderMu guards rendered: each model neuron's files, rendered once
	// per change of the neuron (the model keeps an unchanged *Neuron).
	renderMu sync.Mutex
	rendered map[string]rendered

	mu      sync.Mutex
	neurons map[string]*tools.SetNeuron
	procs   map[string]cached[[]protocol.ProcInfo]
	health  map[string]cached[[]byte]
	metrics map[string]cached[[]byte]
	recs    map[string]cached[any] // "receipts/<id>", "sessions", "agents"
	metas   map[string]sessionMeta // transcript path -> meta, by size and mtime
}

type cached[T any] struct {
	at time.Time
	v  T
}

type sessionMeta struct {
	size int64
	mod  time.Time
	meta []byte
}

var (
	_ ctxfs.Source     = (*Source)(nil)
	_ ctxfs.Channel    = (*Source)(nil)
	_ ctxfs.Controller = (*Source)(nil)
	_ ctxfs.Meter      = (*Source)(nil)
	_ ctxfs.Records    = (*Source)(nil)
	_ ctxfs.Forgetter  = (*Source)(nil)
)

// rendered is a model neuron's files.
type rendered struct {
	from *model.Neuron
	n    *ctxfs.Neuron
}

// New returns the source over set, reading neurons from m (which the
// caller runs: m.Run) and rendering each with render.
func New(set *sandbox.Set, lay layout.Layout, m *model.Model, render Render) *Source {
	s := &Source{set: set, lay: lay, model: m, render: render, rendered: map[string]rendered{},
		neurons: map[string]*tools.SetNeuron{}, procs: map[string]cached[[]protocol.ProcInfo]{}, health: map[string]cached[[]byte]{},
		metrics: map[string]cached[[]byte]{}, recs: map[string]cached[any]{}, metas: map[string]sessionMeta{}}
	s.snap.Store(s.convert(m.Snapshot()))
	m.Subscribe(func(_, cur *model.Snapshot) { s.snap.Store(s.convert(cur)) })
	return s
}

// convert is the model's snapshot in ctxfs's words (once per change, never
// per read); a neuron the model kept is not rendered again.
func (s *Source) convert(ms *model.Snapshot) *ctxfs.Snapshot {
	s.renderMu.Lock()
	defer s.renderMu.Unlock()
	ns := make([]*ctxfs.Neuron, len(ms.Neurons))
	next := make(map[string]rendered, len(ms.Neurons))
	for i, n := range ms.Neurons {
		r, ok := s.rendered[n.State.ID]
		if !ok || r.from != n {
			r = rendered{from: n, n: s.files(n)}
		}
		ns[i], next[n.State.ID] = r.n, r
	}
	s.rendered = next
	return ctxfs.NewSnapshot(ms.Version, ms.At, ns)
}

// files renders neuron n's status, state.json and policy.json.
func (s *Source) files(n *model.Neuron) *ctxfs.Neuron {
	view := s.render(n.State)
	js, _ := json.MarshalIndent(view, "", "  ") // plain data: cannot fail
	js = append(js, '\n')
	pol := []byte("null\n")
	if view.Policy != nil {
		pol, _ = json.MarshalIndent(view.Policy, "", "  ")
		pol = append(pol, '\n')
	}
	st := n.State
	return &ctxfs.Neuron{ID: st.ID, UID: n.UID, Running: st.Status == sandbox.StatusRunning, Paused: st.Status == sandbox.StatusPaused,
		Created: st.CreatedAt, Status: []byte(StatusLine(st)), State: js, Policy: pol}
}

// StatusLine is a neuron's status file: one line a shell can parse, the
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
	if st.PausedAt != nil {
		fmt.Fprintf(&b, " paused=%s", st.PausedAt.UTC().Format(time.RFC3339))
	}
	if st.Deadline != nil {
		fmt.Fprintf(&b, " deadline=%s on-timeout=%s", st.Deadline.UTC().Format(time.RFC3339), st.OnTimeout)
	}
	if st.AutoPause > 0 {
		fmt.Fprintf(&b, " auto-pause=%s", st.AutoPause)
	}
	b.WriteByte('\n')
	return b.String()
}

// Snapshot is the current neurons.
func (s *Source) Snapshot() *ctxfs.Snapshot {
	if cur := s.snap.Load(); cur.Version == s.model.Snapshot().Version {
		return cur
	}
	return s.convert(s.model.Snapshot()) // a refresh raced its subscriber
}

// neuron returns the channel holder of neuron id (it reconnects after a
// restart).
func (s *Source) neuron(id string) *tools.SetNeuron {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.neurons[id]
	if n == nil {
		n = tools.NewSetNeuron(s.set, s.lay, id)
		s.neurons[id] = n
	}
	return n
}

// forget drops what is cached of neuron id.
func (s *Source) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.neurons, id)
	delete(s.procs, id)
	delete(s.health, id)
	delete(s.metrics, id)
}

// client returns a channel to neuron id; a dead cached one is replaced.
func (s *Source) client(ctx context.Context, id string) (*link.Client, error) {
	return s.neuron(id).Client(ctx)
}

// withClient runs f on neuron id's channel, reconnecting once if the
// cached channel belongs to an agent that has since been replaced.
func (s *Source) withClient(ctx context.Context, id string, f func(*link.Client) error) error {
	for try := 0; ; try++ {
		c, err := s.client(ctx, id)
		if err != nil {
			return err
		}
		err = f(c)
		if try == 0 && errdefs.IsNotRunning(err) {
			s.forget(id)
			continue
		}
		return err
	}
}

// Processes lists neuron id's processes and terminals (≤ ProcTTL old). A
// read of /ctx: quiet (link.Quiet), it never resumes a paused neuron nor
// keeps an idle one awake; a paused one answers NOT_RUNNING.
func (s *Source) Processes(ctx context.Context, id string) ([]protocol.ProcInfo, error) {
	return s.processes(link.Quiet(ctx), id)
}

// processes lists neuron id's processes as ctx asks: quietly for a read,
// resuming a paused neuron for a write (ctl kill).
func (s *Source) processes(ctx context.Context, id string) ([]protocol.ProcInfo, error) {
	s.mu.Lock()
	c, ok := s.procs[id]
	s.mu.Unlock()
	if ok && time.Since(c.at) < ProcTTL {
		return c.v, nil
	}
	var list []protocol.ProcInfo
	err := s.withClient(ctx, id, func(c *link.Client) (err error) {
		list, err = c.ProcList(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.procs[id] = cached[[]protocol.ProcInfo]{at: time.Now(), v: list}
	s.mu.Unlock()
	return list, nil
}

// Health is the agent's health report (≤ HealthTTL old), the API's JSON.
// Quiet, as Processes.
func (s *Source) Health(ctx context.Context, id string) ([]byte, error) {
	ctx = link.Quiet(ctx)
	s.mu.Lock()
	c, ok := s.health[id]
	s.mu.Unlock()
	if ok && time.Since(c.at) < HealthTTL {
		return c.v, nil
	}
	var h *protocol.HealthResult
	err := s.withClient(ctx, id, func(c *link.Client) (err error) {
		h, err = c.Health(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(h, "", "  ") // plain data
	b = append(b, '\n')
	s.mu.Lock()
	s.health[id] = cached[[]byte]{at: time.Now(), v: b}
	s.mu.Unlock()
	return b, nil
}

var errEnough = errors.New("enough")

// Output reads a process's or terminal's output from what its agent holds.
// Quiet, as Processes.
func (s *Source) Output(ctx context.Context, id string, pid int, stream string, off int64, max int) ([]byte, error) {
	ctx = link.Quiet(ctx)
	var out []byte
	err := s.withClient(ctx, id, func(c *link.Client) error {
		out = out[:0]
		if stream == ctxfs.PTY {
			res, body, err := c.PtyRead(ctx, &protocol.PtyReadArgs{PID: pid, Offset: off, Max: max})
			if err == nil && res.Offset > off {
				body = append(make([]byte, min(res.Offset-off, int64(max))), body...) // lost to the ring: zeros keep offsets true
			}
			out = body
			return err
		}
		args := &protocol.ProcAttachArgs{PID: pid, StdoutOffset: off, StderrOffset: off}
		want := protocol.StreamStdout
		if stream == ctxfs.Stderr {
			want, args.StdoutOffset = protocol.StreamStderr, 1<<62 // past the end: nothing of the other stream
		} else {
			args.StderrOffset = 1 << 62
		}
		next := off
		_, err := c.ProcAttach(ctx, args, func(name string, at int64, p []byte) error {
			if name == protocol.StreamGap+":"+want && at > next {
				out = append(out, make([]byte, at-next)...) // lost to the ring: zeros keep offsets true
				next = at
			}
			if name != want {
				return nil
			}
			out = append(out, p...)
			next = at + int64(len(p))
			if len(out) >= max {
				return errEnough
			}
			return nil
		})
		if errors.Is(err, errEnough) {
			err = nil
		}
		return err
	})
	if len(out) > max {
		out = out[:max]
	}
	return out, err
}

// Control carries out a ctl verb through the calls the API makes.
func (s *Source) Control(ctx context.Context, c *ctxfs.Command) error {
	defer func() {
		s.mu.Lock()
		delete(s.procs, c.Neuron)
		s.mu.Unlock()
	}()
	switch c.Target {
	case ctxfs.TargetNeuron:
		return s.controlNeuron(ctx, c)
	case ctxfs.TargetProcess:
		return s.withClient(ctx, c.Neuron, func(cl *link.Client) error { return cl.ProcSignal(ctx, c.PID, c.Arg) })
	case ctxfs.TargetTerminal:
		return s.withClient(ctx, c.Neuron, func(cl *link.Client) error {
			switch c.Verb {
			case "input":
				return cl.PtyWrite(ctx, c.PID, c.Data)
			case "resize":
				return cl.PtyResize(ctx, c.PID, c.Cols, c.Rows)
			case "close":
				_, err := cl.PtyClose(ctx, c.PID)
				return err
			}
			return fmt.Errorf("%w: verb %q", ctxfs.ErrInvalid, c.Verb)
		})
	}
	return fmt.Errorf("%w: target %q", ctxfs.ErrInvalid, c.Target)
}

func (s *Source) controlNeuron(ctx context.Context, c *ctxfs.Command) error {
	id := c.Neuron
	// The model learns of what changed before the write returns, so the
	// next read of status tells the truth.
	defer s.model.Refresh(context.WithoutCancel(ctx))
	switch c.Verb {
	case "stop": // DELETE /v1/neurons/{id}, keeping the data
		m, st, err := s.set.FindExact(ctx, id)
		if err != nil {
			return err
		}
		s.forget(id)
		return m.Destroy(ctx, st.ID, sandbox.DestroyOptions{})
	case "restart":
		err := s.neuron(id).Restart(ctx)
		s.forget(id)
		return err
	case "snapshot":
		if err := store.CheckSnapshotName(c.Arg); err != nil {
			return fmt.Errorf("%w: %v", ctxfs.ErrInvalid, err)
		}
		_, err := s.neuron(id).CreateSnapshot(ctx, c.Arg)
		return err
	case "pause", "resume": // POST /v1/neurons/{id}/pause, .../resume
		return s.pauseOrResume(ctx, id, c.Verb == "pause")
	case "kill": // every process and terminal the agent started
		procs, err := s.processes(ctx, id) // a write: it resumes a paused neuron
		if err != nil {
			return err
		}
		var errs []error
		for _, p := range procs {
			if p.Running {
				errs = append(errs, s.withClient(ctx, id, func(cl *link.Client) error { return cl.ProcSignal(ctx, p.PID, c.Arg) }))
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("%w: verb %q", ctxfs.ErrInvalid, c.Verb)
}

// pauseOrResume pauses or resumes neuron id; the no-ops (already so)
// succeed.
func (s *Source) pauseOrResume(ctx context.Context, id string, pause bool) error {
	m, st, err := s.set.FindExact(ctx, id)
	if err != nil {
		return err
	}
	p, ok := m.(sandbox.Pauser)
	if !ok {
		return &sandbox.UnsupportedError{Mode: m.Mode(), Op: "pause"}
	}
	if pause {
		_, err = p.Pause(ctx, st.ID, sandbox.PauseOptions{Reason: "requested"})
	} else {
		_, err = p.Resume(ctx, st.ID)
	}
	if errors.Is(err, sandbox.ErrAlreadyPaused) || errors.Is(err, sandbox.ErrNotPaused) {
		err = nil
	}
	s.forget(id) // its cached process list and health are of before
	return err
}

// Metrics is neuron id's metrics.json (≤ HealthTTL old): the API's JSON
// of sandbox.MetricsReader's figures, read from the host's records, so it
// never resumes a paused neuron nor counts as use of it.
func (s *Source) Metrics(ctx context.Context, id string) ([]byte, error) {
	s.mu.Lock()
	c, ok := s.metrics[id]
	s.mu.Unlock()
	if ok && time.Since(c.at) < HealthTTL {
		return c.v, nil
	}
	m, st, err := s.set.FindExact(ctx, id)
	if err != nil {
		return nil, err
	}
	mr, ok := m.(sandbox.MetricsReader)
	if !ok {
		return []byte("null\n"), nil
	}
	met, err := mr.Metrics(ctx, st.ID)
	if err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(met, "", "  ") // plain data
	b = append(b, '\n')
	s.mu.Lock()
	s.metrics[id] = cached[[]byte]{at: time.Now(), v: b}
	s.mu.Unlock()
	return b, nil
}

// AuditLog is <home>/logs/audit.log.
func (s *Source) AuditLog() string { return filepath.Join(s.lay.LogsDir(), "audit.log") }

// records returns a cached listing, or builds it.
func (s *Source) records(key string, build func() (any, error)) (any, error) {
	s.mu.Lock()
	c, ok := s.recs[key]
	s.mu.Unlock()
	if ok && time.Since(c.at) < RecordsTTL {
		return c.v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.recs[key] = cached[any]{at: time.Now(), v: v}
	s.mu.Unlock()
	return v, nil
}

// Receipts are neuron id's launch receipts.
func (s *Source) Receipts(ctx context.Context, id string) ([]ctxfs.HostFile, error) {
	n := s.model.Snapshot().Get(id)
	if n == nil {
		return nil, nil
	}
	v, err := s.records("receipts/"+id, func() (any, error) {
		return listFiles(launch.ReceiptsDir(s.lay, n.State), func(name string) bool { return strings.HasSuffix(name, ".json") })
	})
	if err != nil {
		return nil, err
	}
	return v.([]ctxfs.HostFile), nil
}

// listFiles lists the regular files of dir that keep admits, by name.
func listFiles(dir string, keep func(string) bool) ([]ctxfs.HostFile, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ctxfs.HostFile
	for _, e := range ents {
		if !e.Type().IsRegular() || !keep(e.Name()) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		out = append(out, ctxfs.HostFile{Name: e.Name(), Path: filepath.Join(dir, e.Name()), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	return out, nil
}

// Sessions are the transcripts under <home>/sessions: <sid>.jsonl, or
// <sid>/transcript.jsonl.
func (s *Source) Sessions(ctx context.Context) ([]ctxfs.Session, error) {
	v, err := s.records("sessions", func() (any, error) {
		dir := s.lay.SessionsDir()
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return []ctxfs.Session(nil), nil
		}
		if err != nil {
			return nil, err
		}
		var out []ctxfs.Session
		for _, e := range ents {
			id, p := strings.TrimSuffix(e.Name(), ".jsonl"), filepath.Join(dir, e.Name())
			if e.IsDir() {
				id, p = e.Name(), filepath.Join(dir, e.Name(), "transcript.jsonl")
			} else if id == e.Name() {
				continue
			}
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			out = append(out, ctxfs.Session{ID: id, Meta: s.sessionMeta(id, p, fi),
				Transcript: ctxfs.HostFile{Name: "transcript.jsonl", Path: p, Size: fi.Size(), ModTime: fi.ModTime()}})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]ctxfs.Session), nil
}

// sessionMeta derives meta.json from a transcript, recounting its entries
// only when the file changed.
func (s *Source) sessionMeta(id, p string, fi os.FileInfo) []byte {
	s.mu.Lock()
	m, ok := s.metas[p]
	s.mu.Unlock()
	if ok && m.size == fi.Size() && m.mod.Equal(fi.ModTime()) {
		return m.meta
	}
	entries := 0
	if f, err := os.Open(p); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				entries++
			}
		}
		f.Close()
	}
	b, _ := json.MarshalIndent(map[string]any{"id": id, "size": fi.Size(), "entries": entries,
		"modified": fi.ModTime().UTC().Format(time.RFC3339Nano)}, "", "  ")
	b = append(b, '\n')
	s.mu.Lock()
	s.metas[p] = sessionMeta{size: fi.Size(), mod: fi.ModTime(), meta: b}
	s.mu.Unlock()
	return b
}

// AgentFiles are the files of an agent's directory that /ctx shows.
var AgentFiles = []string{"AGENTS.md", "SOUL.md", "TOOLS.md", "policy.json"}

// Agents are the directories under <home>/agents, with whichever of
// AgentFiles each holds.
func (s *Source) Agents(ctx context.Context) ([]ctxfs.Agent, error) {
	v, err := s.records("agents", func() (any, error) {
		dir := filepath.Join(s.lay.Home, "agents")
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			return []ctxfs.Agent(nil), nil
		}
		if err != nil {
			return nil, err
		}
		var out []ctxfs.Agent
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			files, err := listFiles(filepath.Join(dir, e.Name()), func(name string) bool {
				for _, a := range AgentFiles {
					if a == name {
						return true
					}
				}
				return false
			})
			if err != nil {
				return nil, err
			}
			out = append(out, ctxfs.Agent{Name: e.Name(), Files: files})
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]ctxfs.Agent), nil
}

// ForgetProcesses drops neuron id's cached process list.
func (s *Source) ForgetProcesses(id string) {
	s.mu.Lock()
	delete(s.procs, id)
	s.mu.Unlock()
}
