package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/llm/providers"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/session"
)

// Chat configures the sessions routes: the agent runtime of nsys-cortex
// chat, served. Without it those routes answer UNAVAILABLE.
type Chat struct {
	Host *chatrun.Host
	// Defaults are every session's options (LLM from the daemon's
	// configuration: llm.provider, llm.model, llm.base_url, llm.key_env);
	// a request may choose the neuron, the agent, the title, the provider
	// and the model, nothing else.
	Defaults chatrun.Options
	// Idle closes a session no request has used for that long (its file
	// stays; the next request opens it again). 0: 15 minutes.
	Idle time.Duration
	// Store, when set, keeps the sessions beyond this daemon's home, for
	// every replica of a deployment (kube.chat_sessions).
	Store SessionStore
}

// chats holds the sessions open in this daemon.
type chats struct {
	mu   sync.Mutex
	open map[string]*openChat
	// opening serialises Open per session id, so two requests never open
	// one session twice.
	opening sync.Mutex
	stop    chan struct{}
	wg      sync.WaitGroup
	ended   sync.Once
}

type openChat struct {
	r      *chatrun.Runner
	users  int // requests using r now
	last   time.Time
	closed bool
}

func (s *Server) chatEnabled() error {
	if s.opts.Chat == nil || s.opts.Chat.Host == nil {
		return cortex.APIError{Code: cortex.CodeUnavailable, Message: "this daemon serves no chat sessions (no agent runtime configured)"}
	}
	return nil
}

// Close ends what a server holds without serving (its streams, its open
// chat sessions): for a server whose Handler was used directly.
func (s *Server) Close() {
	s.endStreams()
	s.ports.CloseIdleConnections()
	s.endChats()
}

// startChats starts the closer of idle sessions; endChats closes them all.
func (s *Server) startChats() {
	s.chats = &chats{open: map[string]*openChat{}, stop: make(chan struct{})}
	if s.opts.Chat == nil {
		return
	}
	if s.opts.Chat.Store != nil {
		s.chatSync = newChatSync(s.opts.Chat.Store, session.ForLayout(s.opts.Chat.Host.Layout).Dir())
	}
	idle := s.opts.Chat.Idle
	if idle <= 0 {
		idle = 15 * time.Minute
	}
	s.chats.wg.Go(func() {
		t := time.NewTicker(min(idle/4, time.Minute))
		defer t.Stop()
		for {
			select {
			case <-s.chats.stop:
				return
			case now := <-t.C:
				s.closeIdle(now.Add(-idle))
			}
		}
	})
}

func (s *Server) closeIdle(before time.Time) {
	s.chats.mu.Lock()
	var idle []*openChat
	for id, c := range s.chats.open {
		if c.users == 0 && c.last.Before(before) {
			c.closed = true
			idle = append(idle, c)
			delete(s.chats.open, id)
		}
	}
	s.chats.mu.Unlock()
	for _, c := range idle {
		if err := c.r.Close(); err != nil {
			s.log.Warn("closing an idle chat session", "session", c.r.ID(), "err", err)
		}
	}
}

// endChats closes every open session (the daemon stops). Turns still
// running were cancelled with their requests.
func (s *Server) endChats() {
	s.chats.ended.Do(func() { close(s.chats.stop) })
	s.chats.wg.Wait()
	s.chats.mu.Lock()
	all := s.chats.open
	s.chats.open = map[string]*openChat{}
	s.chats.mu.Unlock()
	for _, c := range all {
		c.closed = true
		c.r.Close()
	}
}

// acquireChat returns session id's runner, opening it when the daemon does
// not hold it, for a request that changes the session or only reads it;
// call release when the request is done with it. A daemon with a
// SessionStore syncs the session first, and holds it for a change:
// finish the returned use (nil without a store) before answering.
func (s *Server) acquireChat(ctx context.Context, id string, change bool) (*chatrun.Runner, *chatUse, func(), error) {
	if err := s.chatEnabled(); err != nil {
		return nil, nil, nil, err
	}
	if err := session.ValidateID(id); err != nil {
		return nil, nil, nil, cortex.APIError{Code: cortex.CodeBadRequest, Message: err.Error()}
	}
	use, err := s.syncIn(ctx, id, change)
	if err != nil {
		return nil, nil, nil, err
	}
	r, release, err := s.openChat(ctx, id, change)
	if err != nil {
		use.finish(context.WithoutCancel(ctx), nil)
		return nil, nil, nil, err
	}
	if use != nil {
		use.rn = r
	}
	return r, use, release, nil
}

