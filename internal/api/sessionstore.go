package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/loop"
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
	// or Release, or until the hold lapses (a minute, unless held again),
	// and returns its generation; BUSY while another daemon holds it,
	// NOT_FOUND when the store has none, TOO_LARGE when it can take no
	// more.
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
var renewHold = 20 * time.Second

// generationsFile keeps, in the sessions directory, the generation of
// each session this home's copy is of, so that a daemon started again on
// the same home tells a session removed through another replica from
// one that was never stored. Its name is no session's (ids do not start
// with '.').
const generationsFile = ".store-generations.json"

// stamp is what a session file was like when it was last fetched or
// saved: a file whose stamp changed since was changed here.
type stamp struct {
	gen  int64
	size int64
	mod  time.Time
}

// chatSync is what a daemon with a SessionStore knows of it.
type chatSync struct {
	st       SessionStore
	dir      string // the sessions directory
	mu       sync.Mutex
	loaded   bool
	stamps   map[string]stamp
	changing map[string]bool // sessions a request of this daemon is changing
	// damaged says why the generations this home recorded cannot be
	// read: a copy the store does not have may then have been removed
	// through another replica, or never saved.
	damaged error
}

func newChatSync(st SessionStore, dir string) *chatSync {
	return &chatSync{st: st, dir: dir, stamps: map[string]stamp{}, changing: map[string]bool{}}
}

