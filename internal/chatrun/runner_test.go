package chatrun_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func TestMain(m *testing.M) {
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

// script is a provider whose answers the test writes, per model: turn
// requests go to next; summary and suggestion requests to their own
// functions. It records every request.
type script struct {
	mu      sync.Mutex
	model   string
	reqs    []*llm.Request
	next    func(n int, req *llm.Request) *llm.Response
	turns   int
	summary string
	suggest string
	block   chan struct{} // when set, a turn request waits for it
}

func (s *script) Name() string { return "script" }

func (s *script) Stream(ctx context.Context, req *llm.Request, on func(llm.Event)) (*llm.Response, error) {
	s.mu.Lock()
	cp := *req
	cp.Messages = append([]llm.Message(nil), req.Messages...)
	s.reqs = append(s.reqs, &cp)
	var r *llm.Response
	switch {
	case strings.Contains(req.System, "compact the history"):
		r = answer(s.summary)
	case strings.Contains(req.System, "predict what the user"):
		r = answer(s.suggest)
	default:
		s.turns++
		n := s.turns
		block := s.block
		s.mu.Unlock()
		if block != nil {
			select {
			case <-block:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		r = s.next(n, req)
		s.mu.Lock()
	}
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if on != nil && r.Message.Text() != "" {
		on(llm.Event{Kind: llm.EventText, Text: r.Message.Text()})
	}
	return r, nil
}

func (s *script) requests() []*llm.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*llm.Request(nil), s.reqs...)
}

func answer(text string) *llm.Response {
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: text}}}, Stop: llm.StopEnd}
}

func toolCall(id, name string, input any) *llm.Response {
	b, _ := json.Marshal(input)
	return &llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{ToolCall: &llm.ToolCall{ID: id, Name: name, Input: b}}}}, Stop: llm.StopToolUse}
}

// actions answers each turn with its tool calls in order, then "done N".
type actions [][]*llm.Response

func (a actions) next(_ int, req *llm.Request) *llm.Response {
	// The step of the current turn: the assistant messages after the
	// latest request.
	step := 0
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser && !session.IsSummary(m) {
			step = 0
		} else if m.Role == llm.RoleAssistant {
			step++
		}
	}
	if i := turnIndex(req) - 1; i >= 0 && i < len(a) && step < len(a[i]) {
		return a[i][step]
	}
	return answer("done " + lastRequest(req))
}

// turnIndex is the number in the latest request ("turn 2: ...").
func turnIndex(req *llm.Request) int {
	var n int
	for _, c := range lastRequest(req) {
		if c >= '0' && c <= '9' {
			n = n*10 + int(c-'0')
		} else if n > 0 {
			break
		}
	}
	return n
}

func lastRequest(req *llm.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == llm.RoleUser && !session.IsSummary(m) {
			return m.Text()
		}
	}
	return ""
}

// fixture is a real process-mode neuron and a chat on it.
type fixture struct {
	t     testing.TB
	env   *toolstest.Env
	host  *chatrun.Host
	provs map[string]*script // by model
}

func newFixture(t testing.TB, a actions) *fixture {
	env := toolstest.New(t, "standard")
	f := &fixture{t: t, env: env, provs: map[string]*script{}}
	f.provs["m1"] = &script{model: "m1", next: a.next, summary: "## Goal\nthe summary", suggest: "\"run the tests\"\nand more"}
	f.host = &chatrun.Host{
		Set: env.Set, Layout: env.Layout,
		Ensure: func(ctx context.Context, id string) (string, error) {
			if id != "" && id != env.State.ID {
				return "", errors.New("this test has one neuron")
			}
			return env.State.ID, nil
		},
		Providers: func(cfg llm.Config) (llm.Provider, error) {
			p := f.provs[cfg.Model]
			if p == nil {
				return nil, errors.New("no such model: " + cfg.Model)
			}
			return p, nil
		},
	}
	return f
}

func (f *fixture) open(o chatrun.Options) *chatrun.Runner {
	f.t.Helper()
	if o.LLM.Model == "" {
		o.LLM = llm.Config{Provider: "openai", Model: "m1"}
	}
	r, err := chatrun.Open(f.env.Ctx, f.host, o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.Close() })
	return r
}

