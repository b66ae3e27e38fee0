package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func TestMain(m *testing.M) {
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

// script is a provider whose answers a test writes: next gets the request
// and returns the answer.
type script struct {
	mu    sync.Mutex
	reqs  []*llm.Request
	next  func(n int, req *llm.Request) (*llm.Response, error)
	calls int
}

func (s *script) Name() string { return "script" }

func (s *script) Stream(ctx context.Context, req *llm.Request, on func(llm.Event)) (*llm.Response, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	cp := *req
	cp.Messages = append([]llm.Message(nil), req.Messages...)
	s.reqs = append(s.reqs, &cp)
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := s.next(n, req)
	if err == nil && on != nil && r.Message.Text() != "" {
		on(llm.Event{Kind: llm.EventText, Text: r.Message.Text()})
	}
	return r, err
}

func call(id, name string, input any) llm.Part {
	b, _ := json.Marshal(input)
	return llm.Part{ToolCall: &llm.ToolCall{ID: id, Name: name, Input: b}}
}

func answer(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: text}}}, Stop: llm.StopEnd}
}

func calls(parts ...llm.Part) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: parts}, Stop: llm.StopToolUse}
}

// isSummary tells a compaction request from a turn's request.
func isSummary(req *llm.Request) bool { return strings.Contains(req.System, "compact the history") }

func TestMultiStepTask(t *testing.T) {
	e := toolstest.New(t, "standard")
	e.Put("calc.py", "def add(a, b):\n    return a - b\n")
	e.Put("test_calc.sh", "python3 -c 'import calc; assert calc.add(2, 3) == 5' && echo PASS\n")
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		switch n {
		case 1:
			return calls(call("c1", "read", map[string]any{"path": "calc.py"})), nil
		case 2:
			return calls(call("c2", "edit", map[string]any{"path": "calc.py", "old_string": "a - b", "new_string": "a + b"})), nil
		case 3:
			return calls(call("c3", "bash", map[string]any{"command": "sh test_calc.sh"})), nil
		default:
			last := req.Messages[len(req.Messages)-1].Parts[0].ToolResult
			return answer("tests: " + last.Content), nil
		}
	}}
	var events []loop.EventKind
	a, err := loop.New(loop.Config{Provider: p, Kit: e.Kit, OnEvent: func(ev loop.Event) { events = append(events, ev.Kind) }})
	if err != nil {
		t.Fatal(err)
	}
	r := a.Turn(e.Ctx, "fix add and run the tests")
	if r.Stop != loop.StopDone || r.Steps != 4 || !strings.Contains(r.Answer, "PASS") {
		t.Fatalf("turn: %+v", r)
	}
	if got := e.Get("calc.py"); !strings.Contains(got, "a + b") {
		t.Fatalf("calc.py: %q", got)
	}
	// The model saw the tools, and every result went back with its call id.
	if len(p.reqs[0].Tools) < 10 {
		t.Fatalf("tools offered: %d", len(p.reqs[0].Tools))
	}
	h := a.History()
	if len(h) != 8 || h[2].Parts[0].ToolResult.CallID != "c1" {
		t.Fatalf("history: %d messages", len(h))
	}
	if !slicesContains(events, loop.EventToolStart) || !slicesContains(events, loop.EventTurnEnd) {
		t.Fatalf("events: %v", events)
	}
}

func slicesContains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestLoopPatterns(t *testing.T) {
	e := toolstest.New(t, "standard")
	e.Put("a.txt", "A\n")
	e.Put("b.txt", "B\n")
	for _, tc := range []struct {
		name    string
		next    func(n int) *llm.Response
		pattern string
	}{
		{"same call same result", func(n int) *llm.Response {
			return calls(call(fmt.Sprint(n), "ls", map[string]any{"path": "."}))
		}, "same-call-same-result"},
		{"same call failing", func(n int) *llm.Response {
			return calls(call(fmt.Sprint(n), "read", map[string]any{"path": "missing.txt"}))
		}, "same-call-failing"},
		{"alternation", func(n int) *llm.Response {
			if n%2 == 0 {
				return calls(call(fmt.Sprint(n), "read", map[string]any{"path": "a.txt"}))
			}
			return calls(call(fmt.Sprint(n), "read", map[string]any{"path": "b.txt"}))
		}, "alternation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &script{next: func(n int, _ *llm.Request) (*llm.Response, error) { return tc.next(n), nil }}
			var findings []loop.Finding
			a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, OnEvent: func(ev loop.Event) {
				if ev.Kind == loop.EventLoop {
					findings = append(findings, *ev.Finding)
				}
			}})
			r := a.Turn(e.Ctx, "go")
			if r.Stop != loop.StopLoop {
				t.Fatalf("stop %s after %d steps: %s", r.Stop, r.Steps, r.Message)
			}
			// The steps: warned first, then a call refused, then the end.
			var verdicts []loop.Verdict
			for _, f := range findings {
				if f.Pattern == tc.pattern {
					verdicts = append(verdicts, f.Verdict)
				}
			}
			if len(verdicts) < 3 || verdicts[0] != loop.Warn || !slicesContains(verdicts, loop.Deny) || verdicts[len(verdicts)-1] != loop.End {
				t.Fatalf("%s verdicts: %v (all findings %+v)", tc.pattern, verdicts, findings)
			}
			// The warning reached the model in a tool result.
			var warned bool
			for _, m := range a.History() {
				for _, part := range m.Parts {
					if part.ToolResult != nil && strings.Contains(part.ToolResult.Content, "[loop detector]") {
						warned = true
					}
				}
			}
			if !warned {
				t.Fatal("no warning was injected")
			}
		})
	}
}

