package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// model is a provider whose answers the test scripts: the first request of
// a turn whose message says "write" calls the write tool, everything else
// is answered "done: <request>". A turn whose message says "wait" blocks
// until released (or cancelled); "spawn" starts a sub-agent's session
// (sessions_spawn), "send ID" tells session ID's agent "wait now"
// (sessions_send).
type model struct {
	mu      sync.Mutex
	name    string
	release chan struct{}
	waiting chan struct{}
	calls   int
}

func (m *model) Name() string { return "scripted" }

func (m *model) Stream(ctx context.Context, req *llm.Request, on func(llm.Event)) (*llm.Response, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	request := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser && req.Messages[i].Text() != "" {
			request = req.Messages[i].Text()
			break
		}
	}
	if strings.Contains(request, "wait") {
		select {
		case m.waiting <- struct{}{}:
		default:
		}
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if strings.HasPrefix(request, "send ") && last.Role == llm.RoleUser {
		in, _ := json.Marshal(map[string]string{"session": strings.Fields(request)[1], "message": "wait now"})
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "c3", Name: "sessions_send",
			Input: in}}}}, Stop: llm.StopToolUse}, nil
	}
	if strings.Contains(request, "spawn") && last.Role == llm.RoleUser {
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "c2", Name: "sessions_spawn",
			Input: json.RawMessage(`{"task":"sub task","neuron":"chat1"}`)}}}}, Stop: llm.StopToolUse}, nil
	}
	if strings.Contains(request, "write") && last.Role == llm.RoleUser {
		in, _ := json.Marshal(map[string]string{"path": "made-by-agent.txt", "content": "hello from " + m.name})
		return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: "c1", Name: "write", Input: in}}}}, Stop: llm.StopToolUse}, nil
	}
	text := "done: " + request
	on(llm.Event{Kind: llm.EventText, Text: text})
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: text}}}, Stop: llm.StopEnd}, nil
}

type chatDaemon struct {
	c      *cortex.Client
	lay    layout.Layout
	models map[string]*model
}

// newChatDaemon is a daemon serving sessions over a real process-mode
// neuron, with scripted models m1 and m2.
func newChatDaemon(t *testing.T) *chatDaemon { return newChatReplica(t, nil) }

// newChatReplica is newChatDaemon keeping its sessions in store too (a
// replica of a deployment, when others share store).
func newChatReplica(t *testing.T, store api.SessionStore) *chatDaemon {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	return newChatReplicaAt(t, store, lay)
}

// newChatReplicaAt is newChatReplica on the home lay (a daemon started
// again on the home of one that stopped), stopped when t ends.
func newChatReplicaAt(t *testing.T, store api.SessionStore, lay layout.Layout) *chatDaemon {
	t.Helper()
	var err error
	set := sandbox.NewSet(sandbox.Env{Layout: lay, Exclusive: true, AgentBinary: func() (string, error) { return agentBin, nil }}, process.Backend())
	d := &chatDaemon{lay: lay, models: map[string]*model{}}
	for _, n := range []string{"m1", "m2"} {
		d.models[n] = &model{name: n, release: make(chan struct{}), waiting: make(chan struct{}, 1)}
	}
	host := &chatrun.Host{
		Set: set, Layout: lay,
		Ensure: func(ctx context.Context, id string) (string, error) {
			if id == "" {
				id = "chat1"
			}
			m, err := set.Manager(process.Mode)
			if err != nil {
				return "", err
			}
			if st, err := m.Get(ctx, id); err == nil && st.Status == sandbox.StatusRunning {
				return id, nil
			}
			_, err = m.Create(ctx, id, sandbox.CreateOptions{})
			return id, err
		},
		Providers: func(cfg llm.Config) (llm.Provider, error) {
			if m := d.models[cfg.Model]; m != nil {
				return m, nil
			}
			return nil, errors.New("no model " + cfg.Model)
		},
	}
	srv := api.New(api.Options{Set: set, Version: "test", Chat: &api.Chat{Host: host, Store: store,
		Defaults: chatrun.Options{LLM: llm.Config{Provider: "openai", Model: "m1"}}}})
	ts := httptest.NewServer(srv.Handler())
	d.c, err = cortex.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		srv.Close()
		all, _ := set.List(context.Background())
		for _, st := range all {
			if m, err := set.Manager(st.Mode); err == nil {
				m.Destroy(context.Background(), st.ID, sandbox.DestroyOptions{Wipe: true})
			}
		}
		set.Close()
	})
	return d
}

