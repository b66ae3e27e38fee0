package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/store"
)

// connectTimeout bounds the wait for a running agent to dial a new host
// socket; dialling an agent (tcp) first asks the docker daemon for its
// port, which a busy daemon can be slow to answer, and gets longer.
const (
	connectTimeout     = 5 * time.Second
	dialConnectTimeout = 20 * time.Second
)

// connectWait is how long Connect waits for n's agent.
func connectWait(n *neuron) time.Duration {
	if n.link.Dialing() {
		return dialConnectTimeout
	}
	return connectTimeout
}

// Get returns the state of neuron id, found in three tiers: what this
// process holds, the state file with a liveness check of its agent, and
// an overlay directory without a state file (an agent may still run for it).
func (m *Manager) Get(ctx context.Context, id string) (*sandbox.State, error) {
	if err := m.known(id); err != nil {
		return nil, err
	}
	sts := m.enforceDue(ctx, []*sandbox.State{m.inspect(id, m.aliveKnown)})
	if len(sts) == 0 {
		return nil, &sandbox.NotFoundError{ID: id} // wiped by its deadline
	}
	return sts[0], nil
}

// List returns every process-mode neuron, running or stopped.
func (m *Manager) List(ctx context.Context) ([]*sandbox.State, error) {
	overlays, err := sandbox.ScanOverlays(m.lay)
	if err != nil {
		return nil, err
	}
	return m.ListOverlays(ctx, overlays)
}

// A list inspects its neurons with up to listWorkers goroutines, one for
// each listPerWorker neurons (fewer are not worth a goroutine).
const (
	listWorkers   = 8
	listPerWorker = 16
)

// ListOverlays is List of the home's overlays as scanned already
// (sandbox.OverlayLister): those marked with this mode, each looked at
// again just before it is inspected, as List always did. A scan handed
// through a Set is older by the other modes' listing (a docker ps, a
// cluster's list), and in that time an overlay can be wiped, or wiped
// and made again in another mode: inspecting it here would take another
// mode's live neuron for a dead one of this mode, and clear it away.
func (m *Manager) ListOverlays(ctx context.Context, overlays []sandbox.Overlay) ([]*sandbox.State, error) {
	// A runtime that tracks its neurons is asked once for the whole list,
	// and only when the home has a neuron of its mode: asking can cost a
	// process of its own (docker ps) that a list of other modes' neurons
	// must not pay for.
	alive := m.aliveKnown
	if t := m.tracker(); t != nil {
		running := sync.OnceValues(func() (map[string]bool, error) {
			rs, err := t.Running(m.lay)
			set := make(map[string]bool, len(rs))
			for _, r := range rs {
				set[r.ID] = true
			}
			return set, err
		})
		alive = func(st *sandbox.State) (bool, bool) {
			set, err := running()
			return set[st.ID], err == nil
		}
	}
	var own []string
	for _, o := range overlays {
		if m.OwnsMark(o.Mode) {
			own = append(own, o.ID)
		}
	}
	// Each neuron is a handful of small reads (its mark again, its state,
	// its agent's /proc stat, its spec), most of a list's time: they go
	// on a few at once. A daemon's requests inspect neurons at once
	// already; each inspection takes its neuron's own locks.
	out := make([]*sandbox.State, len(own))
	look := func(i int) {
		if _, mine := m.ownOverlay(own[i]); mine {
			out[i] = m.inspect(own[i], alive)
		}
	}
	if workers := min(runtime.GOMAXPROCS(0), listWorkers, len(own)/listPerWorker); workers > 1 {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(own); i = int(next.Add(1) - 1) {
					look(i)
				}
			})
		}
		wg.Wait()
	} else {
		for i := range own {
			look(i)
		}
	}
	out = slices.DeleteFunc(out, func(st *sandbox.State) bool { return st == nil })
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return m.enforceDue(ctx, out), nil
}

// inspect works out a neuron's state from what is on disk and in /proc,
// clearing what is stale on the way, with its labels and pause.
func (m *Manager) inspect(id string, aliveKnown func(*sandbox.State) (bool, bool)) *sandbox.State {
	st := m.inspectRun(id, aliveKnown)
	m.lifecycleOf(st)
	return st
}