// openChat returns session id's runner, opening it when the daemon does
// not hold it, or holds one whose file changed under it (written through
// another runner or agent of this daemon, or fetched): a change needs
// the file as it is. Call release when the request is done with it.
func (s *Server) openChat(ctx context.Context, id string, change bool) (*chatrun.Runner, func(), error) {
	get := func() *openChat {
		s.chats.mu.Lock()
		defer s.chats.mu.Unlock()
		c := s.chats.open[id]
		if c != nil {
			c.users++
		}
		return c
	}
	c := get()
	if c != nil && c.r.Stale() {
		s.releaseChat(c)
		s.chats.opening.Lock()
		s.chats.mu.Lock()
		stale := s.chats.open[id] == c
		if stale && c.users == 0 {
			delete(s.chats.open, id)
			c.closed = true
		}
		inUse := stale && !c.closed
		s.chats.mu.Unlock()
		s.chats.opening.Unlock()
		switch {
		case inUse && change:
			return nil, nil, chatError(fmt.Errorf("session %s changed under a request that reads it here: %w", id, chatrun.ErrBusy))
		case stale && !inUse:
			c.r.Close()
		}
		c = get() // a read beside another: the copy it reads
	}
	if c == nil {
		s.chats.opening.Lock()
		if c = get(); c == nil {
			o := s.chatOptions()
			o.Resume, o.FollowSession = id, true
			r, err := chatrun.Open(ctx, s.opts.Chat.Host, o)
			if err != nil {
				s.chats.opening.Unlock()
				return nil, nil, chatError(err)
			}
			c = s.hold(r)
		}
		s.chats.opening.Unlock()
	}
	return c.r, func() { s.releaseChat(c) }, nil
}

// chatOptions are the options a session opens with: the daemon's, and
// with a store, the hold of each session its agent writes to.
func (s *Server) chatOptions() chatrun.Options {
	o := s.opts.Chat.Defaults
	if s.chatSync != nil {
		o.AcquireRouted = s.acquireRouted
	}
	return o
}

// hold registers an opened runner, used once by the caller.
func (s *Server) hold(r *chatrun.Runner) *openChat {
	c := &openChat{r: r, users: 1, last: time.Now()}
	s.chats.mu.Lock()
	s.chats.open[r.ID()] = c
	s.chats.mu.Unlock()
	return c
}

func (s *Server) releaseChat(c *openChat) {
	s.chats.mu.Lock()
	c.users--
	c.last = time.Now()
	last := c.closed && c.users == 0 // dropped while in use (dropChat)
	s.chats.mu.Unlock()
	if last {
		c.r.Close()
	}
}

// chatHints are what an API client can do about the chat runtime's
// refusals; their codes are their classes'.
var chatHints = []struct {
	err  error
	hint string
}{
	{chatrun.ErrBusy, ": one request at a time per session (wait for the turn to end, or cancel it by closing its stream)"},
	{chatrun.ErrClosed, ": retry"},
	{chatrun.ErrFilesLost, ` (send "keepFiles": true to rewind the conversation alone)`},
}

// chatError adds its hint to a refusal of the chat runtime.
func chatError(err error) error {
	for _, h := range chatHints {
		if errors.Is(err, h.err) {
			return fmt.Errorf("%w%s", err, h.hint)
		}
	}
	return err
}

// sessionOf describes an open runner.
func sessionOf(r *chatrun.Runner) cortex.Session {
	h := r.Session().Header()
	p, m := r.Model()
	return cortex.Session{ID: r.ID(), Title: h.Title, Neuron: r.Neuron(), Agent: h.Agent, Provider: p, Model: m,
		Created: h.Created, Entries: r.Session().Len() + 1, Open: true, ParentSession: h.ParentSession}
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	if err := s.chatEnabled(); err != nil {
		writeError(w, err)
		return
	}
	infos, err := session.ForLayout(s.opts.Chat.Host.Layout).List()
	if err != nil {
		writeError(w, err)
		return
	}
	s.chats.mu.Lock()
	out := make([]cortex.Session, 0, len(infos))
	for _, in := range infos {
		if in.Err != nil {
			continue // an unreadable file: nothing to say about it but its name
		}
		c := s.chats.open[in.ID]
		cs := cortex.Session{ID: in.ID, Title: in.Title, Neuron: in.Neuron, Agent: in.Agent, Provider: in.Provider, Model: in.Model,
			Created: in.Created, Modified: in.Modified, Entries: in.Entries, Open: c != nil, ParentSession: in.ParentSession}
		out = append(out, cs)
	}
	s.chats.mu.Unlock()
	if out, err = s.storedSessions(r.Context(), out); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	if err := s.chatEnabled(); err != nil {
		writeError(w, err)
		return
	}
	var req cortex.SessionCreate
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Provider != "" && !slices.Contains(providers.Names(), req.Provider) {
		writeError(w, badRequest("unknown provider %q (known: %s)", req.Provider, strings.Join(providers.Names(), ", ")))
		return
	}
	o := s.chatOptions()
	o.Neuron, o.Title = req.Neuron, req.Title
	if req.Agent != "" {
		o.Agent = req.Agent
	}
	switch {
	case req.Provider != "" && req.Provider != o.LLM.Provider:
		// Another vendor: its own endpoint and key variable, never the
		// configured provider's (whose base URL would receive that key).
		o.LLM = llm.Config{Provider: req.Provider, Model: req.Model}
	case req.Model != "":
		o.LLM.Model = req.Model
	}
	if o.LLM.Provider == "" || o.LLM.Model == "" {
		writeError(w, badRequest("no provider and model: send \"provider\" and \"model\", or configure llm.provider and llm.model for the daemon"))
		return
	}
	s.chats.opening.Lock()
	runner, err := chatrun.Open(r.Context(), s.opts.Chat.Host, o)
	if err != nil {
		s.chats.opening.Unlock()
		writeError(w, chatError(err))
		return
	}
	c := s.hold(runner)
	s.chats.opening.Unlock()
	defer s.releaseChat(c)
	// Saved before anyone is told of it (outside the lock: the store
	// may be slow to answer); one that cannot be is undone, closed by
	// the last request that uses it.
	if err := s.saveNew(r.Context(), runner); err != nil {
		s.chats.mu.Lock()
		if s.chats.open[runner.ID()] == c {
			delete(s.chats.open, runner.ID())
		}
		c.closed = true
		s.chats.mu.Unlock()
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sessionOf(runner))
}