// load reads the generations a previous daemon on this home recorded
// (cs.mu held).
func (cs *chatSync) load() {
	if cs.loaded {
		return
	}
	cs.loaded = true
	path := filepath.Join(cs.dir, generationsFile)
	if _, err := os.Stat(path + ".damaged"); err == nil {
		cs.damaged = fmt.Errorf("%s.damaged is there", path)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var gens map[string]int64
	if err == nil {
		err = json.Unmarshal(b, &gens)
	}
	if err != nil {
		// Kept aside, so that a daemon started again knows it too.
		cs.damaged = fmt.Errorf("%s: %v", path, err)
		os.Rename(path, path+".damaged")
		return
	}
	for id, g := range gens {
		if session.ValidateID(id) == nil && g > 0 {
			cs.stamps[id] = stamp{gen: g}
		}
	}
}

// persist writes the generations down (cs.mu held).
func (cs *chatSync) persist() error {
	gens := map[string]int64{}
	for id, st := range cs.stamps {
		if st.gen > 0 {
			gens[id] = st.gen
		}
	}
	b, _ := json.Marshal(gens)
	if err := os.MkdirAll(cs.dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(cs.dir, generationsFile+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(cs.dir, generationsFile)); err != nil {
		return err
	}
	if d, err := os.Open(cs.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// unsure says why the home's record of generations cannot be trusted
// (nil: it can).
func (cs *chatSync) unsure() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
	return cs.damaged
}

func (cs *chatSync) known(id string) stamp {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
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

// note records that session id's file in mgr is now of generation gen.
func (cs *chatSync) note(mgr *session.Manager, id string, gen int64) error {
	st := stamp{gen: gen}
	if in, err := mgr.Info(id); err == nil {
		st.size, st.mod = in.Size, in.Modified
	}
	return cs.noteAs(id, st)
}

// noteAs records st for session id.
func (cs *chatSync) noteAs(id string, st stamp) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
	cs.stamps[id] = st
	return cs.persist()
}

func (cs *chatSync) forget(id string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.load()
	delete(cs.stamps, id)
	return cs.persist()
}

// changedHere reports whether session in was changed in this home since
// it was last fetched or saved (or was never either).
func (cs *chatSync) changedHere(in session.Info) bool {
	st := cs.known(in.ID)
	return st.size != in.Size || !st.mod.Equal(in.Modified)
}

// chatUse is one request's use of a session through the store.
type chatUse struct {
	s      *Server
	id     string
	change bool // the request changes the session: it began it here
	// aborted: refused before it began; its end saves nothing.
	aborted bool
	rn      *chatrun.Runner // the request's runner, once it has one
	lost    chan struct{}
	stop    func() // ends the renewal of the holds
	once    sync.Once
	err     error

	mu sync.Mutex
	// begun are the sessions this request began here (its own, and
	// those its agent writes to: Router.Acquire), with the generation
	// it holds of each in the store (0: the store has none).
	begun map[string]int64
}

// useKey carries a request's chatUse in its context, for the
// sessions_send tool's Acquire.
type useKey struct{}

// hold holds session id in the store for a change through this daemon.
// A hold the store may have taken though it answered an error (the
// reply lost) is released, so that no other replica waits on it.
func (cs *chatSync) hold(ctx context.Context, log interface {
	Warn(string, ...any)
}, id string) (int64, error) {
	gen, err := cs.st.Hold(ctx, id)
	if err != nil && !errdefs.Of(err).Is(errdefs.Busy) && !errdefs.IsNotFound(err) && !errdefs.IsTooLarge(err) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if rerr := cs.st.Release(rctx, id); rerr != nil && !errdefs.IsNotFound(rerr) {
			log.Warn("releasing a chat session after a failed hold", "session", id, "err", rerr)
		}
		cancel()
	}
	return gen, err
}

// syncIn readies session id for a request: held, when the request changes
// it, and fetched from the store when this daemon's copy is not the
// store's latest. nil, nil: the daemon keeps no store. finish the use
// (once it is not nil) when the request is done.
func (s *Server) syncIn(ctx context.Context, id string, change bool) (*chatUse, error) {
	cs := s.chatSync
	if cs == nil {
		return nil, nil
	}
	if change && !cs.begin(id) {
		return nil, chatError(fmt.Errorf("session %s: %w", id, chatrun.ErrBusy))
	}
	u := &chatUse{s: s, id: id, change: change, lost: make(chan struct{}), stop: func() {}, begun: map[string]int64{}}
	fail := func(err error) (*chatUse, error) {
		u.aborted = true // nothing of it is saved
		u.finish(context.WithoutCancel(ctx), nil)
		return nil, err
	}
	if change {
		u.begun[id] = 0
	}
	var gen int64
	var err error
	if change {
		if gen, err = cs.hold(ctx, s.log, id); err == nil {
			u.begun[id] = gen
		}
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
		if d := cs.unsure(); d != nil {
			if _, err := mgr.Info(id); err == nil {
				return fail(errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s is in this replica's home and not in the cluster, and whether it was removed through another replica cannot be told: %v "+
					"(remove the session, or remove that file to take every such copy for one never saved)", id, d)))
			}
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
		u.stop = u.renew(ctx)
	}
	return u, nil
}

// acquireRouted is the sessions_send tool's Router.Acquire: the session
// its agent is about to write to is begun and held by the request the
// agent runs in, as the request's own session is, and fetched when this
// replica's copy is stale (open in the router: ErrStale, which closes
// it first).
func (s *Server) acquireRouted(ctx context.Context, id string, open bool) error {
	u, _ := ctx.Value(useKey{}).(*chatUse)
	if u == nil || !u.change {
		return errors.New("sessions_send outside a request that changes its session")
	}
	cs := s.chatSync
	if id == u.id || u.rn != nil && id == u.rn.ID() {
		return errdefs.New(errdefs.Invalid, fmt.Sprintf("session %s is this agent's own", id))
	}
	mgr := session.ForLayout(s.opts.Chat.Host.Layout)
	u.mu.Lock()
	gen, begun := u.begun[id]
	u.mu.Unlock()
	if !begun {
		if !cs.begin(id) {
			return chatError(fmt.Errorf("session %s is being changed through this replica: %w", id, chatrun.ErrBusy))
		}
		g, err := cs.hold(ctx, s.log, id)
		switch {
		case errdefs.IsNotFound(err) && cs.known(id).gen > 0:
			cs.end(id)
			s.dropChat(mgr, id)
			return errdefs.New(errdefs.NotFound, fmt.Sprintf("session %s was removed (through another replica)", id))
		case errdefs.IsNotFound(err) && cs.unsure() != nil:
			cs.end(id)
			return errdefs.New(errdefs.Unavailable, fmt.Sprintf("session %s is not in the cluster, and whether it was removed through another replica cannot be told: %v", id, cs.unsure()))
		case errdefs.IsNotFound(err):
			g = 0 // this daemon's alone: saved as new
		case err != nil:
			cs.end(id)
			return err
		}
		u.mu.Lock()
		u.begun[id] = g
		u.mu.Unlock()
		gen = g
	}
	if gen == 0 || gen == cs.known(id).gen {
		return nil
	}
	if open {
		return loop.ErrStale
	}
	return s.fetchChat(ctx, mgr, id, true)
}

// context is ctx, ended when the request's hold of its session is lost
// (taken by another replica after it lapsed): what the request goes on
// to do could not be saved. Call the function returned when done.
func (u *chatUse) context(ctx context.Context) (context.Context, func()) {
	if u == nil || !u.change {
		return ctx, func() {}
	}
	c, cancel := context.WithCancelCause(context.WithValue(ctx, useKey{}, u))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-u.lost:
			cancel(errdefs.New(errdefs.Busy, fmt.Sprintf("session %s was taken by another replica: this replica lost its hold of it", u.id)))
		case <-stop:
		case <-c.Done():
		}
	})
	return c, func() {
		close(stop)
		wg.Wait()
		cancel(nil)
	}
}

