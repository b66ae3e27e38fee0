package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/session"
)

// SessionStore keeps chat sessions beyond one daemon's home, so that every
// replica of a deployment serves the same sessions and a replica whose
// home goes (a new pod) loses none: kube mode keeps them in Secrets of
// its namespace (kube.chat_sessions). A daemon keeps a copy of each
// session it serves in its home, which the chat runtime works on. A
// session's generation counts its saves: a daemon fetches the store's
// copy whenever the one in its home is of another generation, holds a
// session while a request changes it, and saves it when the request is
// done (docs/sessions.md, "Sessions in the cluster").
type SessionStore interface {
	// Generation is session id's generation in the store; NOT_FOUND when
	// the store has no session id.
	Generation(ctx context.Context, id string) (int64, error)
	// Hold takes session id for a change through this daemon, until Save
	// or Release, or until the hold lapses (the store's time, a minute,
	// unless held again), and returns its generation; BUSY while another
	// daemon holds it, NOT_FOUND when the store has none.
	Hold(ctx context.Context, id string) (int64, error)
	// Release ends this daemon's hold of id.
	Release(ctx context.Context, id string) error
	// Load returns session id's file and its generation.
	Load(ctx context.Context, id string) ([]byte, int64, error)
	// Save stores file as session id in place of generation gen (0: the
	// store has none), with info (JSON, for lists), ends this daemon's
	// hold, and returns the new generation: BUSY when another daemon
	// holds id or saved it since gen.
	Save(ctx context.Context, id string, file, info []byte, gen int64) (int64, error)
	// List returns the info of each session the store holds, by id.
	List(ctx context.Context) (map[string][]byte, error)
	// Delete removes session id: BUSY while another daemon holds it.
	Delete(ctx context.Context, id string) error
}

// renewHold is how often a request holding a session holds it again.
const renewHold = 20 * time.Second

// stamp is what a session file was like when it was last fetched or
// saved: a file whose stamp changed was changed here.
type stamp struct {
	gen  int64
	size int64
	mod  time.Time
}

// chatSync is what a daemon with a SessionStore knows of it.
type chatSync struct {
	st       SessionStore
	mu       sync.Mutex
	stamps   map[string]stamp
	changing map[string]bool // sessions a request of this daemon is changing
}

func newChatSync(st SessionStore) *chatSync {
	return &chatSync{st: st, stamps: map[string]stamp{}, changing: map[string]bool{}}
}

func (cs *chatSync) known(id string) stamp {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.stamps[id]
}

// begin marks id as being changed here; false: a change is under way.
func (cs *chatSync) begin(id string) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.changing[id] {
		return false
	}
	cs.changing[id] = true
	return true
}

func (cs *chatSync) end(id string) {
	cs.mu.Lock()
	delete(cs.changing, id)
	cs.mu.Unlock()
}

// note records what id's file in mgr is now, of generation gen.
func (cs *chatSync) note(mgr *session.Manager, id string, gen int64) {
	st := stamp{gen: gen}
	if in, err := infoOf(mgr, id); err == nil {
		st.size, st.mod = in.Size, in.Modified
	}
	cs.mu.Lock()
	cs.stamps[id] = st
	cs.mu.Unlock()
}

func (cs *chatSync) forget(id string) {
	cs.mu.Lock()
	delete(cs.stamps, id)
	cs.mu.Unlock()
}

// infoOf describes session id of mgr.
func infoOf(mgr *session.Manager, id string) (session.Info, error) {
	all, err := mgr.List()
	if err != nil {
		return session.Info{}, err
	}
	for _, in := range all {
		if in.ID == id {
			return in, in.Err
		}
	}
	return session.Info{}, fmt.Errorf("session %s: %w", id, session.ErrNotFound)
}

// chatUse is one request's use of a session through the store: what it
// holds, and what its home's sessions were like when it began.
type chatUse struct {
	s      *Server
	id     string
	held   bool
	before map[string]session.Info
	stop   func() // ends the renewal of the hold
}