// inspectRun is inspect without the records of the lifecycle.
func (m *Manager) inspectRun(id string, aliveKnown func(*sandbox.State) (bool, bool)) *sandbox.State {
	m.mu.Lock()
	var held *sandbox.State
	if n := m.neurons[id]; n != nil {
		held = n.state.Copy()
	}
	m.mu.Unlock()
	if held != nil && held.Status == sandbox.StatusRunning {
		if ok, known := aliveKnown(held); ok || !known {
			held.Owner = readOwner(m.overlay(id))
			// Another process may have moved its deadline since.
			if cur, err := m.readState(id); err == nil && sameRun(cur, held) {
				held.Deadline, held.Timeout, held.OnTimeout, held.AutoPause = cur.Deadline, cur.Timeout, cur.OnTimeout, cur.AutoPause
			}
			return held
		}
	}

	st, err := m.readState(id)
	if err == nil {
		alive, known := aliveKnown(st)
		switch {
		case !known:
			st.Status = sandbox.StatusUnknown
			return st
		case st.Pending:
			if m.sweepPending(id, st) {
				return m.stopped(id)
			}
			st.Status = sandbox.StatusPending
			return st
		case alive:
			st.Status = sandbox.StatusRunning
			st.Owner = readOwner(m.overlay(id))
			return st
		}
		if rec, ok := m.pausedToDisk(id); ok {
			// Its VMM exited when it was paused to disk: paused, not dead.
			at := rec.At
			st.Status, st.PausedAt = sandbox.StatusPaused, &at
			return st
		}
		lock := m.lockFor(id) // stale: the agent died without cleaning up
		m.releaseDead(id, lock)
		lock.Release()
		return m.stopped(id)
	}
	// No usable state file: an agent may still serve this overlay.
	if m.tracker() != nil {
		st := m.stopped(id)
		if ok, known := aliveKnown(&sandbox.State{ID: id}); ok && known {
			st.Status, st.SocketDir = sandbox.StatusRunning, m.socketDir(id)
		}
		return st
	}
	for _, r := range m.running() {
		if r.ID == id {
			st := m.stopped(id)
			st.Status, st.PID, st.SocketDir = sandbox.StatusRunning, r.PID, m.socketDir(id)
			if r.PID > 0 {
				st.PIDStart, _ = store.ProcStart(r.PID)
			}
			return st
		}
	}
	return m.stopped(id)
}

// stopped is the state of a neuron of which only the overlay exists.
func (m *Manager) stopped(id string) *sandbox.State {
	st := &sandbox.State{ID: id, Mode: m.rt.Mode(), Status: sandbox.StatusStopped, Workdir: m.workdir(id), OverlayPath: m.overlay(id)}
	if fi, err := os.Stat(filepath.Join(m.overlay(id), ".mode")); err == nil {
		st.CreatedAt = fi.ModTime().UTC()
	}
	return st
}

// sweepPending kills the agent of a pending state whose creator is gone (its
// lock is free) or that has been pending for longer than pendingSweepAge:
// a host that crashed mid-create leaves nothing behind. It reports whether
// the neuron was swept.
func (m *Manager) sweepPending(id string, st *sandbox.State) bool {
	lock := m.lockFor(id)
	creatorGone, _ := lock.TryExclusive()
	if !creatorGone && time.Since(st.CreatedAt) < pendingSweepAge {
		return false
	}
	if t := m.tracker(); t != nil {
		t.Stop(m.lay, id, st)
	} else {
		if store.Alive(st.PID, st.PIDStart) {
			syscall.Kill(st.PID, syscall.SIGKILL)
			for i := 0; i < 200 && store.Alive(st.PID, st.PIDStart); i++ {
				time.Sleep(5 * time.Millisecond)
			}
		}
		m.bury(id, st.PID)
	}
	m.clear(id)
	lock.Release()
	return true
}