// renew holds u's session again every renewHold until the returned
// function is called; a hold lost (another replica holds the session,
// or saved it) closes u.lost.
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
				u.mu.Lock()
				held := maps.Clone(u.begun)
				u.mu.Unlock()
				for id, want := range held {
					if want == 0 {
						continue // not in the store
					}
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), renewHold)
					gen, err := u.s.chatSync.st.Hold(rctx, id)
					cancel()
					switch {
					case err == nil && gen == want:
					case err == nil, errdefs.Of(err).Is(errdefs.Busy), errdefs.IsNotFound(err):
						// Another replica held it after the hold lapsed,
						// or saved or removed it since.
						u.s.log.Warn("a chat session's hold was lost", "session", id, "generation", gen, "err", err)
						close(u.lost)
						return
					default:
						u.s.log.Warn("holding a chat session again", "session", id, "err", err)
					}
				}
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
	data, gen, err := s.chatSync.st.Load(ctx, id)
	if err != nil {
		return err
	}
	s.chats.opening.Lock()
	defer s.chats.opening.Unlock()
	// A request here uses the session: not replaced under it. (An agent
	// that keeps it open, another session's, finds its copy stale and
	// opens it again before it writes: Router.send.)
	s.chats.mu.Lock()
	c := s.chats.open[id]
	if c != nil && c.users > 0 {
		s.chats.mu.Unlock()
		if !change {
			return nil
		}
		return chatError(fmt.Errorf("session %s changed through another replica while this replica uses it: %w", id, chatrun.ErrBusy))
	}
	delete(s.chats.open, id)
	s.chats.mu.Unlock()
	if c != nil {
		c.closed = true
		if err := c.r.Close(); err != nil {
			s.log.Warn("closing a chat session to fetch it again", "session", id, "err", err)
		}
	}
	if err := mgr.Import(id, data); err != nil {
		return fmt.Errorf("the cluster's copy of session %s: %w", id, err)
	}
	return s.chatSync.note(mgr, id, gen)
}

// dropChat removes this daemon's copy of session id (the store's is gone).
func (s *Server) dropChat(mgr *session.Manager, id string) {
	s.chats.opening.Lock()
	defer s.chats.opening.Unlock()
	// Out of the open sessions at once; closed now, or by the last
	// request that uses it (releaseChat), whose changes are refused: its
	// file is gone.
	s.chats.mu.Lock()
	c := s.chats.open[id]
	if c != nil {
		delete(s.chats.open, id)
		c.closed = true
		if c.users > 0 {
			c = nil
		}
	}
	s.chats.mu.Unlock()
	if c != nil {
		c.r.Close()
	}
	if err := mgr.Delete(id); err != nil && !errors.Is(err, session.ErrNotFound) {
		s.log.Warn("removing a chat session removed through another replica", "session", id, "err", err)
	}
	if err := s.chatSync.forget(id); err != nil {
		s.log.Warn("recording the chat sessions' generations", "err", err)
	}
}

// finish ends u, once (later calls return the first's answer): a change
// saves what it changed (the session, or its fork, and the sessions its
// agent started or talked to, when no other request here is changing
// them) and ends its hold. rn is the request's runner (nil: it had
// none). An error says what could not be saved: it stays in this
// daemon's home.
func (u *chatUse) finish(ctx context.Context, rn *chatrun.Runner) error {
	if u == nil {
		return nil
	}
	u.once.Do(func() { u.err = u.doFinish(ctx, rn) })
	return u.err
}

