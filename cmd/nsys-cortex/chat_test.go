package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeOpenAI is a chat completions server speaking the OpenAI wire format
// (SSE chunks, tool-call deltas in pieces, [DONE]); each request gets the
// answer route picks for it, else the next scripted answer.
type fakeOpenAI struct {
	mu      sync.Mutex
	answers []func(w io.Writer)
	route   func(body map[string]any) func(w io.Writer)
	bodies  []map[string]any
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer test-key" {
		http.Error(w, `{"error":{"message":"bad request to the fake","type":"invalid_request_error"}}`, 400)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body == nil {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"the fake could not decode the body: %v","type":"invalid_request_error"}}`, err), 400)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	n := len(f.bodies)
	var next func(io.Writer)
	if f.route != nil {
		next = f.route(body)
	} else if n <= len(f.answers) {
		next = f.answers[n-1]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	if next == nil {
		chunk(w, map[string]any{"content": "nothing more to do"}, "stop")
	} else {
		next(w)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func chunk(w io.Writer, delta map[string]any, finish string) {
	c := map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}}
	if finish != "" {
		c["choices"].([]any)[0].(map[string]any)["finish_reason"] = finish
	}
	b, _ := json.Marshal(c)
	fmt.Fprintf(w, "data: %s\n\n", b)
}

// toolCall streams one tool call with its arguments in three pieces.
func toolCall(id, name string, args map[string]any) func(w io.Writer) {
	return func(w io.Writer) {
		a, _ := json.Marshal(args)
		s := string(a)
		third := len(s) / 3
		chunk(w, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
			"function": map[string]any{"name": name, "arguments": s[:third]}}}}, "")
		chunk(w, map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": s[third : 2*third]}}}}, "")
		chunk(w, map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": s[2*third:]}}}}, "tool_calls")
	}
}

func TestChatHeadlessEndToEnd(t *testing.T) {
	c := newCLI(t, "process")
	fake := &fakeOpenAI{answers: []func(io.Writer){
		toolCall("call_1", "write", map[string]any{"path": "hello.py", "content": "print('hello from the agent')\n"}),
		toolCall("call_2", "bash", map[string]any{"command": "python3 hello.py"}),
		func(w io.Writer) {
			chunk(w, map[string]any{"role": "assistant", "content": "It prints "}, "")
			chunk(w, map[string]any{"content": "hello."}, "stop")
		},
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c.env = append(c.env, "OPENAI_API_KEY=test-key", "SECRET_API_TOKEN=operator-secret-value")
	cmd := c.command("chat", "agent1", "--provider", "openai", "--model", "fake", "--base-url", srv.URL+"/v1", "-p", "write and run hello.py", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chat: %v\n%s\n%s", err, out, stderr.String())
	}
	var kinds []string
	var result string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		kinds = append(kinds, ev["type"].(string))
		if ev["type"] == "tool_result" && ev["tool"] == "bash" {
			result = ev["output"].(string)
		}
	}
	if !strings.Contains(result, "hello from the agent") || kinds[len(kinds)-1] != "turn_end" {
		t.Fatalf("events %v, bash result %q", kinds, result)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	// The second request carried the tool result back with its call id.
	msgs := fake.bodies[1]["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	if last["role"] != "tool" || last["tool_call_id"] != "call_1" {
		t.Fatalf("tool result message: %v", last)
	}
	// The operator's secrets never reach the model.
	for _, b := range fake.bodies {
		raw, _ := json.Marshal(b)
		if strings.Contains(string(raw), "operator-secret-value") || strings.Contains(string(raw), "test-key") {
			t.Fatal("a secret reached the model")
		}
	}
	// The session is on disk; a torn last line does not stop a resume.
	files, _ := filepath.Glob(filepath.Join(c.home, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("sessions: %v", files)
	}
	fh, _ := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
	fh.WriteString(`{"id":"torn","parentId":"x","type":"mess`)
	fh.Close()
	fake.answers = append(fake.answers, func(w io.Writer) { chunk(w, map[string]any{"role": "assistant", "content": "resumed fine"}, "stop") })
	cmd = c.command("chat", "agent1", "--provider", "openai", "--model", "fake", "--base-url", srv.URL+"/v1", "--continue", "-p", "and now?")
	fake.mu.Unlock() // the server needs it while the chat runs
	out, err = cmd.CombinedOutput()
	fake.mu.Lock()
	if err != nil || !strings.Contains(string(out), "resumed fine") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	// The resumed request carried the earlier conversation.
	if n := len(fake.bodies[len(fake.bodies)-1]["messages"].([]any)); n < 6 {
		t.Fatalf("the resumed request has %d messages", n)
	}
}

