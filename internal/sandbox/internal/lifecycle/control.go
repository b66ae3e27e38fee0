package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// What the lifecycle keeps per neuron for labels, deadlines and pauses
// (docs/lifecycle.md), beside the state file, all host records:
//
//	overlays/<id>/.spec.json      labels: the operator's, kept across runs
//	overlays/<id>/.paused         present while the neuron is paused
//	overlays/<id>/.active         activity: a shared flock while a request
//	                              runs, its time stamped when one ends
//	overlays/<id>/.record.lock    one change of these records at a time
//
// The deadline and the idle rule belong to one run: they are in the state
// file, which goes when the neuron stops.

// Freezer is implemented by runtimes that can pause a neuron with its
// memory kept: every process of it, the agent too, stops using the CPU
// until Thaw. Neither may wait on the neuron's agent.
type Freezer interface {
	Freeze(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error
	Thaw(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error
}

var (
	_ sandbox.Labeler   = (*Manager)(nil)
	_ sandbox.Deadliner = (*Manager)(nil)
	_ sandbox.Pauser    = (*Manager)(nil)
)

type spec struct {
	Labels labels.Set `json:"labels,omitempty"`
	// ForkedFrom and ForkedAt: the neuron this one was forked from, when.
	ForkedFrom string     `json:"forkedFrom,omitempty"`
	ForkedAt   *time.Time `json:"forkedAt,omitempty"`
}

// fill sets st's records that outlive its runs: its labels, its fork.
func (s spec) fill(st *sandbox.State) {
	st.Labels, st.ForkedFrom, st.ForkedAt = s.Labels, s.ForkedFrom, s.ForkedAt
}

type pauseRecord struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
	// ToDisk: the machine was saved to disk and its VMM exited (todisk.go).
	ToDisk bool `json:"toDisk,omitempty"`
}

func (m *Manager) specFile(id string) string   { return filepath.Join(m.overlay(id), ".spec.json") }
func (m *Manager) pausedFile(id string) string { return filepath.Join(m.overlay(id), ".paused") }
func (m *Manager) activeFile(id string) string { return filepath.Join(m.overlay(id), ".active") }

func (m *Manager) readSpec(id string) spec {
	var s spec
	store.ReadJSON(m.specFile(id), &s) // none yet, or unreadable: no labels
	return s
}

// known checks that id names a neuron of this mode.
func (m *Manager) known(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if exists, mine := m.ownOverlay(id); !exists || !mine {
		return &sandbox.NotFoundError{ID: id}
	}
	return nil
}

// lockRecord is known, then recordLock.
func (m *Manager) lockRecord(ctx context.Context, id string) (func(), error) {
	if err := m.known(id); err != nil {
		return nil, err
	}
	return m.recordLock(ctx, id)
}

// LockRecord takes known neuron id's record lock, for a mode's own
// operation that must not interleave with a pause, a resume or a destroy
// (a VM's snapshot of a paused machine). Nothing that takes the lock
// again (Pause, Resume, Get of a neuron past its deadline) may be called
// while it is held.
func (m *Manager) LockRecord(ctx context.Context, id string) (func(), error) {
	return m.lockRecord(ctx, id)
}

// recordLock takes neuron id's record lock: one change of its state,
// spec and pause at a time, across processes.
func (m *Manager) recordLock(ctx context.Context, id string) (func(), error) {
	return store.NewLock(filepath.Join(m.overlay(id), ".record.lock")).Wait(ctx, 2*time.Millisecond)
}

// lifecycleOf fills st's labels and pause from its records (a neuron
// paused to disk was found so by inspectRun, from the same record).
func (m *Manager) lifecycleOf(st *sandbox.State) {
	m.readSpec(st.ID).fill(st)
	if st.Status == sandbox.StatusPaused {
		return
	}
	st.PausedAt = nil
	if st.Status != sandbox.StatusRunning {
		return
	}
	var p pauseRecord
	if err := store.ReadJSON(m.pausedFile(st.ID), &p); err == nil {
		at := p.At
		st.PausedAt, st.Status = &at, sandbox.StatusPaused
	}
}

// event records what happened to neuron st.
func (m *Manager) event(ctx context.Context, typ events.Type, st *sandbox.State, reason string) {
	ev := events.Event{Type: typ, Neuron: st.ID, Mode: m.rt.Mode(), Labels: st.Labels, Reason: reason, Principal: events.PrincipalOf(ctx)}
	if err := m.events.Append(ev); err != nil {
		m.Logf(st.ID, "could not record the event %s: %v", typ, err)
	}
}

// SetLabels changes neuron id's labels.
func (m *Manager) SetLabels(ctx context.Context, id string, change labels.Change) (*sandbox.State, error) {
	unlock, err := m.lockRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	s := m.readSpec(id)
	if s.Labels, err = s.Labels.Apply(change); err != nil {
		unlock()
		return nil, err
	}
	err = store.WriteJSON(m.specFile(id), &s, 0o600)
	unlock()
	if err != nil {
		return nil, fmt.Errorf("labels of %s: %w", id, err)
	}
	return m.Get(ctx, id)
}

// setLabels records the labels a create asked for (nil keeps them).
func (m *Manager) setLabels(id string, set labels.Set) error {
	if set == nil {
		return nil
	}
	s := m.readSpec(id)
	s.Labels = set.Clone()
	return store.WriteJSON(m.specFile(id), &s, 0o600)
}

// runLifecycle sets the deadline and idle rule of a run from its create.
func runLifecycle(st *sandbox.State, opts sandbox.CreateOptions, now time.Time) {
	if opts.Timeout > 0 {
		d := now.Add(opts.Timeout).UTC()
		st.Deadline, st.Timeout = &d, opts.Timeout
		st.OnTimeout, _ = sandbox.ParseTimeoutAction(string(opts.OnTimeout))
	}
	st.AutoPause = opts.AutoPause
}

// SetTimeout gives running neuron id a deadline d from now (0: none).
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration, action sandbox.TimeoutAction) (*sandbox.State, error) {
	if d < 0 {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("timeout %s is negative", d)}
	}
	if action != "" {
		if _, err := sandbox.ParseTimeoutAction(string(action)); err != nil {
			return nil, err
		}
	}
	unlock, err := m.lockRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	st, err := m.readState(id)
	if err != nil || st.Pending || !m.runs(st) {
		unlock()
		return nil, &sandbox.NotRunningError{ID: id, Reason: "a deadline is for a running neuron"}
	}
	if d == 0 {
		st.Deadline, st.Timeout = nil, 0
	} else {
		dl := time.Now().Add(d).UTC()
		st.Deadline, st.Timeout = &dl, d
		if action != "" {
			st.OnTimeout = action
		} else if st.OnTimeout == "" {
			st.OnTimeout = sandbox.OnTimeoutStop
		}
	}
	err = m.writeState(st)
	unlock()
	if err != nil {
		return nil, err
	}
	if d > 0 {
		m.Logf(id, "deadline set: %s from now (%s), then %s", d, st.Deadline.Format(time.RFC3339), st.OnTimeout)
		m.ensureKeeper()
	} else {
		m.Logf(id, "deadline cleared")
	}
	return m.Get(ctx, id)
}