// Destroy stops neuron id and everything its agent started. The overlay is
// kept unless opts.Wipe. Processes merely using the neuron do not stop a
// destroy; an exclusive owner does.
func (m *Manager) Destroy(ctx context.Context, id string, opts sandbox.DestroyOptions) error {
	typ := events.Destroyed
	if opts.Wipe {
		typ = events.Wiped
	}
	return m.destroy(ctx, id, opts, typ, "requested")
}

// destroy is Destroy, recorded as an event of typ.
func (m *Manager) destroy(ctx context.Context, id string, opts sandbox.DestroyOptions, typ events.Type, reason string) error {
	if err := validID(id); err != nil {
		return err
	}
	exists, mine := m.ownOverlay(id)
	if !exists || !mine {
		return &sandbox.NotFoundError{ID: id}
	}
	m.mu.Lock()
	n := m.neurons[id]
	delete(m.neurons, id)
	m.mu.Unlock()
	lock := m.lockFor(id)
	if n != nil {
		n.link.Close()
		lock = n.lock
	}
	defer lock.Release()
	if got, err := lock.TryExclusive(); err != nil {
		return err
	} else if !got {
		if shared, err := lock.TryShared(); err != nil {
			return err
		} else if !shared {
			return &sandbox.OwnedElsewhereError{ID: id, Owner: readOwner(m.overlay(id)), Reason: "it cannot be destroyed from here"}
		}
	}
	st := m.inspect(id, m.aliveKnown)
	_, onDisk := m.pausedToDisk(id)
	if old, err := m.readState(id); err == nil {
		if st.Status == sandbox.StatusPaused && !onDisk {
			// A frozen process takes no signal: thaw it to stop it.
			if err := m.thaw(ctx, st); err != nil {
				m.Logf(id, "destroy: %v", err)
			}
		}
		m.stop(id, old)
	}
	faultpoint.Hit("destroy.stopped")
	for _, r := range m.running() {
		if r.ID == id {
			m.stopRunning(r)
		}
	}
	m.clear(id)
	if dp, ok := m.rt.(DiskPauser); ok {
		dp.DiscardMachine(m.lay, id) // a machine paused to disk goes with its run
	}
	os.Remove(filepath.Join(m.overlay(id), ".owner"))
	if opts.Wipe {
		// Once more, now that the neuron is surely stopped: what the runtime
		// could not free at the stop (a cgroup still emptying) it frees now,
		// before its records go with the overlay.
		m.rt.Released(m.lay, id)
		uid := recordedUID(m.lay, id)
		// Its snapshots stay: whose they are is recorded with them.
		if err := store.KeepLabels(m.lay.SnapshotsDir(id), st.Labels); err != nil {
			return fmt.Errorf("wiping %s: recording its snapshots' labels: %w", id, err)
		}
		if err := disk.Unmount(m.lay, id); err != nil {
			return fmt.Errorf("wiping %s: %w", id, err)
		}
		faultpoint.Hit("destroy.wiping")
		if err := os.RemoveAll(m.overlay(id)); err != nil {
			return fmt.Errorf("wiping the overlay of %s: %w", id, err)
		}
		ReleaseIdentity(m.lay, id, uid)
		os.Remove(m.logFile(id))
		os.Remove(m.logFile(id) + ".1")
		// The hosts' writer locks of its terminals: the terminals went
		// with the overlay (a lock still held is on a file no longer named).
		os.RemoveAll(filepath.Join(m.lay.TerminalLocksDir(), id))
		m.dropActivity(id)
		m.mu.Lock()
		delete(m.guests, id)
		m.mu.Unlock()
	}
	m.Logf(id, "%s (%s)", typ, reason)
	st.Status = sandbox.StatusStopped
	m.event(ctx, typ, st, reason)
	return nil
}

// LogPath returns the path of neuron id's log: what its agent (and, in
// nsbox, its PID 1 and egress proxy) wrote.
func (m *Manager) LogPath(ctx context.Context, id string) (string, error) {
	if exists, mine := m.ownOverlay(id); !exists || !mine {
		return "", &sandbox.NotFoundError{ID: id}
	}
	m.syncLog(id)
	return m.logFile(id), nil
}

