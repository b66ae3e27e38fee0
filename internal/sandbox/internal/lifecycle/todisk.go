package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Pause to disk (docs/lifecycle.md): a microVM's whole machine is saved
// and its VMM exits, freeing its memory. The neuron stays paused: its
// pause record says toDisk, and every process that looks at it takes the
// VMM's absence for the pause, not for its death (inspectRun, releaseDead).
// Resume is a create whose start loads the saved machine instead of
// booting, continuing the same run (its start time, deadline and idle
// rule); a resume that fails leaves it paused, for another try or a
// destroy, which discards the saved machine.

// DiskPauser is implemented by runtimes that can save a whole running
// machine to disk, let its VMM exit, and bring it back. What they save is
// a host record under the neuron's overlay directory (a dot name), never
// in a snapshot, gone with a wipe.
type DiskPauser interface {
	// SaveMachine saves running neuron id whole (memory, devices, disks)
	// and ends its VMM. On an error the neuron runs on as it was, or has
	// ended (the lifecycle then finds it dead).
	SaveMachine(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error
	// LoadMachine readies the next Start of neuron id to resume what
	// SaveMachine saved instead of booting. The lifecycle then runs that
	// start as a create does and calls done with its outcome: on success
	// the runtime finishes the resume (the guest's clock and RNG) and
	// deletes what was saved; on failure it keeps it.
	LoadMachine(ctx context.Context, lay layout.Layout, id string) (done func(ctx context.Context, started error) error, err error)
	// DiscardMachine deletes what SaveMachine saved of neuron id, if
	// anything.
	DiscardMachine(lay layout.Layout, id string)
}

// GuestMeter is implemented by runtimes whose neurons run a kernel of
// their own: the host sees their VMM (the runtime's Meter), and only the
// guest's agent can say what runs inside and how much of its memory it
// uses. While the neuron runs, never while it is paused, the lifecycle
// asks the agent with a quiet request (no resume, no activity) and hands
// the answer to GuestUsage to fold into the VMM's figures.
type GuestMeter interface {
	GuestUsage(u *sandbox.Metrics, guest *protocol.SystemUsage)
}

// guestWait bounds the quiet request for a guest's usage: an agent that
// does not answer in time (a pause that came in between) leaves the
// host's figures alone. guestEvery is how long an answer is reused: the
// request costs the guest CPU, which its VMM's figure (what auto-pause
// reads, every second) would count.
const (
	guestWait  = 2 * time.Second
	guestEvery = 10 * time.Second
)

type guestReading struct {
	at    time.Time
	pid   int // the VMM's: a new run is asked afresh
	usage *protocol.SystemUsage
}

// guestUsage asks running neuron st's agent about its system, quietly, at
// most every guestEvery.
func (m *Manager) guestUsage(ctx context.Context, st *sandbox.State) (*protocol.SystemUsage, error) {
	m.mu.Lock()
	r, ok := m.guests[st.ID]
	m.mu.Unlock()
	if ok && r.pid == st.PID && time.Since(r.at) < guestEvery {
		return r.usage, nil
	}
	ctx, cancel := context.WithTimeout(link.Quiet(ctx), guestWait)
	defer cancel()
	c, err := m.Connect(ctx, st.ID)
	if err != nil {
		return nil, err
	}
	h, err := c.Usage(ctx)
	if err != nil {
		return nil, err
	}
	if h.Usage == nil {
		return nil, fmt.Errorf("its agent (%s) is too old to report its system's use", h.Version)
	}
	m.mu.Lock()
	m.guests[st.ID] = guestReading{at: time.Now(), pid: st.PID, usage: h.Usage}
	m.mu.Unlock()
	return h.Usage, nil
}

// pausedToDisk returns neuron id's pause record when it is paused to disk.
func (m *Manager) pausedToDisk(id string) (pauseRecord, bool) {
	var p pauseRecord
	err := store.ReadJSON(m.pausedFile(id), &p)
	return p, err == nil && p.ToDisk
}

// pauseToDisk saves running neuron st whole and lets its VMM exit (the
// record lock held). The pause record comes first: from then on the VMM's
// exit is the pause, to every process that sees it, and not a death.
func (m *Manager) pauseToDisk(ctx context.Context, dp DiskPauser, st *sandbox.State, rec pauseRecord) error {
	id := st.ID
	if err := store.WriteJSON(m.pausedFile(id), &rec, 0o600); err != nil {
		return fmt.Errorf("pausing %s: %w", id, err)
	}
	if err := dp.SaveMachine(ctx, m.lay, id, st); err != nil {
		os.Remove(m.pausedFile(id)) // it runs on, or is found dead at the next look
		if !m.alive(st) {
			dp.DiscardMachine(m.lay, id)
		}
		return fmt.Errorf("pausing %s to disk: %w", id, err)
	}
	m.letGo(id)
	return nil
}

// letGo drops this process's hold of neuron id, whose VMM exited without
// the neuron ending: its channel and its share of the lock.
func (m *Manager) letGo(id string) {
	m.mu.Lock()
	n := m.neurons[id]
	delete(m.neurons, id)
	m.mu.Unlock()
	if n == nil {
		return
	}
	n.link.Close()
	if n.lock.Held() == syscall.LOCK_EX && m.env.Exclusive {
		os.Remove(filepath.Join(m.overlay(id), ".owner"))
	}
	n.lock.Release()
}

// resumeFromDisk starts neuron st again from the machine it was saved as
// (the record lock held). If that fails its records are put back: it
// stays paused.
func (m *Manager) resumeFromDisk(ctx context.Context, st *sandbox.State, rec pauseRecord) error {
	id := st.ID
	dp, ok := m.rt.(DiskPauser)
	if !ok {
		return &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "resume from disk", Reason: "its pause record says it was paused to disk, which this mode cannot do"}
	}
	run, err := m.readState(id)
	if err != nil {
		return fmt.Errorf("resuming %s: its state: %w", id, err)
	}
	bin, err := m.env.AgentBinary()
	if err != nil {
		return &sandbox.UnavailableError{Mode: m.rt.Mode(), Reason: err.Error()}
	}
	lock := m.lockFor(id)
	got, err := lock.TryExclusive()
	// Hosts that held it let go as they see its VMM gone: give them a moment.
	for i := 0; err == nil && !got && i < 50; i++ {
		time.Sleep(10 * time.Millisecond)
		got, err = lock.TryExclusive()
	}
	if err != nil || !got {
		lock.Release()
		if err == nil {
			err = &sandbox.OwnedElsewhereError{ID: id, Owner: readOwner(m.overlay(id)), Reason: "another process holds it, so it cannot be started from disk here"}
		}
		return err
	}
	defer m.markStarting(id)()
	done, err := dp.LoadMachine(ctx, m.lay, id)
	if err != nil {
		lock.Release()
		return fmt.Errorf("resuming %s from disk: %w", id, err)
	}
	_, err = m.create(ctx, id, bin, lock, optionsOf(run), run)
	if derr := done(ctx, err); derr != nil && err == nil {
		m.Logf(id, "resumed from disk, but: %v", derr)
	}
	if err != nil {
		m.writeState(run)                              // best effort: without it, it reads stopped
		store.WriteJSON(m.pausedFile(id), &rec, 0o600) // and without this, dead
		lock.Release()
		return fmt.Errorf("resuming %s from disk: %w (it stays paused: resume it again, or destroy it, which discards the saved machine)", id, err)
	}
	return nil
}

// optionsOf is the create that runs neuron st again as it ran: its policy
// (its environment is in the saved machine's memory already).
func optionsOf(st *sandbox.State) sandbox.CreateOptions {
	var o sandbox.CreateOptions
	if p := st.Policy; p != nil {
		o.Network, o.Limits, o.Image, o.NestedUserns = p.Network, p.Limits, p.Image, p.NestedUserns
	}
	return o
}