// ensureKeeper asks for a keeper to watch this home's deadlines and idle
// rules (sandbox.Env.EnsureKeeper).
func (m *Manager) ensureKeeper() {
	if m.env.EnsureKeeper != nil {
		m.env.EnsureKeeper()
	}
}

// Enforce applies neuron id's deadline if it passed: its action, once
// (the deadline is cleared under the record lock first, so two processes
// never both act), recorded in its log and as events.
func (m *Manager) Enforce(ctx context.Context, id, reason string) (sandbox.TimeoutAction, error) {
	unlock, err := m.lockRecord(ctx, id)
	if err != nil {
		return "", err
	}
	st, err := m.readState(id)
	if err != nil || !st.Expired(time.Now()) {
		unlock()
		return "", nil
	}
	action, deadline := st.OnTimeout, *st.Deadline
	if action == "" {
		action = sandbox.OnTimeoutStop
	}
	st.Deadline = nil
	err = m.writeState(st)
	unlock()
	if err != nil {
		return "", err
	}
	if !m.runs(st) {
		return "", nil // it stopped meanwhile: nothing to apply
	}
	st.Status = sandbox.StatusRunning
	if rec, ok := m.pausedToDisk(id); ok {
		st.Status, st.PausedAt = sandbox.StatusPaused, &rec.At
	}
	m.lifecycleOf(st)
	if reason == "" {
		reason = "deadline passed"
	}
	why := fmt.Sprintf("%s (%s, at %s): %s", reason, st.Timeout, deadline.Format(time.RFC3339), action)
	m.Logf(id, "timeout: %s", why)
	m.event(ctx, events.Timeout, st, why)
	switch action {
	case sandbox.OnTimeoutPause:
		_, err = m.Pause(ctx, id, sandbox.PauseOptions{Reason: "timeout"})
		if errors.Is(err, sandbox.ErrAlreadyPaused) {
			err = nil
		}
	case sandbox.OnTimeoutWipe:
		err = m.destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}, events.Wiped, "timeout")
	default:
		err = m.destroy(ctx, id, sandbox.DestroyOptions{}, events.Stopped, "timeout")
	}
	if err != nil {
		// Not applied (another process owns the neuron, a daemon that
		// does not answer): the deadline is due still, for whoever looks
		// next, unless it was moved meanwhile.
		m.restoreDeadline(ctx, id, st, deadline)
		m.Logf(id, "timeout: %s not applied: %v", action, err)
	}
	return action, err
}