func TestRepeatedAnswerAndPolling(t *testing.T) {
	e := toolstest.New(t, "standard")
	p := &script{next: func(int, *llm.Request) (*llm.Response, error) { return answer("I cannot do that."), nil }}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit})
	if r := a.Turn(e.Ctx, "x"); r.Stop != loop.StopDone {
		t.Fatalf("first: %+v", r)
	}
	a.Turn(e.Ctx, "x")
	if r := a.Turn(e.Ctx, "x"); r.Stop != loop.StopLoop {
		t.Fatalf("third identical answer: %+v", r)
	}

	// Polling a running process twenty times is not a loop.
	out := e.Call("bash", map[string]any{"command": "sleep 60", "background": true}, false)
	var pid int
	fmt.Sscanf(out, "started pid %d", &pid)
	p2 := &script{next: func(n int, _ *llm.Request) (*llm.Response, error) {
		if n > 20 {
			return answer("still waiting"), nil
		}
		return calls(call(fmt.Sprint(n), "process", map[string]any{"action": "output", "pid": pid})), nil
	}}
	var findings int
	a2, _ := loop.New(loop.Config{Provider: p2, Kit: e.Kit, OnEvent: func(ev loop.Event) {
		if ev.Kind == loop.EventLoop {
			findings++
		}
	}})
	if r := a2.Turn(e.Ctx, "wait for it"); r.Stop != loop.StopDone || findings != 0 {
		t.Fatalf("polling: %+v, %d findings", r, findings)
	}
	e.Call("process", map[string]any{"action": "kill", "pid": pid}, false)
}

func TestCompactionKeepsTheRequest(t *testing.T) {
	e := toolstest.New(t, "standard")
	e.Put("big.txt", strings.Repeat("lorem ipsum dolor sit amet\n", 3000))
	var summaries int
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		if isSummary(req) {
			summaries++
			return answer("## Goal\nread big files\n## Progress\nread big.txt several times"), nil
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == llm.RoleUser && !session.IsSummary(last) {
			return calls(call(fmt.Sprint(n), "bash", map[string]any{"command": fmt.Sprintf("head -c 20000 big.txt; echo %d", n)})), nil
		}
		return answer("done"), nil
	}}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, System: "AGENTS.md: always be brief", Budget: loop.Budget{Window: 12000, Reserve: 2000}})
	for i := 0; i < 6; i++ {
		if r := a.Turn(e.Ctx, fmt.Sprintf("request %d: read the file", i)); r.Stop != loop.StopDone {
			t.Fatalf("turn %d: %+v", i, r)
		}
	}
	if summaries == 0 {
		t.Fatal("never compacted")
	}
	h := a.History()
	if !session.IsSummary(h[0]) {
		t.Fatalf("first message is not the summary: %q", h[0].Text())
	}
	var latest bool
	for _, m := range h {
		if m.Text() == "request 5: read the file" {
			latest = true
		}
	}
	if !latest {
		t.Fatal("the latest request was not kept verbatim")
	}
	for _, r := range p.reqs {
		if !isSummary(r) && r.System != "AGENTS.md: always be brief" {
			t.Fatal("the system prompt changed")
		}
	}
}

func TestOverflowRepeatedEndsTheTurn(t *testing.T) {
	e := toolstest.New(t, "standard")
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		if isSummary(req) {
			return answer("## Goal\nx"), nil
		}
		if n == 1 {
			return calls(call("1", "ls", map[string]any{})), nil
		}
		return nil, &llm.Error{Provider: "script", Status: 400, Message: "prompt is too long", ContextOverflow: true}
	}}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, Budget: loop.Budget{Window: 1 << 20}})
	a.SetHistory([]llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: "earlier"}}}, {Role: llm.RoleAssistant, Parts: []llm.Part{{Text: "ok"}}}})
	r := a.Turn(e.Ctx, "go")
	if r.Stop != loop.StopLoop || !strings.Contains(r.Message, "overflowed") {
		t.Fatalf("%+v", r)
	}
}

