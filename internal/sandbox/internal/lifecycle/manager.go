// Package lifecycle is what every backend that runs a detached agent per
// neuron has in common: the state file written before boot, ownership locks,
// three-tier discovery, the pending sweep, connecting to a running agent,
// agent death, destroy and orphan cleanup. A backend supplies a Runtime —
// how its overlay is laid out and how its agent is started — and gets a
// sandbox.Manager.
//
// On disk, per neuron:
//
//	overlays/<id>/.neuron.json   state (written before boot with pending=true)
//	overlays/<id>/.lock          ownership lock (flock)
//	overlays/<id>/.mode          which mode made this overlay
//	overlays/<id>/...            the runtime's own layout
//	sockets/[group/]<id>/        channel directory (0700): one socket per host process;
//	                             the group is the mode's name (ChannelGrouper)
//	logs/neurons/<id>.log        the agent's own log
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// pendingSweepAge is how old a pending state must be before another process
// kills its agent as an orphan, even if its creator still holds the lock.
const pendingSweepAge = 60 * time.Second

// Manager runs the neurons of one Runtime.
type Manager struct {
	env sandbox.Env
	lay layout.Layout
	rt  Runtime

	mu      sync.Mutex
	neurons map[string]*neuron // the neurons this process holds
	// starting holds, per id, a channel closed when a Create of this
	// process ends: a Connect meanwhile waits for it rather than take the
	// creator's lock for another process's.
	starting map[string]chan struct{}
	// burying holds, per id, a channel closed when this process has
	// cleared away the neuron whose agent died: a Create meanwhile waits
	// for it rather than find the neuron's lock held by the clean-up.
	burying map[string]chan struct{}
	connMu  sync.Mutex // one Connect at a time, so a neuron gets one channel
	// activities are this process's requests per neuron (control.go).
	activities map[string]*activity
	events     *events.Log
	disks      map[string]diskReading  // the last size of each neuron's data (metrics.go)
	guests     map[string]guestReading // the last use each VM's guest reported (todisk.go)
	// wg tracks disconnect handlers. The goroutine that reaps an agent this
	// process started is owned by that agent: it ends when the agent does.
	wg sync.WaitGroup
}

// neuron is a neuron this process holds: its channel, its lock, and (when
// this process started it) the agent process.
type neuron struct {
	id string
	// secret is the neuron's per-start secret its agent proves on every
	// connection ("" until read from its record).
	secret string
	link   *link.Link
	lock   *store.Lock
	state  *sandbox.State
	// exited is closed when the agent this process started has been reaped.
	exited chan struct{}
	// refused receives why a connecting agent failed the handshake.
	refused chan error
	// control is the runtime's way to claim a warm neuron (warm.go).
	control *os.File
}

var (
	_ sandbox.Manager   = (*Manager)(nil)
	_ sandbox.LogPather = (*Manager)(nil)
)
var (
	_ sandbox.OrphanCleaner = (*Manager)(nil)
	_ sandbox.AgentUIDer    = (*Manager)(nil)
)

// New returns a manager of rt's neurons over env.Layout.
func New(env sandbox.Env, rt Runtime) *Manager {
	return &Manager{env: env, lay: env.Layout, rt: rt, neurons: map[string]*neuron{}, starting: map[string]chan struct{}{}, burying: map[string]chan struct{}{},
		activities: map[string]*activity{}, events: events.Open(env.Layout), disks: map[string]diskReading{}, guests: map[string]guestReading{}}
}

// Mode returns the runtime's mode.
func (m *Manager) Mode() string { return m.rt.Mode() }

func (m *Manager) overlay(id string) string   { return m.lay.OverlayDir(id) }
func (m *Manager) stateFile(id string) string { return filepath.Join(m.overlay(id), ".neuron.json") }
func (m *Manager) workdir(id string) string   { return m.rt.Workdir(m.lay, id) }
func (m *Manager) socketDir(id string) string { return m.lay.ChannelDir(m.channelGroup(), id) }