// Connect returns a client on neuron id's channel: this process listens on a
// socket of its own in the channel directory and the agent dials it.
func (m *Manager) Connect(ctx context.Context, id string) (*link.Client, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	// A create of this process that began after connect's look for one
	// holds the lock connect then finds taken: not another's, so look
	// again (and wait for it). Bounded: a create is marked before it
	// takes the lock and holds the neuron before it is unmarked.
	for try := 0; ; try++ {
		c, err := m.connect(ctx, id)
		var oe *sandbox.OwnedElsewhereError
		if try < 3 && errors.As(err, &oe) && m.ownsHere(id) {
			continue
		}
		return c, err
	}
}

// ownsHere says whether this process is creating neuron id or holds it.
func (m *Manager) ownsHere(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, starting := m.starting[id]
	return starting || m.neurons[id] != nil
}

// connect is Connect, once.
func (m *Manager) connect(ctx context.Context, id string) (*link.Client, error) {
	// A create of this process holds the neuron's lock until it is done:
	// wait for it (its neuron is held then) instead of calling this
	// process "another" that owns it.
	if err := m.waitStarting(ctx, id); err != nil {
		return nil, err
	}
	m.connMu.Lock()
	defer m.connMu.Unlock()
	m.mu.Lock()
	n := m.neurons[id]
	m.mu.Unlock()
	if n != nil {
		if _, err := n.link.Conn(); err == nil {
			return n.link.Client(), nil
		}
		if !m.alive(n.state) {
			return nil, &sandbox.NotRunningError{ID: id, Reason: "its agent died"}
		}
		// Alive but disconnected: it redials this socket when it notices.
		if _, err := m.waitAgent(ctx, n, connectWait(n)); err != nil {
			return nil, m.unresponsive(n.state, err)
		}
		return n.link.Client(), nil
	}
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if st.Status == sandbox.StatusPaused && !link.IsQuiet(ctx) {
		// Its frozen agent cannot dial this process's socket: a request
		// to a paused neuron resumes it.
		if st, err = m.Resume(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotPaused) {
			return nil, err
		}
		// A resume from disk starts it again, held by this process.
		m.mu.Lock()
		n = m.neurons[id]
		m.mu.Unlock()
		if n != nil {
			if _, err := n.link.Conn(); err == nil {
				return n.link.Client(), nil
			}
		}
	}
	if st.Status != sandbox.StatusRunning {
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(st.Status)}
	}
	lock := m.lockFor(id)
	take := lock.TryShared
	if m.env.Exclusive {
		take = lock.TryExclusive
	}
	if got, err := take(); err != nil {
		return nil, err
	} else if !got {
		return nil, &sandbox.OwnedElsewhereError{ID: id, Owner: readOwner(m.overlay(id)),
			Reason: "its channel is reserved for that process (use its API instead)"}
	}
	n = &neuron{id: id, lock: lock, state: st, refused: make(chan error, 1)}
	if n.link, err = m.listen(n); err != nil {
		lock.Release()
		return nil, err
	}
	if _, err := m.waitAgent(ctx, n, connectWait(n)); err != nil {
		n.link.Close()
		lock.Release()
		return nil, m.unresponsive(st, err)
	}
	m.hold(n)
	return n.link.Client(), nil
}

// unresponsive explains why a running neuron's agent could not be reached.
func (m *Manager) unresponsive(st *sandbox.State, err error) error {
	if !m.alive(st) {
		return &sandbox.NotRunningError{ID: st.ID, Reason: "its agent died"}
	}
	var be *sandbox.BootError
	if !errors.As(err, &be) {
		return err // cancelled, or refused: as it is
	}
	if strings.HasPrefix(be.Reason, refusedPrefix) {
		return &sandbox.NotRunningError{ID: st.ID, Reason: "it runs, but " + be.Reason,
			Hint: "if nothing in the neuron poses as its agent, nsys-cortex destroy " + st.ID + " and create it again; its data stays"}
	}
	if strings.HasPrefix(be.Reason, "no connection to the agent") {
		return &sandbox.NotRunningError{ID: st.ID, Reason: "it runs, but " + be.Reason,
			Hint: "nsys-cortex destroy " + st.ID + " and create it again to restart it; its data stays"}
	}
	return &sandbox.NotRunningError{ID: st.ID, Reason: fmt.Sprintf(
		"its %s is alive but did not answer in time: it may be stopped or stuck (its log: %s)", agentOf(st), m.logFile(st.ID)),
		Hint: "nsys-cortex destroy " + st.ID + " and create it again to restart it; its data stays"}
}