// syncIn readies session id for a request: held, when the request changes
// it, and fetched from the store when this daemon's copy is not the
// store's latest. nil, nil: the daemon keeps no store.
func (s *Server) syncIn(ctx context.Context, id string, change bool) (*chatUse, error) {
	cs := s.chatSync
	if cs == nil {
		return nil, nil
	}
	if change && !cs.begin(id) {
		return nil, chatError(fmt.Errorf("session %s: %w", id, chatrun.ErrBusy))
	}
	u := &chatUse{s: s, id: id, stop: func() {}}
	fail := func(err error) (*chatUse, error) {
		u.finish(context.WithoutCancel(ctx))
		return nil, err
	}
	var gen int64
	var err error
	if change {
		gen, err = cs.st.Hold(ctx, id)
		u.held = err == nil
	} else {
		gen, err = cs.st.Generation(ctx, id)
	}
	mgr := session.ForLayout(s.opts.Chat.Host.Layout)
	switch {
	case errdefs.IsNotFound(err):
		if cs.known(id).gen > 0 {
			// It was in the store, and is no more: removed through
			// another daemon.
			s.dropChat(mgr, id)
			return fail(cortex.APIError{Code: cortex.CodeNotFound, Message: fmt.Sprintf("session %s was removed (through another replica)", id)})
		}
		// This daemon's alone, if it has it: a change saves it.
	case err != nil:
		return fail(err)
	case gen != cs.known(id).gen:
		if err := s.fetchChat(ctx, mgr, id, change); err != nil {
			return fail(err)
		}
	}
	if change {
		u.before = map[string]session.Info{}
		all, err := mgr.List()
		if err != nil {
			return fail(err)
		}
		for _, in := range all {
			u.before[in.ID] = in
		}
		if u.held {
			u.stop = u.renew(ctx)
		}
	}
	return u, nil
}

// renew holds u's session again every renewHold until the returned
// function is called.
func (u *chatUse) renew(ctx context.Context) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(renewHold)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renewHold)
				if _, err := u.s.chatSync.st.Hold(rctx, u.id); err != nil {
					u.s.log.Warn("holding a chat session again", "session", u.id, "err", err)
				}
				cancel()
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
	}
}

// fetchChat replaces this daemon's copy of session id with the store's,
// closing the runner that held the old one. A change refuses while
// another request here uses the session; a read goes on with the copy
// it has.
func (s *Server) fetchChat(ctx context.Context, mgr *session.Manager, id string, change bool) error {
	s.chats.opening.Lock()
	defer s.chats.opening.Unlock()
	s.chats.mu.Lock()
	c := s.chats.open[id]
	if c != nil && c.users > 0 {
		s.chats.mu.Unlock()
		if !change {
			return nil
		}
		return chatError(fmt.Errorf("session %s changed through another replica while a request here uses it: %w", id, chatrun.ErrBusy))
	}
	delete(s.chats.open, id)
	s.chats.mu.Unlock()
	if c != nil {
		c.closed = true
		if err := c.r.Close(); err != nil {
			s.log.Warn("closing a chat session to fetch it again", "session", id, "err", err)
		}
	}
	data, gen, err := s.chatSync.st.Load(ctx, id)
	if err != nil {
		return err
	}
	if err := mgr.Import(id, data); err != nil {
		return fmt.Errorf("the cluster's copy of session %s: %w", id, err)
	}
	s.chatSync.note(mgr, id, gen)
	return nil
}

// dropChat removes this daemon's copy of session id (the store's is gone).
func (s *Server) dropChat(mgr *session.Manager, id string) {
	s.chats.opening.Lock()
	defer s.chats.opening.Unlock()
	s.chats.mu.Lock()
	c := s.chats.open[id]
	if c != nil && c.users == 0 {
		delete(s.chats.open, id)
		c.closed = true
	} else {
		c = nil
	}
	s.chats.mu.Unlock()
	if c != nil {
		c.r.Close()
	}
	if err := mgr.Delete(id); err != nil && !errors.Is(err, session.ErrNotFound) {
		s.log.Warn("removing a chat session removed through another replica", "session", id, "err", err)
	}
	s.chatSync.forget(id)
}

