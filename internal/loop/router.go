package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// Router lets one agent start and talk to others, each in its own session
// and neuron: the sessions_* tools. Agents it starts do not get these tools
// themselves (one level of delegation: no unbounded trees of agents).
type Router struct {
	Sessions *session.Manager
	// Start returns an agent working in neuron ("": a new neuron) whose
	// messages go to sess, and the neuron's id.
	Start func(ctx context.Context, neuron string, sess *session.Session) (*Agent, string, error)
	// Header fills in a new session's header (provider, model, agent).
	Header session.Header
	// Acquire, when set, is asked before an agent is sent a message in a
	// session that was there before (sessions_send), with whether the
	// router has the session open: an error refuses the send, and
	// ErrStale, for an open one, makes the router close its copy and ask
	// again (the file has changed under it).
	Acquire func(ctx context.Context, id string, open bool) error
	// Self, when set, is the id of the session whose agent the router
	// serves, which sessions_send refuses.
	Self func() string

	mu      sync.Mutex
	running map[string]*routed
}

// routed is an agent the router started, with its session.
type routed struct {
	mu     sync.Mutex // one turn at a time
	agent  *Agent
	sess   *session.Session
	neuron string
}

// Close closes the sessions the router opened.
func (r *Router) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	for _, a := range r.running {
		if err := a.sess.Close(); err != nil && first == nil {
			first = err
		}
	}
	r.running = nil
	return first
}

// Routed returns the ids of the sessions the router's agents work in
// (those it started, and those it was sent to), in no order.
func (r *Router) Routed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	return ids
}

// ErrStale is Router.Acquire's answer for a session the router has open
// whose file has changed under it.
var ErrStale = errors.New("the session changed since it was opened")

type spawnIn struct {
	Task   string `json:"task" jsonschema:"what the new agent should do, self-contained: it sees nothing of your conversation"`
	Neuron string `json:"neuron,omitempty" jsonschema:"neuron to work in (default: a new one of its own)"`
}

type sendIn struct {
	Session string `json:"session" jsonschema:"the session id sessions_spawn or sessions_list gave"`
	Message string `json:"message" jsonschema:"what to tell or ask that agent"`
}

type historyIn struct {
	Session string `json:"session" jsonschema:"the session id"`
	Limit   int    `json:"limit,omitempty" jsonschema:"the last N messages (default 20)"`
}

type listIn struct {
	Limit int `json:"limit,omitempty" jsonschema:"most sessions to list, newest first (default 20)"`
}

// schemaOf infers a tool input schema.
func schemaOf[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err) // a programming error: the types above are plain structs
	}
	return s
}