func TestSessionsOverHTTP(t *testing.T) {
	d := newChatDaemon(t)
	ctx := context.Background()
	s, err := d.c.CreateSession(ctx, &cortex.SessionCreate{Title: "over http"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || s.Neuron != "chat1" || s.Model != "m1" || !s.Open {
		t.Fatalf("created %+v", s)
	}

	// A turn that writes a file, streamed as events.
	var events []cortex.ChatEvent
	end, err := d.c.Send(ctx, s.ID, "turn 1: write a file", func(e cortex.ChatEvent) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	got := strings.Join(types, ",")
	for _, want := range []string{"checkpoint", "tool_start", "tool_result", "text", "turn_end"} {
		if !strings.Contains(got, want) {
			t.Errorf("the turn's events %s lack %s", got, want)
		}
	}
	if end.Stop != "done" || types[len(types)-1] != "turn_end" {
		t.Fatalf("the turn ended %+v (events %s)", end, got)
	}
	file := filepath.Join(d.lay.OverlayDir("chat1"), "home", "workspace", "made-by-agent.txt")
	if b, err := os.ReadFile(file); err != nil || string(b) != "hello from m1" {
		t.Fatalf("the agent's file: %q %v", b, err)
	}

	detail, err := d.c.Session(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range detail.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,tool,assistant" || len(detail.Messages[1].ToolCalls) != 1 || detail.Messages[1].ToolCalls[0] != "write" {
		t.Fatalf("messages: %+v", detail.Messages)
	}

	// The turn can be rewound, files and all.
	turns, err := d.c.SessionTurns(ctx, s.ID)
	if err != nil || len(turns) != 1 || turns[0].Files != "restored" {
		t.Fatalf("turns: %+v %v", turns, err)
	}
	rw, err := d.c.Rewind(ctx, s.ID, &cortex.RewindRequest{Entry: turns[0].Entry})
	if err != nil || rw.Restored == "" {
		t.Fatalf("rewind: %+v %v", rw, err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("after the rewind the agent's file is still there: %v", err)
	}
	if detail, err = d.c.Session(ctx, s.ID); err != nil || len(detail.Messages) != 0 {
		t.Fatalf("after the rewind: %+v %v", detail, err)
	}

	// One request at a time: a second turn while one runs is BUSY; the
	// first, cancelled by its client, ends and frees the session.
	tctx, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := d.c.Send(tctx, s.ID, "turn 2: wait", nil)
		first <- err
	}()
	select {
	case <-d.models["m1"].waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("the first turn never reached the model")
	}
	_, err = d.c.Send(ctx, s.ID, "turn 3", nil)
	var ae cortex.APIError
	if !errors.As(err, &ae) || ae.Code != cortex.CodeBusy || ae.Status != http.StatusConflict {
		t.Fatalf("a second turn during the first: %v, want BUSY (409)", err)
	}
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the cancelled turn's stream ended without an error")
	}
	// The daemon noticed the client going away: the session takes the
	// next turn (retried while the cancelled one unwinds).
	waittest.Until(30*time.Second, func() bool {
		end, err = d.c.Send(ctx, s.ID, "turn 4", nil)
		return err == nil || !errors.As(err, &ae) || ae.Code != cortex.CodeBusy
	})
	if err != nil || end.Stop != "done" {
		t.Fatalf("the turn after a cancelled one: %+v %v", end, err)
	}

	// Model switch, fork, list, close and remove.
	up, err := d.c.UpdateSession(ctx, s.ID, &cortex.SessionUpdate{Model: "m2"})
	if err != nil || up.Model != "m2" {
		t.Fatalf("model switch: %+v %v", up, err)
	}
	if _, err := d.c.UpdateSession(ctx, s.ID, &cortex.SessionUpdate{Model: ""}); !errors.As(err, &ae) || ae.Code != cortex.CodeBadRequest {
		t.Fatalf("an empty model: %v, want BAD_REQUEST", err)
	}
	fork, err := d.c.Fork(ctx, s.ID, &cortex.ForkRequest{})
	if err != nil || fork.ID == s.ID || fork.ParentSession != s.ID {
		t.Fatalf("fork: %+v %v", fork, err)
	}
	if end, err = d.c.Send(ctx, fork.ID, "turn 5 in the fork", nil); err != nil || end.Stop != "done" {
		t.Fatalf("a turn in the fork: %+v %v", end, err)
	}
	parent, err := d.c.Session(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range parent.Messages {
		if strings.Contains(m.Text, "turn 5") {
			t.Fatal("the fork's turn is in its parent")
		}
	}
	list, err := d.c.Sessions(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("sessions: %+v %v", list, err)
	}
	if err := d.c.CloseSession(ctx, fork.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Session(ctx, fork.ID); !errors.As(err, &ae) || ae.Code != cortex.CodeNotFound {
		t.Fatalf("a removed session: %v, want NOT_FOUND", err)
	}
	if err := d.c.CloseSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	// Closed, not removed: the next request opens it again, as it was.
	// (The cancelled turn's request stays, answered by a note that says so.)
	if detail, err = d.c.Session(ctx, s.ID); err != nil || detail.Model != "m2" || len(detail.Messages) != 4 ||
		detail.Messages[1].Text != loop.NoAnswerCancelled || detail.Messages[3].Text != "done: turn 4" {
		t.Fatalf("the session reopened: %+v %v", detail, err)
	}
}

func TestSessionsBadInput(t *testing.T) {
	d := newChatDaemon(t)
	ctx := context.Background()
	var ae cortex.APIError
	for _, c := range []struct {
		what string
		err  error
		code cortex.Code
	}{
		{"an unknown session", func() error { _, err := d.c.Session(ctx, "nosuchsession"); return err }(), cortex.CodeNotFound},
		{"an id with a path in it", func() error { _, err := d.c.Session(ctx, "../x"); return err }(), cortex.CodeBadRequest},
		{"an empty message", func() error { _, err := d.c.Send(ctx, "whatever", " ", nil); return err }(), cortex.CodeBadRequest},
		{"an unknown provider", func() error {
			_, err := d.c.CreateSession(ctx, &cortex.SessionCreate{Provider: "nope", Model: "x"})
			return err
		}(), cortex.CodeBadRequest},
	} {
		if !errors.As(c.err, &ae) || ae.Code != c.code {
			t.Errorf("%s: %v, want %s", c.what, c.err, c.code)
		}
	}
	// Without a configured runtime the routes say so.
	srv := api.New(api.Options{Set: sandbox.NewSet(sandbox.Env{Layout: d.lay}), Version: "test"})
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	c, _ := cortex.New(ts.URL)
	if _, err := c.Sessions(ctx); !errors.As(err, &ae) || ae.Code != cortex.CodeUnavailable {
		t.Fatalf("sessions without a runtime: %v, want UNAVAILABLE", err)
	}
}