// finish ends u: every session file of the home that the request changed
// or made (the session, a fork, a sub-agent's) is saved to the store, and
// the hold ended. An error says what could not be saved: it stays in this
// daemon's home.
func (u *chatUse) finish(ctx context.Context) error {
	if u == nil {
		return nil
	}
	u.stop()
	cs := u.s.chatSync
	defer cs.end(u.id)
	var errs []error
	saved := false
	if u.before != nil {
		mgr := session.ForLayout(u.s.opts.Chat.Host.Layout)
		all, err := mgr.List()
		if err != nil {
			errs = append(errs, err)
		}
		for _, in := range all {
			if in.Err != nil {
				continue
			}
			was, had := u.before[in.ID]
			if had && was.Size == in.Size && was.Modified.Equal(in.Modified) {
				continue
			}
			if err := u.s.saveChat(ctx, mgr, in); err != nil {
				errs = append(errs, fmt.Errorf("session %s is kept in this replica's home only: %w", in.ID, err))
			} else if in.ID == u.id {
				saved = true
			}
		}
	}
	if u.held && !saved {
		if err := cs.st.Release(ctx, u.id); err != nil && !errdefs.IsNotFound(err) {
			u.s.log.Warn("releasing a chat session", "session", u.id, "err", err)
		}
	}
	return errors.Join(errs...)
}

// saveChat stores session in of mgr, in place of the generation this
// daemon last had of it.
func (s *Server) saveChat(ctx context.Context, mgr *session.Manager, in session.Info) error {
	cs := s.chatSync
	data, _, err := mgr.Export(in.ID)
	if err != nil {
		return err
	}
	info, err := json.Marshal(cortex.Session{ID: in.ID, Title: in.Title, Neuron: in.Neuron, Agent: in.Agent, Provider: in.Provider,
		Model: in.Model, Created: in.Created, Modified: in.Modified, Entries: in.Entries, ParentSession: in.ParentSession})
	if err != nil {
		return err
	}
	gen, err := cs.st.Save(ctx, in.ID, data, info, cs.known(in.ID).gen)
	if err != nil {
		return err
	}
	cs.note(mgr, in.ID, gen)
	return nil
}

// saveNew saves session r, just made, to the store. One that cannot be
// saved is closed and removed, so that no replica serves a session the
// others never see.
func (s *Server) saveNew(ctx context.Context, r *chatrun.Runner) error {
	if s.chatSync == nil {
		return nil
	}
	mgr := session.ForLayout(s.opts.Chat.Host.Layout)
	in, err := infoOf(mgr, r.ID())
	if err == nil {
		err = s.saveChat(ctx, mgr, in)
	}
	if err != nil {
		r.Close()
		if derr := mgr.Delete(r.ID()); derr != nil {
			s.log.Warn("removing a session the store refused", "session", r.ID(), "err", derr)
		}
		s.chatSync.forget(r.ID())
		return fmt.Errorf("the new session could not be kept in the cluster, so it is not made: %w", err)
	}
	return nil
}

// storedSessions adds to list (this daemon's sessions) the store's:
// the store's word for each session it holds, as it is the latest saved.
func (s *Server) storedSessions(ctx context.Context, list []cortex.Session) ([]cortex.Session, error) {
	if s.chatSync == nil {
		return list, nil
	}
	stored, err := s.chatSync.st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cortex.Session, 0, len(list)+len(stored))
	open := map[string]bool{}
	for _, ls := range list {
		open[ls.ID] = ls.Open
		if _, in := stored[ls.ID]; !in {
			out = append(out, ls)
		}
	}
	for id, raw := range stored {
		var cs cortex.Session
		if err := json.Unmarshal(raw, &cs); err != nil || cs.ID != id || session.ValidateID(id) != nil {
			s.log.Warn("a stored chat session's description is damaged", "session", id, "err", err)
			cs = cortex.Session{ID: id}
			if session.ValidateID(id) != nil {
				continue
			}
		}
		cs.Open = open[id]
		out = append(out, cs)
	}
	slices.SortStableFunc(out, func(a, b cortex.Session) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}