// restoreDeadline puts back the deadline Enforce took from neuron id's run
// (the one st describes) when its action failed.
func (m *Manager) restoreDeadline(ctx context.Context, id string, st *sandbox.State, deadline time.Time) {
	unlock, err := m.lockRecord(context.WithoutCancel(ctx), id)
	if err != nil {
		return
	}
	defer unlock()
	if cur, err := m.readState(id); err == nil && sameRun(cur, st) && cur.Deadline == nil {
		cur.Deadline = &deadline
		m.writeState(cur) // best effort: the run's state file, as Enforce found it
	}
}

// enforceDue applies the deadlines that passed among states just read, and
// reads those again: whoever looks at a neuron applies what is due before
// it answers.
func (m *Manager) enforceDue(ctx context.Context, sts []*sandbox.State) []*sandbox.State {
	now := time.Now()
	for i, st := range sts {
		if (st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused) || !st.Expired(now) {
			continue
		}
		if _, err := m.Enforce(ctx, st.ID, "deadline passed while nothing watched"); err != nil {
			m.Logf(st.ID, "applying its deadline: %v", err)
		}
		if exists, mine := m.ownOverlay(st.ID); exists && mine {
			sts[i] = m.inspect(st.ID, m.aliveKnown)
		} else {
			sts[i] = nil // wiped
		}
	}
	out := sts[:0]
	for _, st := range sts {
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// Pause freezes every process of running neuron id.
func (m *Manager) Pause(ctx context.Context, id string, opts sandbox.PauseOptions) (*sandbox.State, error) {
	fr, ok := m.rt.(Freezer)
	if !ok {
		return nil, &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "pause"}
	}
	var dp DiskPauser
	if opts.ToDisk {
		if dp, ok = m.rt.(DiskPauser); !ok {
			return nil, &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "pause --to-disk",
				Reason: "its neurons' memory is the host's own; only the microVM modes (qemu, firecracker) save a whole machine to disk"}
		}
	}
	unlock, err := m.lockRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, ok := m.recorded(id)
	if !ok {
		st = m.inspect(id, m.aliveKnown)
	}
	switch st.Status {
	case sandbox.StatusPaused:
		return st, sandbox.ErrAlreadyPaused
	case sandbox.StatusRunning:
	default:
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status) + ", and only a running neuron can be paused"}
	}
	now := time.Now().UTC()
	if dp != nil {
		if err := m.pauseToDisk(ctx, dp, st, pauseRecord{At: now, Reason: opts.Reason, ToDisk: true}); err != nil {
			return nil, m.goneOr(id, err)
		}
	} else {
		if err := fr.Freeze(ctx, m.lay, id, st); err != nil {
			fr.Thaw(context.WithoutCancel(ctx), m.lay, id, st) // half frozen is worse than not
			return nil, m.goneOr(id, fmt.Errorf("pausing %s: %w", id, err))
		}
		if err := store.WriteJSON(m.pausedFile(id), &pauseRecord{At: now, Reason: opts.Reason}, 0o600); err != nil {
			fr.Thaw(context.WithoutCancel(ctx), m.lay, id, st)
			return nil, fmt.Errorf("pausing %s: %w", id, err)
		}
	}
	st.Status, st.PausedAt = sandbox.StatusPaused, &now
	typ := events.Paused
	if opts.Reason == autoPauseReason {
		typ = events.AutoPaused
	}
	reason := opts.Reason
	if reason == "" {
		reason = "requested"
	}
	if dp != nil {
		reason += ", to disk"
	}
	m.Logf(id, "paused (%s)", reason)
	m.event(ctx, typ, st, reason)
	return st, nil
}