// requests returns the bodies the fake was sent so far.
func (f *fakeOpenAI) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

// text streams an answer in two pieces.
func text(s string) func(w io.Writer) {
	return func(w io.Writer) {
		half := len(s) / 2
		chunk(w, map[string]any{"role": "assistant", "content": s[:half]}, "")
		chunk(w, map[string]any{"content": s[half:]}, "stop")
	}
}

// messages returns a request body's messages.
func messages(body map[string]any) []map[string]any {
	var out []map[string]any
	list, _ := body["messages"].([]any)
	for _, m := range list {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// content is a message's text (a string, or parts with text).
func content(m map[string]any) string {
	switch c := m["content"].(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok {
				if t, ok := pm["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

// system is a request's system prompt.
func system(body map[string]any) string {
	for _, m := range messages(body) {
		if m["role"] == "system" || m["role"] == "developer" {
			return content(m)
		}
	}
	return ""
}

// lastUser is the latest user message of a request, and how many
// assistant messages follow it (the step of the turn).
func lastUser(body map[string]any) (string, int) {
	msgs := messages(body)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] == "user" {
			steps := 0
			for _, m := range msgs[i+1:] {
				if m["role"] == "assistant" {
					steps++
				}
			}
			return content(msgs[i]), steps
		}
	}
	return "", 0
}

// isSummaryRequest and isSuggestionRequest tell the runtime's own
// requests from a turn's.
func isSummaryRequest(body map[string]any) bool {
	return strings.Contains(system(body), "compact the history")
}

func isSuggestionRequest(body map[string]any) bool {
	return strings.Contains(system(body), "predict what the user")
}

// A multi-turn task over the real OpenAI wire format in a real neuron: the
// first turn reads a file, fixes it with edit and runs the tests; the
// second, resumed from the session, runs them again. The model answers
// with what the tool results said, so the test sees the neuron's work.
func TestChatReadEditRunTests(t *testing.T) {
	c := newCLI(t, "process")
	if _, errOut, code := c.run("", "create", "fixer"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	c.run("", "exec", "fixer", "--", "sh", "-c", `printf 'def add(a, b):\n    return a - b\n' > calc.py && printf "python3 -c 'import calc; assert calc.add(2, 3) == 5' && echo PASS\n" > test.sh`)
	lastTool := func(body map[string]any) string {
		msgs := messages(body)
		if m := msgs[len(msgs)-1]; m["role"] == "tool" {
			return content(m)
		}
		return ""
	}
	fake := &fakeOpenAI{}
	fake.route = func(body map[string]any) func(io.Writer) {
		req, step := lastUser(body)
		fix := strings.HasPrefix(req, "fix")
		switch {
		case fix && step == 0:
			return toolCall("r1", "read", map[string]any{"path": "calc.py"})
		case fix && step == 1:
			if !strings.Contains(lastTool(body), "a - b") {
				return text("the read did not show the bug: " + lastTool(body))
			}
			return toolCall("e1", "edit", map[string]any{"path": "calc.py", "old_string": "a - b", "new_string": "a + b"})
		case fix && step == 2, !fix && step == 0:
			return toolCall("t1", "bash", map[string]any{"command": "sh test.sh"})
		}
		return text("tests say: " + strings.TrimSpace(lastTool(body)))
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c.env = append(c.env, "OPENAI_API_KEY=test-key")
	args := []string{"chat", "fixer", "--provider", "openai", "--model", "fake", "--base-url", srv.URL + "/v1"}
	out, errOut, code := c.run("", append(args, "-p", "fix calc.py so the tests pass")...)
	if code != 0 || !strings.Contains(out, "tests say: PASS") {
		t.Fatalf("turn 1 (exit %d): %s\n%s", code, out, errOut)
	}
	got, _, _ := c.run("", "exec", "fixer", "--", "cat", "calc.py")
	if !strings.Contains(got, "a + b") {
		t.Fatalf("calc.py after the turn: %q", got)
	}
	out, errOut, code = c.run("", append(args, "--continue", "-p", "run the tests again")...)
	if code != 0 || !strings.Contains(out, "tests say: PASS") {
		t.Fatalf("turn 2 (exit %d): %s\n%s", code, out, errOut)
	}
	// The second turn's request carried the first turn's work.
	reqs := fake.requests()
	if n := len(messages(reqs[len(reqs)-1])); n < 10 {
		t.Fatalf("the resumed turn's request has %d messages", n)
	}
}