// onSession is a route on one session: the JSON body decoded into in (nil:
// no body), the session's runner held while f runs; f's answer is written
// with status (204 when out is nil).
func (s *Server) onSession(in any, change bool, f func(r *http.Request, rn *chatrun.Runner) (status int, out any, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var v any
		if in != nil {
			v = reflect.New(reflect.TypeOf(in).Elem()).Interface() // one per request
			if err := decodeJSON(w, r, v); err != nil {
				writeError(w, err)
				return
			}
		}
		rn, use, release, err := s.acquireChat(r.Context(), r.PathValue("sid"), change)
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
		defer use.finish(context.WithoutCancel(r.Context()), rn) // a panic's too
		ctx, unbind := use.context(r.Context())
		defer unbind()
		r = r.WithContext(context.WithValue(ctx, bodyKey{}, v))
		status, out, err := f(r, rn)
		if ferr := use.finish(context.WithoutCancel(r.Context()), rn); err == nil {
			err = ferr
		}
		switch {
		case err != nil:
			writeError(w, chatError(err))
		case out == nil:
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, status, out)
		}
	}
}

type bodyKey struct{}

// body returns the request body onSession decoded.
func body[T any](r *http.Request) *T { return r.Context().Value(bodyKey{}).(*T) }

func (s *Server) getSession(r *http.Request, rn *chatrun.Runner) (int, any, error) {
	d := cortex.SessionDetail{Session: sessionOf(rn), Messages: []cortex.SessionMessage{}}
	for _, m := range rn.Messages() {
		sm := cortex.SessionMessage{Role: string(m.Role), Text: m.Text()}
		for _, p := range m.Parts {
			switch {
			case p.ToolCall != nil:
				sm.ToolCalls = append(sm.ToolCalls, p.ToolCall.Name)
			case p.ToolResult != nil:
				sm.ToolResults++
			}
		}
		d.Messages = append(d.Messages, sm)
	}
	return http.StatusOK, d, nil
}

func (s *Server) updateSession(r *http.Request, rn *chatrun.Runner) (int, any, error) {
	req := body[cortex.SessionUpdate](r)
	if strings.TrimSpace(req.Model) == "" {
		return 0, nil, badRequest(`"model" is empty: give "name" or "provider/name"`)
	}
	if err := rn.SetModel(req.Model); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, sessionOf(rn), nil
}

func (s *Server) sessionTurns(_ *http.Request, rn *chatrun.Runner) (int, any, error) {
	out := []cortex.SessionTurn{}
	for _, t := range rn.Turns() {
		out = append(out, turnOf(t))
	}
	return http.StatusOK, out, nil
}

func (s *Server) compactSession(r *http.Request, rn *chatrun.Runner) (int, any, error) {
	return 0, nil, rn.Compact(r.Context(), nil)
}

func (s *Server) rewindSession(r *http.Request, rn *chatrun.Runner) (int, any, error) {
	req := body[cortex.RewindRequest](r)
	if req.Entry == "" {
		return 0, nil, badRequest(`"entry" is empty: give the entry of a request (GET .../turns lists them)`)
	}
	rw, err := rn.Rewind(r.Context(), req.Entry, req.KeepFiles)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, cortex.Rewound{Turn: turnOf(rw.Turn), Restored: rw.Restored}, nil
}