// Resume continues paused neuron id.
func (m *Manager) Resume(ctx context.Context, id string) (*sandbox.State, error) {
	unlock, err := m.lockRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, ok := m.recorded(id)
	if !ok || st.Status != sandbox.StatusPaused {
		st = m.inspect(id, m.aliveKnown) // running, or what else: a full look says
	}
	if st.Status != sandbox.StatusPaused {
		if st.Status == sandbox.StatusRunning {
			return st, sandbox.ErrNotPaused
		}
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status)}
	}
	reason := ""
	if rec, ok := m.pausedToDisk(id); ok {
		if err := m.resumeFromDisk(ctx, st, rec); err != nil {
			return nil, err
		}
		st, reason = m.inspect(id, m.aliveKnown), "from disk"
	} else if err := m.thaw(ctx, st); err != nil {
		return nil, m.goneOr(id, err)
	}
	st.Status, st.PausedAt = sandbox.StatusRunning, nil
	m.Logf(id, "resumed %s", reason)
	m.event(ctx, events.Resumed, st, reason)
	return st, nil
}

// recorded is neuron id's state as its records say, whether its agent
// lives unchecked (for docker, that is a daemon call): Pause and Resume
// act on it, and a freeze or thaw of a neuron that is gone fails, which
// goneOr then tells apart. A pending or unreadable state is not trusted.
func (m *Manager) recorded(id string) (*sandbox.State, bool) {
	st, err := m.readState(id)
	if err != nil || st.Pending {
		return nil, false
	}
	st.Status = sandbox.StatusRunning
	m.lifecycleOf(st)
	return st, true
}

// goneOr is NotRunningError when neuron id turns out not to run after err
// (its agent died: the look clears it away), else err.
func (m *Manager) goneOr(id string, err error) error {
	if st := m.inspect(id, m.aliveKnown); st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused {
		return &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status)}
	}
	return err
}