// Tools returns the sessions tools.
func (r *Router) Tools() ([]*tools.Tool, error) {
	defs := []struct {
		name, desc string
		ann        tools.Annotations
		schema     *jsonschema.Schema
		run        func(context.Context, json.RawMessage) (*tools.Result, error)
	}{
		{"sessions_spawn", "Start another agent on a task, in its own session and (by default) its own neuron, and wait for its answer. Give it a self-contained task. Returns its session id (talk to it again with sessions_send) and its final answer.",
			tools.Annotations{Destructive: true, OpenWorld: true}, schemaOf[spawnIn](), r.spawn},
		{"sessions_send", "Send a message to an agent you started (by session id) and wait for its answer.",
			tools.Annotations{Destructive: true, OpenWorld: true}, schemaOf[sendIn](), r.send},
		{"sessions_history", "Read the last messages of a session.",
			tools.Annotations{ReadOnly: true, Idempotent: true}, schemaOf[historyIn](), r.history},
		{"sessions_list", "List the sessions, newest first.",
			tools.Annotations{ReadOnly: true, Idempotent: true}, schemaOf[listIn](), r.list},
	}
	var out []*tools.Tool
	for _, d := range defs {
		t, err := tools.External(d.name, d.desc, tools.GroupSessions, d.ann, d.schema, d.run)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (r *Router) spawn(ctx context.Context, raw json.RawMessage) (*tools.Result, error) {
	var in spawnIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	if strings.TrimSpace(in.Task) == "" {
		return nil, &tools.InputError{Tool: "sessions_spawn", Field: "task", Msg: "is empty"}
	}
	h := r.Header
	h.Neuron = in.Neuron
	h.Title = firstLine(in.Task, 80)
	sess, err := r.Sessions.Create(h)
	if err != nil {
		return nil, err
	}
	agent, neuron, err := r.Start(ctx, in.Neuron, sess)
	if err != nil {
		sess.Close()
		return nil, err
	}
	ra := &routed{agent: agent, sess: sess, neuron: neuron}
	r.mu.Lock()
	if r.running == nil {
		r.running = map[string]*routed{}
	}
	r.running[sess.ID()] = ra
	r.mu.Unlock()
	return ra.turn(ctx, in.Task)
}

func (r *Router) send(ctx context.Context, raw json.RawMessage) (*tools.Result, error) {
	var in sendIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	if r.Self != nil && in.Session == r.Self() {
		return nil, &tools.InputError{Tool: "sessions_send", Field: "session", Msg: "is this agent's own session"}
	}
	r.mu.Lock()
	ra := r.running[in.Session]
	r.mu.Unlock()
	if r.Acquire != nil {
		err := r.Acquire(ctx, in.Session, ra != nil)
		if errors.Is(err, ErrStale) && ra != nil {
			r.drop(in.Session, ra)
			ra = nil
			err = r.Acquire(ctx, in.Session, false)
		}
		if err != nil {
			return nil, err
		}
	}
	if ra != nil && ra.sess.Stale() {
		// Written since through another Session (a client's request, or
		// another agent): the agent's history lags the file.
		r.drop(in.Session, ra)
		ra = nil
	}
	if ra == nil {
		sess, err := r.Sessions.Open(in.Session)
		if err != nil {
			return nil, err
		}
		agent, neuron, err := r.Start(ctx, sess.Header().Neuron, sess)
		if err != nil {
			sess.Close()
			return nil, err
		}
		agent.SetHistory(sess.Messages())
		ra = &routed{agent: agent, sess: sess, neuron: neuron}
		r.mu.Lock()
		if r.running == nil {
			r.running = map[string]*routed{}
		}
		r.running[in.Session] = ra
		r.mu.Unlock()
	}
	return ra.turn(ctx, in.Message)
}

// drop closes the router's copy of session id.
func (r *Router) drop(id string, ra *routed) {
	r.mu.Lock()
	delete(r.running, id)
	r.mu.Unlock()
	ra.mu.Lock() // no turn of its own runs on
	ra.sess.Close()
	ra.mu.Unlock()
}

// turn runs one request of a routed agent and reports it.
func (ra *routed) turn(ctx context.Context, request string) (*tools.Result, error) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	res := ra.agent.Turn(ctx, request)
	text := fmt.Sprintf("session %s (neuron %s) — %s after %d steps", ra.sess.ID(), ra.neuron, res.Stop, res.Steps)
	if res.Message != "" {
		text += ": " + res.Message
	}
	if res.Answer != "" {
		text += "\n\n" + res.Answer
	}
	return &tools.Result{Text: text, IsError: res.Stop == StopError}, nil
}

func (r *Router) history(_ context.Context, raw json.RawMessage) (*tools.Result, error) {
	var in historyIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	sess, err := r.Sessions.Open(in.Session)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	msgs := sess.Messages()
	limit := in.Limit
	if limit <= 0 {
		limit = 20
	}
	if len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	var b strings.Builder
	for _, m := range msgs {
		for _, p := range m.Parts {
			switch {
			case p.Text != "":
				fmt.Fprintf(&b, "%s: %s\n", m.Role, p.Text)
			case p.ToolCall != nil:
				fmt.Fprintf(&b, "%s → %s %s\n", m.Role, p.ToolCall.Name, firstLine(string(p.ToolCall.Input), 200))
			case p.ToolResult != nil:
				fmt.Fprintf(&b, "%s ← %s\n", p.ToolResult.Name, firstLine(p.ToolResult.Content, 200))
			}
		}
	}
	if b.Len() == 0 {
		return &tools.Result{Text: "(no messages)"}, nil
	}
	return &tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}

func (r *Router) list(_ context.Context, raw json.RawMessage) (*tools.Result, error) {
	var in listIn
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	all, err := r.Sessions.List()
	if err != nil {
		return nil, err
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 20
	}
	var b strings.Builder
	for i, s := range all {
		if i == limit {
			break
		}
		fmt.Fprintf(&b, "%s  %s  %d entries  %s\n", s.ID, s.Modified.Format("2006-01-02 15:04"), s.Entries, s.Title)
	}
	if b.Len() == 0 {
		return &tools.Result{Text: "no sessions"}, nil
	}
	return &tools.Result{Text: strings.TrimSuffix(b.String(), "\n")}, nil
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