// channelGroup is where under sockets/ the runtime's channel directories
// are: its mode's directory, unless it names another (ChannelGrouper).
func (m *Manager) channelGroup() string {
	if g, ok := m.rt.(ChannelGrouper); ok {
		return g.ChannelGroup()
	}
	return m.rt.Mode()
}
func (m *Manager) logFile(id string) string {
	return LogFile(m.lay, id)
}

// AgentUID is the host uid running neuron st's agent runs as: the
// runtime's answer where it has one (a runtime implements
// sandbox.AgentUIDer when its PID is not where the uid is read), else the
// uid of the process that stands for the neuron (State.PID): the agent
// itself in process mode, the container's client or the VMM elsewhere,
// each run as the host user who owns the neuron.
func (m *Manager) AgentUID(st *sandbox.State) int {
	if u, ok := m.rt.(sandbox.AgentUIDer); ok {
		return u.AgentUID(st)
	}
	return store.ProcUID(st.PID)
}

// secretFile holds the per-start secret of a neuron's agent (a host
// record, owner-only, never in a snapshot).
func (m *Manager) secretFile(id string) string { return filepath.Join(m.overlay(id), ".channel") }

// newSecret makes the secret of a neuron about to start (or takes the one
// the runtime keeps: a VM resumed from a snapshot holds its own) and
// records it for every host process that connects later.
func (m *Manager) newSecret(id string) (string, error) {
	secret := protocol.NewSecret()
	if k, ok := m.rt.(SecretKeeper); ok {
		if kept, ok := k.KeptSecret(m.lay, id); ok {
			secret = kept
		}
	}
	if err := store.WriteFileAtomic(m.secretFile(id), []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("recording the channel secret of %s: %w", id, err)
	}
	return secret, nil
}

// Secret returns the per-start secret of neuron id's running agent (a VM
// mode keeps it with a whole-machine snapshot, whose agent holds it).
func (m *Manager) Secret(id string) (string, error) { return m.readSecret(id) }

// readSecret returns the recorded secret of a running neuron.
func (m *Manager) readSecret(id string) (string, error) {
	b, err := os.ReadFile(m.secretFile(id))
	if s := strings.TrimSpace(string(b)); err == nil && s != "" {
		return s, nil
	}
	if errors.Is(err, fs.ErrNotExist) || err == nil {
		return "", &sandbox.NotRunningError{ID: id, Reason: "it was started by an older nsys-cortex, whose agent cannot prove it is the neuron's agent",
			Hint: "nsys-cortex destroy " + id + " and create it again; its data stays"}
	}
	return "", fmt.Errorf("the channel secret of %s: %w", id, err)
}

func (m *Manager) lockFor(id string) *store.Lock {
	return store.NewLock(filepath.Join(m.overlay(id), ".lock"))
}

func validID(id string) error {
	if err := ids.Validate(id); err != nil {
		return &sandbox.InvalidError{Reason: err.Error()}
	}
	return nil
}

// ownOverlay reports whether the overlay of id exists and belongs to this mode.
func (m *Manager) ownOverlay(id string) (exists, mine bool) {
	if _, err := os.Stat(m.overlay(id)); err != nil {
		return false, false
	}
	return true, m.OwnsMark(sandbox.OverlayMode(m.lay, id))
}

// OwnsMark reports whether an overlay marked with mode md is this mode's
// (sandbox.OverlayLister).
func (m *Manager) OwnsMark(md string) bool {
	return md == m.rt.Mode() || (md == "" && m.rt.Mode() == LegacyMode)
}