// thaw continues a paused neuron and drops its pause record (the record
// lock held).
func (m *Manager) thaw(ctx context.Context, st *sandbox.State) error {
	if fr, ok := m.rt.(Freezer); ok {
		if err := fr.Thaw(ctx, m.lay, st.ID, st); err != nil {
			return fmt.Errorf("resuming %s: %w", st.ID, err)
		}
	}
	if err := os.Remove(m.pausedFile(st.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("resuming %s: %w", st.ID, err)
	}
	return nil
}

// isPaused reports whether neuron id has a pause record: one stat, cheap
// enough for every request.
func (m *Manager) isPaused(id string) bool {
	_, err := os.Lstat(m.pausedFile(id))
	return err == nil
}

// autoPauseReason marks the pauses the keeper makes of idle neurons.
const autoPauseReason = "idle"

// PauseIfIdle pauses neuron id if no request to it runs in any process
// and none ended after since. It reports whether it paused it. The caller
// (the keeper) has checked the neuron's CPU use itself.
func (m *Manager) PauseIfIdle(ctx context.Context, id string, since time.Time) (bool, error) {
	if err := m.known(id); err != nil {
		return false, err
	}
	// A lock of its own (a new open of the file): this process's own
	// requests hold theirs on another, and must count as in flight.
	l := store.NewLock(m.activeFile(id))
	ok, err := l.TryExclusive()
	if err != nil || !ok {
		return false, err
	}
	defer l.Release()
	fi, err := os.Stat(m.activeFile(id))
	if err != nil || fi.ModTime().After(since) {
		return false, err
	}
	_, err = m.Pause(ctx, id, sandbox.PauseOptions{Reason: autoPauseReason})
	if errors.Is(err, sandbox.ErrAlreadyPaused) {
		return false, nil
	}
	return err == nil, err
}

// activity is this process's view of the requests to one neuron (see
// link.Activity): while any runs, a shared flock on the neuron's activity
// file; when the last ends, the file's time is stamped. A paused neuron is
// resumed before a request is sent.
type activity struct {
	m  *Manager
	id string

	mu sync.Mutex
	n  int
	f  *os.File
}

// dropActivity ends this process's activity of neuron id, if it has one.
func (m *Manager) dropActivity(id string) {
	m.mu.Lock()
	a := m.activities[id]
	delete(m.activities, id)
	m.mu.Unlock()
	if a != nil {
		a.close()
	}
}

// activityFor returns this process's activity of neuron id.
func (m *Manager) activityFor(id string) *activity {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.activities[id]
	if a == nil {
		a = &activity{m: m, id: id}
		m.activities[id] = a
	}
	return a
}

// Begin implements link.Activity.
func (a *activity) Begin(ctx context.Context, cmd protocol.Cmd) (func(), error) {
	quiet := link.IsQuiet(ctx)
	if !quiet {
		a.enter()
	}
	if a.m.isPaused(a.id) {
		var err error
		if quiet {
			err = &sandbox.NotRunningError{ID: a.id, Reason: "it is paused", Hint: "nsys-cortex resume " + a.id}
		} else if _, err = a.m.Resume(ctx, a.id); errors.Is(err, sandbox.ErrNotPaused) {
			err = nil // another process resumed it first
		}
		if err != nil {
			if !quiet {
				a.leave()
			}
			return nil, err
		}
	}
	if quiet {
		return func() {}, nil
	}
	var once sync.Once
	return func() { once.Do(a.leave) }, nil
}

func (a *activity) enter() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	if a.n > 1 {
		return
	}
	if a.f == nil {
		f, err := os.OpenFile(a.m.activeFile(a.id), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return // no record: this request is not seen by auto-pause
		}
		a.f = f
	}
	for unix.Flock(int(a.f.Fd()), unix.LOCK_SH) == unix.EINTR {
	}
}

func (a *activity) leave() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n--
	if a.n > 0 || a.f == nil {
		return
	}
	now := time.Now()
	unix.Futimes(int(a.f.Fd()), []unix.Timeval{unix.NsecToTimeval(now.UnixNano()), unix.NsecToTimeval(now.UnixNano())})
	unix.Flock(int(a.f.Fd()), unix.LOCK_UN)
}

// close lets go of the activity file (no request runs).
func (a *activity) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil && a.n == 0 {
		a.f.Close()
		a.f = nil
	}
}
