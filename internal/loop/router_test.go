package loop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

func TestRouterSpawnSendHistory(t *testing.T) {
	e := toolstest.New(t, "standard")
	mgr := session.NewManager(t.TempDir())
	// The child answers from its own conversation; it writes a file so
	// the parent can check the child really worked in a neuron.
	child := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == llm.RoleUser && strings.Contains(last.Text(), "write the marker"):
			return calls(call("w", "write", map[string]any{"path": "marker.txt", "content": "from the child\n"})), nil
		case last.Role == llm.RoleTool:
			return answer("marker written"), nil
		default:
			return answer("you said: " + last.Text()), nil
		}
	}}
	router := &loop.Router{Sessions: mgr, Header: session.Header{Provider: "script", Model: "m"},
		Start: func(ctx context.Context, neuron string, sess *session.Session) (*loop.Agent, string, error) {
			a, err := loop.New(loop.Config{Provider: child, Kit: e.Kit, OnMessage: func(m llm.Message) { sess.AppendMessage(m) }})
			return a, e.State.ID, err
		}}
	defer router.Close()
	ts, err := router.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range ts {
		if err := e.Kit.Add(tl); err != nil {
			t.Fatal(err)
		}
	}
	out := e.Call("sessions_spawn", map[string]any{"task": "write the marker"}, false)
	if !strings.Contains(out, "marker written") || e.Get("marker.txt") != "from the child\n" {
		t.Fatalf("spawn: %s", out)
	}
	id := strings.Fields(strings.TrimPrefix(out, "session "))[0]
	contains(t, e.Call("sessions_send", map[string]any{"session": id, "message": "and hello"}, false), "you said: and hello")
	contains(t, e.Call("sessions_history", map[string]any{"session": id}, false), "user: write the marker", "assistant → write", "you said: and hello")
	contains(t, e.Call("sessions_list", map[string]any{}, false), id, "write the marker")
	contains(t, e.Call("sessions_send", map[string]any{"session": "snope12345", "message": "x"}, true), "snope12345")
	contains(t, e.Call("sessions_spawn", map[string]any{"task": "  "}, true), `"task" is empty`)
}

func contains(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("want %q in:\n%s", w, got)
		}
	}
}