func (m *Manager) readState(id string) (*sandbox.State, error) {
	var st sandbox.State
	if err := store.ReadJSON(m.stateFile(id), &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (m *Manager) writeState(st *sandbox.State) error {
	return store.WriteJSON(m.stateFile(st.ID), st, 0o600)
}

// Create starts neuron id.
func (m *Manager) Create(ctx context.Context, id string, opts sandbox.CreateOptions) (*sandbox.State, error) {
	if l := claimedLock(ctx, id); l != nil {
		// A whole-machine fork's restore, under the claim it holds.
		return m.createHeld(ctx, id, opts, l)
	}
	return m.createHeld(ctx, id, opts, nil)
}

// createHeld is Create; held, when set, is id's ownership lock, which the
// caller took already (a fork holds it from the moment it claims the id,
// so no other create starts a neuron on data being copied).
func (m *Manager) createHeld(ctx context.Context, id string, opts sandbox.CreateOptions, held *store.Lock) (*sandbox.State, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if err := m.rt.Allow(); err != nil {
		return nil, err
	}
	if err := checkCreate(opts); err != nil {
		return nil, err
	}
	if len(opts.Secrets) > 0 {
		if _, ok := m.rt.(SecretProxy); !ok {
			return nil, &sandbox.UnenforceableError{Mode: m.rt.Mode(), Policy: "secrets",
				Reason: "this mode has no egress proxy of its own to put them into requests (nsbox has)"}
		}
		if err := sandbox.CheckSecrets(opts); err != nil {
			return nil, err
		}
	}
	bin, err := m.env.AgentBinary()
	if err != nil {
		return nil, &sandbox.UnavailableError{Mode: m.rt.Mode(), Reason: err.Error()}
	}
	exists, mine := m.ownOverlay(id)
	if exists && !mine {
		md := sandbox.OverlayMode(m.lay, id)
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("neuron %q holds data of mode %s: create it with --mode %s, or destroy it with --wipe first", id, md, md)}
	}
	if f, ok := m.forking(id); ok && held == nil {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("neuron %q was being made as %s, which was cut short (process %d) before it was whole: "+
			"its data is partial, so it is not started; destroy it with --wipe", id, f.Src, f.PID)}
	}
	if err := os.MkdirAll(m.overlay(id), 0o700); err != nil {
		return nil, fmt.Errorf("overlay of %s: %w", id, err)
	}
	// This process may be clearing away its dead agent (a container to
	// remove): the create starts once that is done, looking at what this
	// process holds under the same lock as at the clean-up's end.
	m.mu.Lock()
	for ch := m.burying[id]; ch != nil; ch = m.burying[id] {
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("creating %s: waiting for the clean-up of its dead agent: %w", id, ctx.Err())
		}
		m.mu.Lock()
	}
	n := m.neurons[id]
	if n != nil && m.alive(n.state) {
		st := n.state.Copy()
		m.mu.Unlock()
		return nil, &sandbox.AlreadyRunningError{State: st}
	}
	if n != nil {
		delete(m.neurons, id) // a corpse this process held: let go of it
	}
	m.mu.Unlock()
	lock := m.lockFor(id)
	if n != nil {
		n.link.Close()
		lock = n.lock
	}
	if held != nil {
		lock = held
	}
	defer m.markStarting(id)()
	got, err := held != nil, error(nil)
	if held == nil {
		got, err = lock.TryExclusive()
	}
	// A holder may be letting go right now (its agent died): give it a moment.
	for i := 0; err == nil && !got && i < 50; i++ {
		time.Sleep(10 * time.Millisecond)
		got, err = lock.TryExclusive()
	}
	if err != nil || !got {
		lock.Release() // a corpse's lock this process held is let go as well
		if err != nil {
			return nil, err
		}
		return nil, m.busy(ctx, id)
	}
	if _, ok := m.pausedToDisk(id); ok {
		lock.Release()
		return nil, &sandbox.AlreadyRunningError{State: m.inspect(id, m.aliveKnown)}
	}
	st, err := m.create(ctx, id, bin, lock, opts, nil)
	if err == nil {
		if !exists {
			m.event(ctx, events.Created, st, "")
		}
		m.event(ctx, events.Started, st, "")
		if st.Deadline != nil || st.AutoPause > 0 {
			m.ensureKeeper()
		}
	}
	if errors.Is(err, syscall.ENOSPC) {
		err = &sandbox.CapacityError{Reason: fmt.Sprintf("no space left where neurons are kept (%s): %v", m.lay.Overlays, err)}
	}
	if err != nil {
		if !exists {
			// A new neuron that could not be made leaves nothing behind
			// (its log stays, to say why).
			m.discard(id)
		}
		lock.Release()
		return nil, err
	}
	return st, nil
}