// Close releases every channel and lock this process holds. Neurons keep running.
func (m *Manager) Close() error {
	m.mu.Lock()
	held := m.neurons
	m.neurons = map[string]*neuron{}
	acts := m.activities
	m.activities = map[string]*activity{}
	m.mu.Unlock()
	for _, a := range acts {
		a.close()
	}
	for _, n := range held {
		n.link.Close()
		if n.lock.Held() == syscall.LOCK_EX && m.env.Exclusive {
			os.Remove(filepath.Join(m.overlay(n.id), ".owner"))
		}
		n.lock.Release()
	}
	m.wg.Wait()
	return nil
}

// CleanupOrphans kills agents that run for this home but that no state file
// knows about. It is never called automatically.
func (m *Manager) CleanupOrphans(ctx context.Context) ([]string, error) {
	// Warm neurons no live process holds; a warm name still running is
	// one being claimed (or held): its holder's, not an orphan.
	killed := m.SweepWarm(ctx)
	for _, r := range m.running() {
		if isWarm(r.ID) {
			continue
		}
		st, err := m.readState(r.ID)
		switch {
		case err != nil: // no state file knows it
		case st.Pending && m.creating(r.ID):
			continue // its create has not recorded its process yet
		case m.tracker() != nil && !st.Pending && m.alive(st):
			continue
		case m.tracker() == nil && st.PID == r.PID:
			continue
		}
		m.stopRunning(r)
		if r.PID > 0 {
			killed = append(killed, fmt.Sprintf("%s (pid %d)", r.ID, r.PID))
		} else {
			killed = append(killed, r.ID)
		}
	}
	return killed, nil
}

// creating reports whether a create of id is under way: in this process,
// or in another that holds its lock (a creator that is gone holds none).
func (m *Manager) creating(id string) bool {
	m.mu.Lock()
	_, here := m.starting[id]
	m.mu.Unlock()
	if here {
		return true
	}
	lock := m.lockFor(id)
	got, err := lock.TryExclusive()
	lock.Release()
	return err == nil && !got
}

// writeOwner records this process as the exclusive owner of an overlay.
func writeOwner(overlay string) {
	cmd := strings.Join(store.Cmdline(os.Getpid()), " ")
	if len(cmd) > 200 {
		cmd = cmd[:200]
	}
	start, _ := store.ProcStart(os.Getpid())
	o := ownerRecord{Owner: sandbox.Owner{PID: os.Getpid(), Command: cmd, Since: time.Now().UTC()}, Start: start}
	store.WriteJSON(filepath.Join(overlay, ".owner"), &o, 0o600) // advisory: the lock is what counts
}

type ownerRecord struct {
	sandbox.Owner
	Start uint64 `json:"start"`
}

// readOwner returns the exclusive owner of an overlay if it is still alive.
func readOwner(overlay string) *sandbox.Owner {
	var o ownerRecord
	if store.ReadJSON(filepath.Join(overlay, ".owner"), &o) != nil || !store.Alive(o.PID, o.Start) {
		return nil
	}
	return &o.Owner
}

var _ sandbox.DataRooter = (*Manager)(nil)

// DataRoot returns where neuron id's data is: on its disk of its own,
// mounted first if it is not (after the host restarted), or in its
// overlay directory.
func (m *Manager) DataRoot(ctx context.Context, id string) (string, error) {
	if _, ok := disk.Size(m.lay, id); !ok {
		return m.overlay(id), nil
	}
	if err := disk.Mount(m.lay, id); err != nil {
		return "", err
	}
	return disk.Dir(m.lay, id), nil
}