func (u *chatUse) doFinish(ctx context.Context, rn *chatrun.Runner) error {
	if !u.change {
		return nil
	}
	u.stop()
	cs := u.s.chatSync
	mgr := session.ForLayout(u.s.opts.Chat.Host.Layout)
	u.mu.Lock()
	begun := maps.Clone(u.begun)
	u.mu.Unlock()
	var errs []error
	save := func(id string, mustExist bool) bool {
		if u.aborted {
			return false
		}
		in, err := mgr.Info(id)
		switch {
		case errors.Is(err, session.ErrNotFound) && !mustExist:
			return false
		case err == nil && !cs.changedHere(in):
			return false
		case err == nil:
			err = u.s.saveChat(ctx, mgr, in)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("session %s is kept in this replica's home only: %w", id, err))
			return false
		}
		return true
	}
	// What this request began: its session, and those its agent wrote
	// to; each saved when changed (which ends its hold), else released.
	for id, gen := range begun {
		saved := save(id, id == u.id && rn != nil && rn.ID() == u.id)
		if gen > 0 && !saved {
			if err := cs.st.Release(ctx, id); err != nil && !errdefs.IsNotFound(err) {
				u.s.log.Warn("releasing a chat session", "session", id, "err", err)
			}
		}
		cs.end(id)
	}
	// What it made: a fork (the runner moved to it) and the sessions its
	// agent started, unless another request here is changing them.
	if rn != nil {
		for _, id := range append([]string{rn.ID()}, rn.Routed()...) {
			if _, did := begun[id]; did || !cs.begin(id) {
				continue
			}
			save(id, false)
			cs.end(id)
		}
	}
	err := errors.Join(errs...)
	select {
	case <-u.lost:
		msg := fmt.Sprintf("session %s: this replica lost its hold of it to another replica, so the request was ended", u.id)
		if err != nil {
			msg += ": " + err.Error()
		}
		return errdefs.New(errdefs.Busy, msg)
	default:
	}
	return err
}

// saveChat stores session in of mgr, in place of the generation this
// daemon last had of it.
func (s *Server) saveChat(ctx context.Context, mgr *session.Manager, in session.Info) error {
	cs := s.chatSync
	data, mod, err := mgr.Export(in.ID)
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
	// Stamped as exported: what was appended since is a change here.
	if err := cs.noteAs(in.ID, stamp{gen: gen, size: int64(len(data)), mod: mod}); err != nil {
		s.log.Warn("recording the chat sessions' generations", "err", err)
	}
	return nil
}

// saveNew saves session r, just made, to the store. One that cannot be
// saved is closed and removed, so that no replica serves a session the
// others never see.
func (s *Server) saveNew(ctx context.Context, r *chatrun.Runner) error {
	if s.chatSync == nil {
		return nil
	}
	id := r.ID()
	mgr := session.ForLayout(s.opts.Chat.Host.Layout)
	err := errors.New("made and changed at once")
	if s.chatSync.begin(id) {
		var in session.Info
		if in, err = mgr.Info(id); err == nil {
			err = s.saveChat(ctx, mgr, in)
		}
		s.chatSync.end(id)
	}
	if err != nil {
		if derr := mgr.Delete(id); derr != nil {
			s.log.Warn("removing a session the store refused", "session", id, "err", derr)
		}
		s.chatSync.forget(id)
		return fmt.Errorf("the new session could not be kept in the cluster, so it is not made: %w", err)
	}
	return nil
}

// storedSessions adds to list (this daemon's sessions) the store's:
// the store's word for each session it holds, as it is the latest saved.
// A copy here of a session the store held once, and holds no more, was
// removed through another replica: it is left out.
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
		if _, in := stored[ls.ID]; !in && s.chatSync.known(ls.ID).gen == 0 && s.chatSync.unsure() == nil {
			out = append(out, ls)
		}
	}
	for id, raw := range stored {
		if session.ValidateID(id) != nil {
			continue
		}
		var cs cortex.Session
		if err := json.Unmarshal(raw, &cs); err != nil || cs.ID != id {
			s.log.Warn("a stored chat session's description is damaged", "session", id, "err", err)
			cs = cortex.Session{ID: id}
		}
		cs.Open = open[id]
		out = append(out, cs)
	}
	slices.SortStableFunc(out, func(a, b cortex.Session) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}