func TestCancelMidToolLeavesNoProcess(t *testing.T) {
	e := toolstest.New(t, "standard")
	// A command no other test runs (its argv, as the shell may exec it
	// directly), and that outlives the test's deadline by far: a turn that
	// waited for it never ends in time.
	command := fmt.Sprintf("sleep %d", 3600+time.Now().UnixNano()%1000000)
	p := &script{next: func(n int, _ *llm.Request) (*llm.Response, error) {
		return calls(call("1", "bash", map[string]any{"command": command})), nil
	}}
	marker := `^(\S+ -c )?` + command + "$" // the command, or its shell

	running := func() string {
		out, _ := exec.Command("pgrep", "-f", marker).Output()
		return strings.TrimSpace(string(out))
	}
	t.Cleanup(func() { exec.Command("pkill", "-KILL", "-f", marker).Run() })
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit})
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	turn := make(chan *loop.TurnResult, 1)
	go func() { turn <- a.Turn(ctx, "sleep") }()
	waittest.For(t, 30*time.Second, "the tool's command to run", func() bool { return running() != "" })
	cancel()
	r := waittest.Recv(t, 2*time.Minute, "the cancelled turn to end", turn)
	if r.Stop != loop.StopCancelled {
		t.Fatalf("%+v", r)
	}
	// Every call got a result; the agent can go on.
	h := a.History()
	if last := h[len(h)-1]; last.Role != llm.RoleTool || last.Parts[0].ToolResult == nil {
		t.Fatalf("last message: %+v", last)
	}
	if !waittest.Until(30*time.Second, func() bool { return running() == "" }) {
		t.Fatalf("the cancelled command still runs: pids %s", running())
	}
}

func TestStepLimit(t *testing.T) {
	e := toolstest.New(t, "standard")
	p := &script{next: func(n int, _ *llm.Request) (*llm.Response, error) {
		return calls(call(fmt.Sprint(n), "bash", map[string]any{"command": fmt.Sprintf("echo %d", n)})), nil
	}}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, MaxSteps: 3})
	if r := a.Turn(e.Ctx, "go"); r.Stop != loop.StopSteps || r.Steps != 3 {
		t.Fatalf("%+v", r)
	}
}

func TestCompactionWithinOneLongTurn(t *testing.T) {
	e := toolstest.New(t, "standard")
	e.Put("big.txt", strings.Repeat("lorem ipsum dolor sit amet\n", 3000))
	var compactions []int
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		if isSummary(req) {
			return answer("## Goal\nread the file in pieces"), nil
		}
		if n > 12 {
			return answer("done"), nil
		}
		return calls(call(fmt.Sprint(n), "bash", map[string]any{"command": fmt.Sprintf("head -c 9000 big.txt; echo step %d", n)})), nil
	}}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, Budget: loop.Budget{Window: 10000, Reserve: 1000},
		OnCompaction: func(_ string, kept int) { compactions = append(compactions, kept) }})
	r := a.Turn(e.Ctx, "the one request, verbatim")
	if r.Stop != loop.StopDone {
		t.Fatalf("%+v", r)
	}
	if len(compactions) == 0 {
		t.Fatal("never compacted")
	}
	h := a.History()
	if !session.IsSummary(h[0]) || !strings.Contains(h[0].Text(), "the one request, verbatim") {
		t.Fatalf("the request is not carried verbatim: %q", h[0].Text())
	}
	for _, m := range h[1:] {
		if m.Role == llm.RoleTool && m.Parts[0].ToolResult == nil {
			t.Fatal("a tool message lost its result")
		}
	}
	if h[1].Role == llm.RoleTool {
		t.Fatal("kept history starts with tool results whose call was summarised")
	}
}

func TestForcedCompactionAndModelSwitch(t *testing.T) {
	e := toolstest.New(t, "standard")
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		if isSummary(req) {
			return answer("## Goal\nforced summary"), nil
		}
		return answer(fmt.Sprintf("answer %d", n)), nil
	}}
	var kept []int
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, OnCompaction: func(_ string, k int) { kept = append(kept, k) }})
	if err := a.Compact(e.Ctx); !errors.Is(err, loop.ErrNothingToCompact) {
		t.Fatalf("compacting nothing: %v", err)
	}
	for i := 1; i <= 2; i++ {
		if r := a.Turn(e.Ctx, fmt.Sprintf("request %d", i)); r.Stop != loop.StopDone {
			t.Fatalf("%+v", r)
		}
	}
	// No budget is near: Compact summarises anyway, keeping the latest turn.
	if err := a.Compact(e.Ctx); err != nil {
		t.Fatal(err)
	}
	h := a.History()
	if len(h) != 3 || !session.IsSummary(h[0]) || h[1].Text() != "request 2" || len(kept) != 1 || kept[0] != 2 {
		t.Fatalf("after Compact: %d messages, kept %v", len(h), kept)
	}
	// The next call goes to the new provider and model.
	p2 := &script{next: func(int, *llm.Request) (*llm.Response, error) { return answer("from p2"), nil }}
	a.SetModel(p2, "m2")
	if prov, m := a.Model(); prov != p2 || m != "m2" {
		t.Fatal("Model does not say the switch")
	}
	if r := a.Turn(e.Ctx, "request 3"); r.Answer != "from p2" || p2.reqs[0].Model != "m2" || len(p2.reqs[0].Messages) != 4 {
		t.Fatalf("%+v", r)
	}
}
