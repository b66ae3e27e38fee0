package lifecycle

import (
	"context"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// tracker returns the runtime's Tracker, if it has one.
func (m *Manager) tracker() Tracker {
	t, _ := m.rt.(Tracker)
	return t
}

// aliveKnown reports whether the neuron st describes runs, and whether
// that could be told at all.
func (m *Manager) aliveKnown(st *sandbox.State) (alive, known bool) {
	if t := m.tracker(); t != nil {
		ok, err := t.Alive(m.lay, st)
		return ok, err == nil
	}
	return store.Alive(st.PID, st.PIDStart), true
}

// alive reports whether the neuron st describes runs; when that cannot be
// told it counts as running, so that nothing that may run is cleared away.
func (m *Manager) alive(st *sandbox.State) bool {
	ok, known := m.aliveKnown(st)
	return ok || !known
}

// runs reports whether the neuron st describes runs, or is paused to disk
// (its VMM gone, its run not over).
func (m *Manager) runs(st *sandbox.State) bool {
	if _, ok := m.pausedToDisk(st.ID); ok {
		return true
	}
	return m.alive(st)
}

// stop ends the neuron st describes, and what it left behind.
func (m *Manager) stop(id string, st *sandbox.State) {
	if t := m.tracker(); t != nil {
		t.Stop(m.lay, id, st)
		return
	}
	m.kill(id, st.PID, st.PIDStart)
}

// running lists this home's running neurons of this mode that the state
// files may not know.
func (m *Manager) running() []Running {
	if t := m.tracker(); t != nil {
		r, _ := t.Running(m.lay) // unanswered: nothing to add to what the state files say
		return r
	}
	var out []Running
	for _, ap := range store.FindAgents(m.lay.SocketsDir()) {
		if ap.ChannelDir != m.socketDir(ap.ID) {
			continue
		}
		if isWarm(ap.ID) {
			// A warm neuron claimed since it started (warm.go).
			if id, ok := m.claimedAs(ap.ID); ok {
				ap.ID = id
			}
		}
		out = append(out, Running{ID: ap.ID, PID: ap.PID})
	}
	return out
}

// stopRunning ends a neuron found by running.
func (m *Manager) stopRunning(r Running) {
	if t := m.tracker(); t != nil {
		t.Stop(m.lay, r.ID, &sandbox.State{ID: r.ID, PID: r.PID})
		return
	}
	m.kill(r.ID, r.PID, 0)
}

// watch returns a channel closed when the neuron st describes ends (or
// ctx does): the agent's process when this process started it (exited),
// else its pid, else the tracker's view, asked every 250 ms.
func (m *Manager) watch(ctx context.Context, exited chan struct{}, st *sandbox.State) <-chan struct{} {
	if exited != nil {
		return exited
	}
	if m.tracker() == nil {
		return watchPID(ctx, st.PID)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			if ok, known := m.aliveKnown(st); known && !ok {
				return
			}
		}
	}()
	return done
}