func (f *fixture) turn(r *chatrun.Runner, request string) *chatrun.TurnResult {
	f.t.Helper()
	res, err := r.Turn(f.env.Ctx, request, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if res.Stop != loop.StopDone || res.SessionErr != nil {
		f.t.Fatalf("%s: %+v %v", request, res.TurnResult, res.SessionErr)
	}
	return res
}

func (f *fixture) exists(rel string) bool {
	_, err := os.Stat(f.env.File(rel))
	return err == nil
}

func checkpoints(t *testing.T, f *fixture) []string {
	t.Helper()
	all, err := store.ListSnapshots(f.env.Layout.SnapshotsDir(f.env.State.ID))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
	}
	return names
}

func TestRewindPutsFilesAndConversationBack(t *testing.T) {
	f := newFixture(t, actions{
		{toolCall("w1", "write", map[string]any{"path": "notes.txt", "content": "first\n"})},
		{toolCall("e1", "edit", map[string]any{"path": "notes.txt", "old_string": "first", "new_string": "second"})},
		{toolCall("r1", "read", map[string]any{"path": "notes.txt"})},
	})
	r := f.open(chatrun.Options{})
	res1 := f.turn(r, "turn 1: write notes")
	res2 := f.turn(r, "turn 2: edit notes")
	res3 := f.turn(r, "turn 3: read notes")
	if res1.Checkpoint == nil || res2.Checkpoint == nil || res3.Checkpoint != nil {
		t.Fatalf("checkpoints: %+v %+v %+v (a read-only turn takes none)", res1.Checkpoint, res2.Checkpoint, res3.Checkpoint)
	}
	if got := f.env.Get("notes.txt"); got != "second\n" {
		t.Fatalf("notes.txt: %q", got)
	}
	turns := r.Turns()
	if len(turns) != 3 || turns[0].Files != chatrun.FilesRestored || turns[1].Files != chatrun.FilesRestored || turns[2].Files != chatrun.FilesUnchanged {
		t.Fatalf("turns: %+v", turns)
	}
	// Back to before the edit: the file as the first turn left it.
	rw, err := r.Rewind(f.env.Ctx, turns[1].Entry, false)
	if err != nil {
		t.Fatal(err)
	}
	if rw.Restored != res2.Checkpoint.Name || f.env.Get("notes.txt") != "first\n" {
		t.Fatalf("rewound %+v, notes.txt %q", rw, f.env.Get("notes.txt"))
	}
	if msgs := r.Messages(); len(msgs) != 4 || msgs[0].Text() != "turn 1: write notes" {
		t.Fatalf("conversation after the rewind: %d messages", len(msgs))
	}
	// Back to before the first request: no file, no conversation.
	turns = r.Turns()
	if len(turns) != 1 {
		t.Fatalf("turns after the rewind: %+v", turns)
	}
	if _, err := r.Rewind(f.env.Ctx, turns[0].Entry, false); err != nil {
		t.Fatal(err)
	}
	if f.exists("notes.txt") || len(r.Messages()) != 0 {
		t.Fatalf("after the rewind to the start: file %v, %d messages", f.exists("notes.txt"), len(r.Messages()))
	}
	// The agent goes on from there: its next request carries nothing of
	// the rewound turns, the tools work in the restarted neuron, and the
	// session keeps the old branch.
	f.turn(r, "turn 1: write notes again")
	reqs := f.provs["m1"].requests()
	last := reqs[len(reqs)-1]
	for _, m := range last.Messages {
		if strings.Contains(m.Text(), "edit notes") {
			t.Fatal("a rewound request reached the model")
		}
	}
	if f.env.Get("notes.txt") != "first\n" {
		t.Fatal("the neuron does not work after the restore")
	}
	var old int
	for _, e := range r.Session().Entries() {
		if e.Message != nil && e.Message.Role == llm.RoleUser && e.Message.Text() == "turn 2: edit notes" {
			old++
		}
	}
	if old != 1 {
		t.Fatal("the old branch is gone from the session file")
	}
	// A reopened session is where the rewind left it.
	id := r.ID()
	r.Close()
	again := f.open(chatrun.Options{Resume: id})
	if msgs := again.Messages(); len(msgs) != 4 || msgs[0].Text() != "turn 1: write notes again" {
		t.Fatalf("reopened: %d messages", len(msgs))
	}
}