// checkCreate refuses options no create can take.
func checkCreate(opts sandbox.CreateOptions) error {
	for _, kv := range opts.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("environment entry %q is not KEY=VALUE", kv)}
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return &sandbox.InvalidError{Reason: fmt.Sprintf("environment entry %q holds a NUL byte", kv)}
		}
	}
	return opts.CheckLifecycle()
}

// markStarting records that this process is creating id, until the
// returned function is called.
func (m *Manager) markStarting(id string) (done func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	m.starting[id] = ch
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.starting[id] == ch {
			delete(m.starting, id)
		}
		m.mu.Unlock()
		close(ch)
	}
}

// waitStarting waits while this process creates id.
func (m *Manager) waitStarting(ctx context.Context, id string) error {
	for {
		m.mu.Lock()
		ch := m.starting[id]
		m.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// busy explains why the lock of id is taken.
func (m *Manager) busy(ctx context.Context, id string) error {
	if st, err := m.Get(ctx, id); err == nil && st.Status == sandbox.StatusRunning {
		return &sandbox.AlreadyRunningError{State: st}
	}
	return &sandbox.OwnedElsewhereError{ID: id, Owner: readOwner(m.overlay(id)), Reason: "another process is creating or destroying it"}
}

// create does the work of Create under the exclusive lock. A create that
// continues a run (a resume from disk) keeps that run's records: its
// start time, deadline and idle rule.
func (m *Manager) create(ctx context.Context, id, bin string, lock *store.Lock, opts sandbox.CreateOptions, run *sandbox.State) (*sandbox.State, error) {
	// Whatever ran before: a live agent is kept, a dead or half-created one
	// is cleared away (create replaces a corpse).
	if old, err := m.readState(id); err == nil {
		if m.alive(old) && !old.Pending {
			old.Status = sandbox.StatusRunning
			return nil, &sandbox.AlreadyRunningError{State: old}
		}
		m.stop(id, old)
		m.clear(id)
	} else if !errors.Is(err, fs.ErrNotExist) {
		m.clear(id) // a corrupt state file: the agent it named is found below
	}
	// An agent whose state file was lost: it watches its channel directory
	// (and exits when that goes), so without the directory there is none
	// and /proc need not be searched.
	if _, err := os.Stat(m.socketDir(id)); err == nil || m.tracker() != nil {
		for _, r := range m.running() {
			if r.ID == id {
				m.stopRunning(r)
			}
		}
	}

	if err := os.WriteFile(filepath.Join(m.overlay(id), ".mode"), []byte(m.rt.Mode()+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(m.logFile(id)), 0o755); err != nil {
		return nil, err
	}
	// A restore killed during its swap is finished before the mode prepares
	// the data or anything runs on it (store.RecoverRestore).
	if root, err := m.DataRoot(ctx, id); err == nil {
		if err := store.RecoverRestore(root); err != nil {
			return nil, err
		}
	}
	policy, err := m.rt.Prepare(m.lay, id, opts)
	if err != nil {
		return nil, err
	}
	if err := m.setLabels(id, opts.Labels); err != nil {
		return nil, fmt.Errorf("labels of %s: %w", id, err)
	}
	st := &sandbox.State{ID: id, Mode: m.rt.Mode(), Status: sandbox.StatusPending, Pending: true, Policy: &policy, SocketDir: m.socketDir(id),
		Workdir: m.workdir(id), OverlayPath: m.overlay(id), CreatedAt: time.Now().UTC()}
	if run != nil {
		st.CreatedAt = run.CreatedAt
	}
	m.readSpec(id).fill(st)
	if err := m.writeState(st); err != nil {
		return nil, err
	}
	faultpoint.Hit("create.pending")
	os.RemoveAll(st.SocketDir) // sockets of hosts that are gone
	n := &neuron{id: id, lock: lock, state: st, exited: make(chan struct{}), refused: make(chan error, 1)}
	if run != nil {
		// The saved machine's agent holds the secret of the run it continues.
		n.secret, err = m.readSecret(id)
	} else {
		n.secret, err = m.newSecret(id)
	}
	if err != nil {
		m.clear(id)
		return nil, err
	}
	if n.link, err = m.listen(n); err != nil {
		m.clear(id)
		return nil, err
	}
	cmd, err := m.spawn(n, bin, opts)
	if err != nil {
		n.link.Close()
		m.clear(id)
		if c := errdefs.Classed(nil); errors.As(err, &c) {
			return nil, err // the runtime said what was wrong (an image not there)
		}
		return nil, &sandbox.BootError{ID: id, Reason: err.Error()}
	}
	if cmd != nil {
		st.PID = cmd.Process.Pid
		st.PIDStart, _ = store.ProcStart(st.PID)
		go func() {
			cmd.Wait() // reap our child whenever it ends
			close(n.exited)
		}()
	} else {
		n.exited = nil // detached: the tracker follows it (Runtime.Start)
	}
	faultpoint.Hit("create.spawned")
	if err := m.writeState(st); err != nil {
		m.abort(n)
		return nil, err
	}
	boot := opts.BootTimeout
	if boot <= 0 {
		boot = sandbox.DefaultBootTimeout
		if bt, ok := m.rt.(BootTimeouter); ok {
			boot = bt.BootTimeout()
		}
	}
	conn, err := m.waitAgent(ctx, n, boot)
	if err != nil {
		m.abort(n)
		return nil, m.explain(id, err)
	}
	faultpoint.Hit("create.booted")
	st.Pending, st.Status = false, sandbox.StatusRunning
	st.AgentVersion = conn.Peer().Software
	runLifecycle(st, opts, time.Now())
	if run != nil {
		st.Deadline, st.Timeout, st.OnTimeout, st.AutoPause = run.Deadline, run.Timeout, run.OnTimeout, run.AutoPause
	}
	if err := m.writeState(st); err != nil {
		m.abort(n)
		return nil, err
	}
	out := st.Copy()
	m.hold(n)
	return out, nil
}

// refusedPrefix starts the reason of a boot or connect whose peer failed
// the handshake (a wrong neuron, no proof of the secret).
const refusedPrefix = "the agent was refused: "

// maxLog is the size past which a neuron's log is moved to <id>.log.1 when
// the neuron is created again.
const maxLog = 4 << 20

// HostLine writes one line of the host's to a neuron's log, stamped (UTC,
// to the microsecond) as the guest's and the agent's lines are.
func HostLine(w io.Writer, format string, args ...any) {
	// What the line says may hold the neuron's words (a guest's error):
	// cleaned, so it stays one line of the host's.
	msg := protocol.CleanLogText(fmt.Sprintf(format, args...))
	fmt.Fprintf(w, "%s nsys-cortex: %s\n", time.Now().UTC().Format("2006/01/02 15:04:05.000000"), msg)
}

// Logf adds a line of the host's to neuron id's log (when it has one).
func (m *Manager) Logf(id, format string, args ...any) {
	f, err := os.OpenFile(m.logFile(id), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	defer f.Close()
	HostLine(f, format, args...)
}

// spawn starts the agent through the runtime, its output in the log. The
// log keeps what earlier runs wrote, up to maxLog, and one older file.
func (m *Manager) spawn(n *neuron, bin string, opts sandbox.CreateOptions) (*exec.Cmd, error) {
	id := n.id
	path := m.logFile(id)
	if st, err := os.Stat(path); err == nil && st.Size() > maxLog {
		os.Rename(path, path+".1") // on failure the log just grows
	}
	logf, err := OpenLog(m.lay, id)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	HostLine(logf, "creating %s (mode %s, host pid %d)", id, m.rt.Mode(), os.Getpid())
	// A descriptor this process opened without close-on-exec since it
	// started (a FUSE device of /ctx's) must not reach the neuron.
	boot.CloseOnExec()
	req := &StartRequest{ID: id, Layout: m.lay, AgentBin: bin, SocketDir: m.socketDir(id),
		Workdir: m.workdir(id), Log: logf, Options: opts, Secret: n.secret, Warm: isWarm(id)}
	cmd, err := m.rt.Start(req)
	n.control = req.Control
	return cmd, err
}

// listen opens this process's socket in the neuron's channel directory.
func (m *Manager) listen(n *neuron) (*link.Link, error) {
	id := n.id
	if n.secret == "" {
		var err error
		if n.secret, err = m.readSecret(id); err != nil {
			return nil, err
		}
	}
	name := fmt.Sprintf("h%d-%s%s", os.Getpid(), ids.New()[1:7], ".sock")
	opts := m.linkOptions(n)
	if d, ok := m.rt.(Dialer); ok {
		l, err := d.Link(m.lay, id, opts)
		if err != nil {
			return nil, fmt.Errorf("channel of %s: %w", id, err)
		}
		if l != nil {
			return l, nil
		}
	}
	if so, ok := m.rt.(SocketOwner); ok {
		if uid, gid, ok := so.SocketOwner(m.lay, id); ok {
			opts.Owner = &link.Owner{UID: uid, GID: gid}
		}
	}
	l, err := link.Listen(filepath.Join(m.socketDir(id), name), opts)
	if err != nil {
		return nil, fmt.Errorf("channel of %s: %w", id, err)
	}
	return l, nil
}

// waitAgent waits for the agent to connect, giving up at once when it
// exits, refuses the handshake, or dies.
func (m *Manager) waitAgent(ctx context.Context, n *neuron, timeout time.Duration) (*link.Conn, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type res struct {
		c   *link.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := n.link.WaitConnected(ctx); ch <- res{c, err} }()
	pidDone := m.watch(ctx, n.exited, n.state)
	connected := func(r res) (*link.Conn, error) {
		if r.err == nil {
			return r.c, nil
		}
		if ctx.Err() != nil && errors.Is(r.err, context.DeadlineExceeded) {
			waited := time.Since(start).Round(100 * time.Millisecond)
			reason := fmt.Sprintf("the %s did not connect within %s", agentOf(n.state), waited)
			if err := n.link.DialError(); err != nil {
				reason = fmt.Sprintf("no connection to the agent within %s: %v", waited, err)
			}
			return nil, &sandbox.BootError{ID: n.id, Reason: reason, Log: m.logTail(n.id)}
		}
		return nil, r.err
	}
	select {
	case r := <-ch:
		return connected(r)
	case <-pidDone:
		if ctx.Err() != nil {
			// The watch ends with the wait too: this is the deadline (or a
			// cancel), not the agent's death.
			return connected(<-ch)
		}
		cancel()
		<-ch
		return nil, &sandbox.BootError{ID: n.id, Reason: "the " + agentOf(n.state) + " exited before it connected", Log: m.logTail(n.id)}
	case err := <-n.refused:
		cancel()
		<-ch
		return nil, &sandbox.BootError{ID: n.id, Reason: refusedPrefix + err.Error(), Log: m.logTail(n.id)}
	}
}

// explain lets the runtime turn a boot failure into a typed error.
func (m *Manager) explain(id string, err error) error {
	var be *sandbox.BootError
	if ex, ok := m.rt.(Explainer); ok && errors.As(err, &be) {
		if e := ex.Explain(m.lay, id, be); e != nil {
			return e
		}
	}
	return err
}

// watchPID returns a channel closed when pid exits (or ctx ends), using a
// pidfd so a process that is not our child can be watched without polling.
// The pidfd waits in the runtime's poller, not in a thread of its own: a
// CLI call that connects would otherwise start a thread for it (a clone
// on its way to the agent) and wake it every 100 ms.
func watchPID(ctx context.Context, pid int) <-chan struct{} {
	done := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0) // PIDFD_NONBLOCK is Linux 5.10's
	if err != nil {
		close(done) // no such process
		return done
	}
	unix.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: in the poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		close(done)
		return done
	}
	stop := context.AfterFunc(ctx, func() { f.Close() }) // ends the wait below
	go func() {
		defer close(done)
		defer f.Close()
		defer stop()
		// Readable once the process has exited; until then the poller
		// waits for that (or for the close).
		rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0 || err != nil && !errors.Is(err, unix.EINTR)
		})
	}()
	return done
}