func (s *Server) forkSession(r *http.Request, rn *chatrun.Runner) (int, any, error) {
	id, err := rn.Fork(body[cortex.ForkRequest](r).Entry)
	if err != nil {
		return 0, nil, err
	}
	// The runner moved to the fork; the parent's file is as it was.
	s.chats.mu.Lock()
	for old, c := range s.chats.open {
		if c.r == rn && old != id {
			delete(s.chats.open, old)
			s.chats.open[id] = c
		}
	}
	s.chats.mu.Unlock()
	return http.StatusCreated, sessionOf(rn), nil
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) {
	if err := s.chatEnabled(); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("sid")
	if err := session.ValidateID(id); err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	remove := r.URL.Query().Get("remove") == "true"
	if remove && s.chatSync != nil {
		if !s.chatSync.begin(id) {
			writeError(w, chatError(chatrun.ErrBusy))
			return
		}
		defer s.chatSync.end(id)
	}
	s.chats.mu.Lock()
	c := s.chats.open[id]
	if c != nil && c.users > 0 {
		s.chats.mu.Unlock()
		writeError(w, chatError(chatrun.ErrBusy))
		return
	}
	delete(s.chats.open, id)
	s.chats.mu.Unlock()
	if c != nil {
		c.closed = true
		if err := c.r.Close(); err != nil {
			s.log.Warn("closing a chat session", "session", id, "err", err)
		}
	}
	// In the store: removed there first (refused while another replica
	// holds it), then here.
	stored := false
	if s.chatSync != nil {
		var err error
		if remove {
			err = s.chatSync.st.Delete(r.Context(), id)
		} else {
			_, err = s.chatSync.st.Generation(r.Context(), id)
		}
		if err != nil && !errdefs.IsNotFound(err) {
			writeError(w, chatError(err))
			return
		}
		stored = err == nil
	}
	mgr := session.ForLayout(s.opts.Chat.Host.Layout)
	if remove {
		if s.chatSync != nil {
			if err := s.chatSync.forget(id); err != nil {
				s.log.Warn("recording the chat sessions' generations", "err", err)
			}
		}
		if err := mgr.Delete(id); err != nil && !(stored && errors.Is(err, session.ErrNotFound)) {
			writeError(w, chatError(err))
			return
		}
	} else if c == nil && !stored {
		if _, err := mgr.Open(id); err != nil {
			writeError(w, chatError(err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func turnOf(t chatrun.Turn) cortex.SessionTurn {
	return cortex.SessionTurn{N: t.N, Entry: t.Entry, Request: t.Request, Files: t.Files.String(), Checkpoint: t.Checkpoint, Why: t.Why}
}

// runTurn streams one turn as Server-Sent Events. The turn runs while the
// request does: a client that goes away cancels it (as Ctrl-C does in
// nsys-cortex chat), and so does the daemon stopping.
func (s *Server) runTurn(w http.ResponseWriter, r *http.Request) {
	var req cortex.TurnRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if strings.TrimSpace(req.Message) == "" {
		writeError(w, badRequest(`"message" is empty`))
		return
	}
	rn, use, release, err := s.acquireChat(r.Context(), r.PathValue("sid"), true)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	defer use.finish(context.WithoutCancel(r.Context()), rn) // a panic's too
	ctx, done := s.streamContext(r)
	defer done()
	ctx, unbind := use.context(ctx)
	defer unbind()
	var sse *sseWriter
	var ok bool
	started := false
	var last map[string]any // turn_end, sent once the session takes requests again
	res, err := rn.Turn(ctx, req.Message, func(e chatrun.Event) {
		rec, keep := chatrun.Record(e)
		if !keep {
			return
		}
		if rec["type"] == "turn_end" {
			last = rec
			return
		}
		if !started {
			started = true
			if sse, ok = newSSE(w); !ok {
				return
			}
		}
		if sse != nil {
			sse.event(rec["type"].(string), rec) // a client gone: the context ends the turn
		}
	})
	// What the turn changed is saved before its end is told.
	if ferr := use.finish(context.WithoutCancel(r.Context()), rn); err == nil {
		err = ferr
	}
	if !started {
		if err != nil {
			writeError(w, chatError(err)) // refused before it began (busy, closed)
			return
		}
		if sse, ok = newSSE(w); !ok {
			return
		}
	}
	if sse == nil {
		return
	}
	if err != nil {
		sse.fail(chatError(err))
		return
	}
	if res != nil && res.SessionErr != nil {
		s.log.Warn("a chat turn could not write all its session entries", "session", rn.ID(), "err", res.SessionErr)
	}
	if last != nil {
		sse.event("turn_end", last)
	}
}