func TestCheckpointsArePruned(t *testing.T) {
	var a actions
	for i := 1; i <= 4; i++ {
		a = append(a, []*llm.Response{toolCall("w", "bash", map[string]any{"command": "echo " + string(rune('0'+i)) + " > f" + string(rune('0'+i))})})
	}
	f := newFixture(t, a)
	if _, err := store.CreateSnapshot(f.env.Layout.SnapshotsDir(f.env.State.ID), "mine", f.env.State.ID, f.env.State.OverlayPath); err != nil {
		t.Fatal(err)
	}
	r := f.open(chatrun.Options{Checkpoints: 2})
	var pruned []string
	for i := 1; i <= 4; i++ {
		res := f.turn(r, "turn "+string(rune('0'+i))+": write")
		pruned = append(pruned, res.Checkpoint.Pruned...)
	}
	names := checkpoints(t, f)
	var ours []string
	for _, n := range names {
		if strings.HasPrefix(n, chatrun.CheckpointPrefix) {
			ours = append(ours, n)
		}
	}
	if len(ours) != 2 || len(pruned) != 2 || !contains(names, "mine") {
		t.Fatalf("snapshots %v, pruned %v (bound 2; other snapshots are never pruned)", names, pruned)
	}
	turns := r.Turns()
	if turns[0].Files != chatrun.FilesLost || !strings.Contains(turns[0].Why, "pruned") || turns[2].Files != chatrun.FilesRestored {
		t.Fatalf("turns: %+v", turns)
	}
	// Files that cannot be put back stop the rewind, unless the caller
	// keeps them as they are.
	_, err := r.Rewind(f.env.Ctx, turns[0].Entry, false)
	if !errors.Is(err, chatrun.ErrFilesLost) || len(r.Turns()) != 4 {
		t.Fatalf("rewind over a pruned checkpoint: %v", err)
	}
	if _, err := r.Rewind(f.env.Ctx, turns[0].Entry, true); err != nil {
		t.Fatal(err)
	}
	if len(r.Turns()) != 0 || !f.exists("f4") {
		t.Fatal("the conversation alone was not rewound")
	}
}

func TestCheckpointsOff(t *testing.T) {
	f := newFixture(t, actions{{toolCall("w1", "write", map[string]any{"path": "a.txt", "content": "x"})}})
	r := f.open(chatrun.Options{Checkpoints: -1})
	if res := f.turn(r, "turn 1: write"); res.Checkpoint != nil {
		t.Fatal("a checkpoint with checkpoints off")
	}
	turns := r.Turns()
	if turns[0].Files != chatrun.FilesUnknown {
		t.Fatalf("%+v", turns)
	}
	if _, err := r.Rewind(f.env.Ctx, turns[0].Entry, false); !errors.Is(err, chatrun.ErrFilesLost) {
		t.Fatalf("rewind with checkpoints off: %v", err)
	}
}