// logTailLines is how much of a neuron's log a boot error carries: enough
// to see a restored VM's channel come up, or not.
const logTailLines = 20

// logTail returns the last lines of the agent's log.
func (m *Manager) logTail(id string) string {
	m.syncLog(id)
	b, err := os.ReadFile(m.logFile(id))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "  " + strings.Join(lines[max(0, len(lines)-logTailLines):], "\n  ")
}

// LogFile is where neuron id's log is kept.
func LogFile(lay layout.Layout, id string) string {
	return filepath.Join(lay.LogsDir(), "neurons", id+".log")
}

// OpenLog opens neuron id's log to append to.
func OpenLog(lay layout.Layout, id string) (*os.File, error) {
	return os.OpenFile(LogFile(lay, id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

// agentOf names the agent of st in an error ("the agent", "its
// agent"...): by pid where a host process of this one's stands for it.
func agentOf(st *sandbox.State) string {
	if st.PID > 0 {
		return fmt.Sprintf("agent (pid %d)", st.PID)
	}
	return "agent"
}

// sameRun reports whether a and b describe the same run of a neuron: a
// detached container's has no pid to tell runs apart, its start time does.
func sameRun(a, b *sandbox.State) bool {
	return a.PID == b.PID && a.PIDStart == b.PIDStart && a.CreatedAt.Equal(b.CreatedAt)
}

// syncLog brings neuron id's log up to date where the runtime's agent
// does not write it directly (LogSyncer).
func (m *Manager) syncLog(id string) {
	if ls, ok := m.rt.(LogSyncer); ok {
		ls.SyncLog(m.lay, id)
	}
}

// abort undoes a failed create: the agent is killed and the state cleared.
func (m *Manager) abort(n *neuron) {
	n.link.Close()
	m.stop(n.id, n.state)
	m.clear(n.id)
}

// hold records n as held by this process; the exclusive lock taken for the
// create is downgraded to shared unless this process owns neurons exclusively.
func (m *Manager) hold(n *neuron) {
	if !m.env.Exclusive {
		n.lock.TryShared()
	} else {
		writeOwner(m.overlay(n.id))
	}
	m.mu.Lock()
	if old := m.neurons[n.id]; old != nil && old != n {
		old.link.Close()
		old.lock.Release()
	}
	m.neurons[n.id] = n
	m.mu.Unlock()
}

// onEvent handles the agent connecting, failing the handshake, and
// disconnecting.
func (m *Manager) onEvent(n *neuron, ev link.ConnEvent) {
	id := n.id
	if ev.Kind == link.Refused {
		// A peer that is not the agent fails a boot or connect at once; a
		// hello cut short (a VM's channel reset under the relay) does not:
		// the agent comes again.
		if errors.Is(ev.Err, link.ErrNotTheAgent) {
			select {
			case n.refused <- ev.Err:
			default:
			}
		}
		return
	}
	if ev.Kind != link.Disconnected {
		return
	}
	m.mu.Lock()
	held := m.neurons[id] == n
	st := n.state.Copy()
	m.mu.Unlock()
	if !held {
		return // not held yet (a create in progress handles it) or already let go
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// A dying agent closes its sockets before it is gone: give it a moment.
		step, tries := 5*time.Millisecond, 100
		if m.tracker() != nil {
			step, tries = 100*time.Millisecond, 10 // each look asks the daemon
		}
		for i := 0; i < tries && m.alive(st); i++ {
			time.Sleep(step)
		}
		if m.alive(st) {
			return // alive: it redials (or Connect will say it cannot)
		}
		buried := make(chan struct{})
		m.mu.Lock()
		mine := m.neurons[id] == n
		if mine {
			delete(m.neurons, id)
			m.burying[id] = buried
		}
		m.mu.Unlock()
		if !mine {
			return // not held yet (a create in progress handles it) or already let go
		}
		defer func() {
			m.mu.Lock()
			if m.burying[id] == buried {
				delete(m.burying, id)
			}
			m.mu.Unlock()
			close(buried)
		}()
		n.link.Close()
		m.releaseDead(id, n.lock)
		n.lock.Release()
	}()
}

// releaseDead frees the state file and channel directory of a neuron whose
// agent died, unless another process is in the middle of creating it. lock
// is the neuron's lock as this process holds it (or an unheld one).
func (m *Manager) releaseDead(id string, lock *store.Lock) {
	if _, ok := m.pausedToDisk(id); ok {
		return // its VMM exited for the pause
	}
	st, err := m.readState(id)
	if err != nil || m.alive(st) {
		return
	}
	if lock.Held() == unix.LOCK_EX {
		m.buryDead(id, st)
		return
	}
	if ok, _ := lock.TryExclusive(); ok {
		m.buryDead(id, st)
	}
}

// buryDead clears away a neuron whose agent died unasked, and records it
// (once: the state file it reads goes with it).
func (m *Manager) buryDead(id string, st *sandbox.State) {
	oom := m.oomKilled(id, st)
	m.stop(id, st)
	m.clear(id)
	st.Status = sandbox.StatusStopped
	m.readSpec(id).fill(st)
	if isWarm(id) {
		m.discardWarm(id) // no one's yet: nothing of it is kept
		return
	}
	ctx := context.Background()
	if st.Pending {
		return // a create that failed says so itself
	}
	if oom != "" {
		m.event(ctx, events.OOMKilled, st, oom)
	}
	m.event(ctx, events.AgentDied, st, "its agent ended without being asked")
}

// OOMReporter is implemented by runtimes that can tell whether the kernel
// killed processes of a neuron for memory.
type OOMReporter interface {
	// OOMKills returns how many processes of neuron id the kernel killed
	// for memory in its current run.
	OOMKills(lay layout.Layout, id string) int64
}

// oomKilled says how the kernel's OOM killer hit a neuron, or "".
func (m *Manager) oomKilled(id string, st *sandbox.State) string {
	r, ok := m.rt.(OOMReporter)
	if !ok {
		return ""
	}
	if n := r.OOMKills(m.lay, id); n > 0 {
		return fmt.Sprintf("the kernel killed %d of its processes for memory", n)
	}
	return ""
}

// clear removes a neuron's state file and channel directory (not its
// data), and lets the runtime free what it held for the neuron.
func (m *Manager) clear(id string) {
	m.unlinkWarm(id)
	os.Remove(m.stateFile(id))
	os.Remove(m.pausedFile(id))
	os.RemoveAll(m.socketDir(id))
	m.rt.Released(m.lay, id)
}

// kill ends agent pid (if it is still the process that started at start):
// SIGTERM lets it end its children, SIGKILL follows after a grace period.
// Then whatever the agent's commands left behind is killed too (bury), so
// neither a forced kill nor an agent that died earlier leaves them running.
func (m *Manager) kill(id string, pid int, start uint64) {
	defer m.bury(id, pid)
	if !store.Alive(pid, start) {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if !store.Alive(pid, start) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 200 && store.Alive(pid, start); i++ {
		time.Sleep(5 * time.Millisecond)
	}
}

// bury kills the processes a dead agent of neuron id left behind: the
// members of the session it led that carry the neuron's mark in their
// environment (both checks, so a reused pid never costs a stranger).
func (m *Manager) bury(id string, agentPID int) {
	if agentPID <= 0 {
		return
	}
	mark := "NSYS_CORTEX_NEURON=" + id
	for _, p := range store.SessionMembers(agentPID) {
		if store.HasEnv(p, mark) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}