func TestModelForkCompact(t *testing.T) {
	f := newFixture(t, actions{})
	f.provs["m2"] = &script{model: "m2", next: func(int, *llm.Request) *llm.Response { return answer("from m2") }, summary: "## Goal\nsummary by m2"}
	r := f.open(chatrun.Options{})
	f.turn(r, "turn 1: hello")
	if err := r.SetModel("openai/m2"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetModel("nosuch"); err == nil {
		t.Fatal("switched to a model the factory refuses")
	}
	if p, m := r.Model(); p != "openai" || m != "m2" {
		t.Fatalf("model %s/%s", p, m)
	}
	res := f.turn(r, "turn 2: hello again")
	if res.Answer != "from m2" {
		t.Fatalf("answer %q", res.Answer)
	}
	if p, m := r.Session().Model(); p != "openai" || m != "m2" {
		t.Fatalf("the session says %s/%s", p, m)
	}
	// Compaction now: turn 1 becomes the summary, turn 2 stays verbatim,
	// also for a reader of the file.
	var events []string
	if err := r.Compact(f.env.Ctx, func(e chatrun.Event) { events = append(events, e.Text) }); err != nil {
		t.Fatal(err)
	}
	msgs := r.Messages()
	if len(msgs) != 3 || !session.IsSummary(msgs[0]) || !strings.Contains(msgs[0].Text(), "summary by m2") || msgs[1].Text() != "turn 2: hello again" {
		t.Fatalf("after compaction: %+v (events %v)", msgs, events)
	}
	// Fork at the current point: a new session with the same conversation;
	// the old one does not grow any more.
	oldID, oldLen := r.ID(), r.Session().Len()
	newID, err := r.Fork("")
	if err != nil || newID == oldID || r.ID() != newID {
		t.Fatalf("fork: %q %v", newID, err)
	}
	f.turn(r, "turn 3: in the fork")
	mgr := session.ForLayout(f.env.Layout)
	old, err := mgr.Open(oldID)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	fork := r.Session()
	if old.Len() != oldLen || fork.Header().ParentSession != oldID || len(r.Messages()) != 5 {
		t.Fatalf("old %d entries (was %d), fork parent %q, %d messages", old.Len(), oldLen, fork.Header().ParentSession, len(r.Messages()))
	}
	// A resumed fork follows its model switch when asked to.
	r.Close()
	again := f.open(chatrun.Options{Resume: newID, FollowSession: true})
	if p, m := again.Model(); p != "openai" || m != "m2" {
		t.Fatalf("resumed with %s/%s", p, m)
	}
	if err := again.Compact(f.env.Ctx, nil); !errors.Is(err, loop.ErrNothingToCompact) && err != nil {
		t.Fatalf("compact: %v", err)
	}
}

func TestBusyAndSuggest(t *testing.T) {
	f := newFixture(t, actions{})
	r := f.open(chatrun.Options{})
	if s, err := r.Suggest(f.env.Ctx); s != "" || err != nil {
		t.Fatalf("a suggestion before any exchange: %q %v", s, err)
	}
	p := f.provs["m1"]
	p.block = make(chan struct{})
	done := make(chan *chatrun.TurnResult)
	go func() {
		res, _ := r.Turn(f.env.Ctx, "turn 1: slow", nil)
		done <- res
	}()
	waittest.For(t, 30*time.Second, "the first turn's request", func() bool { return len(p.requests()) > 0 })
	if _, err := r.Turn(f.env.Ctx, "turn 2: meanwhile", nil); !errors.Is(err, chatrun.ErrBusy) {
		t.Fatalf("a second turn: %v", err)
	}
	if _, err := r.Suggest(f.env.Ctx); !errors.Is(err, chatrun.ErrBusy) {
		t.Fatalf("a suggestion during a turn: %v", err)
	}
	close(p.block)
	if res := <-done; res == nil || res.Stop != loop.StopDone {
		t.Fatalf("%+v", res)
	}
	s, err := r.Suggest(f.env.Ctx)
	if err != nil || s != "run the tests" {
		t.Fatalf("suggestion %q %v", s, err)
	}
	reqs := p.requests()
	last := reqs[len(reqs)-1]
	if last.MaxTokens == 0 || len(last.Tools) != 0 || len(last.Messages) != 1 || !strings.Contains(last.Messages[0].Text(), "turn 1: slow") {
		t.Fatalf("the suggestion request: %+v", last)
	}
	// A suggestion is never part of the conversation.
	for _, m := range r.Messages() {
		if strings.Contains(m.Text(), "run the tests") {
			t.Fatal("the suggestion reached the session")
		}
	}
}

func TestRecord(t *testing.T) {
	rec, ok := chatrun.Record(chatrun.Event{Event: loop.Event{Kind: chatrun.EventCheckpoint}, Checkpoint: &chatrun.Checkpoint{Name: "ckpt-s-1", Neuron: "n1", Files: 3, Err: "disk full"}})
	if !ok || rec["type"] != "checkpoint" || rec["name"] != "ckpt-s-1" || rec["error"] != "disk full" {
		t.Fatalf("%v", rec)
	}
	if _, ok := chatrun.Record(chatrun.Event{Event: loop.Event{Kind: loop.EventModel, Model: &llm.Event{Kind: llm.EventToolDelta, Text: "{"}}}); ok {
		t.Fatal("a piece of tool input recorded")
	}
	b, err := json.Marshal(chatrun.Turn{N: 1, Files: chatrun.FilesLost})
	if err != nil || !strings.Contains(string(b), `"files":"lost"`) {
		t.Fatalf("%s %v", b, err)
	}
}

func TestParseModel(t *testing.T) {
	for _, tc := range []struct{ spec, cur, p, m string }{
		{"gpt-5", "openai", "openai", "gpt-5"},
		{"anthropic/claude-sonnet-4-5", "openai", "anthropic", "claude-sonnet-4-5"},
		{"meta-llama/Llama-3.1-8B", "vllm", "vllm", "meta-llama/Llama-3.1-8B"},
	} {
		p, m, err := chatrun.ParseModel(tc.spec, tc.cur)
		if err != nil || p != tc.p || m != tc.m {
			t.Errorf("%q: %s %s %v", tc.spec, p, m, err)
		}
	}
	for _, bad := range []string{"", "openai/", "two words"} {
		if _, _, err := chatrun.ParseModel(bad, "openai"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
