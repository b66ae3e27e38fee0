package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

func newManager(t testing.TB, opts ...Option) *Manager {
	t.Helper()
	return NewManager(filepath.Join(t.TempDir(), "sessions"), opts...)
}

func create(t testing.TB, m *Manager) *Session {
	t.Helper()
	s, err := m.Create(Header{Cwd: "/work", Neuron: "ndemo12345", Provider: "anthropic", Model: "claude-x", Agent: "coder", Title: "fix the build"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func reopen(t testing.TB, m *Manager, s *Session) *Session {
	t.Helper()
	s.Close()
	r, err := m.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func user(text string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: text}}}
}

func assistant(text string) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: text}}}
}

// must(t)(s.AppendX(...)) fails the test on an error and returns the entry.
func must(t testing.TB) func(*Entry, error) *Entry {
	return func(e *Entry, err error) *Entry {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

func texts(ms []llm.Message) []string {
	var out []string
	for _, m := range ms {
		switch {
		case IsSummary(m):
			out = append(out, "summary:"+strings.TrimSuffix(strings.TrimPrefix(m.Parts[0].Text, SummaryPrefix), SummarySuffix))
		case len(m.Parts) > 0 && m.Parts[0].ToolResult != nil:
			out = append(out, "result:"+m.Parts[0].ToolResult.Content)
		default:
			out = append(out, m.Text())
		}
	}
	return out
}

func ids(es []*Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRoundTripEveryEntryType(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	call := &llm.ToolCall{ID: "call_1", Name: "read", Input: json.RawMessage(`{"path":"go.mod"}`)}
	written := []*Entry{
		must(t)(s.AppendMessage(user("read go.mod"))),
		must(t)(s.AppendMessage(llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{
			{Thinking: "need the file", Signature: "sig"}, {Text: "reading"}, {ToolCall: call}}})),
		must(t)(s.AppendMessage(llm.Message{Role: llm.RoleTool, Parts: []llm.Part{
			{ToolResult: &llm.ToolResult{CallID: "call_1", Name: "read", Content: "module x\n", IsError: false}}}})),
		must(t)(s.AppendUsage(llm.Usage{InputTokens: 120, OutputTokens: 30, CacheReadTokens: 100})),
		must(t)(s.AppendModelChange("openai", "gpt-x")),
		must(t)(s.AppendSnapshot("turn-3")),
		must(t)(s.AppendCompaction(Compaction{Summary: "goal: build", FirstKeptID: "", TokensBefore: 9000, TokensAfter: 700})),
	}
	if err := s.SetLabel(written[1].ID, "asked"); err != nil {
		t.Fatal(err)
	}
	if err := s.Branch(written[2].ID); err != nil {
		t.Fatal(err)
	}
	before := s.Entries()
	r := reopen(t, m, s)
	after := r.Entries()
	if len(before) != len(after) || len(after) != 1+len(written)+2 {
		t.Fatalf("%d entries written, %d read back", len(before), len(after))
	}
	for i := range before {
		if a, b := jsonOf(t, before[i]), jsonOf(t, after[i]); a != b {
			t.Errorf("entry %d:\nwrote %s\nread  %s", i, a, b)
		}
		if after[i].Line != i+1 {
			t.Errorf("entry %d has line %d", i, after[i].Line)
		}
	}
	types := []Type{TypeHeader, TypeMessage, TypeMessage, TypeMessage, TypeUsage, TypeModelChange, TypeSnapshot, TypeCompaction, TypeLabel, TypeLeaf}
	for i, e := range after {
		if e.Type != types[i] {
			t.Errorf("entry %d is %s, want %s", i, e.Type, types[i])
		}
	}
	h := r.Header()
	if h.Version != Version || h.SessionID != r.ID() || h.Title != "fix the build" || h.Neuron != "ndemo12345" || h.Created.IsZero() {
		t.Errorf("header %+v", h)
	}
	if got := after[2].Message.ToolCalls(); len(got) != 1 || string(got[0].Input) != `{"path":"go.mod"}` {
		t.Errorf("tool call %+v", got)
	}
	if r.Leaf() != written[2].ID {
		t.Errorf("leaf %s after reopen, want %s (the branch)", r.Leaf(), written[2].ID)
	}
	if p, mo := r.Model(); p != "anthropic" || mo != "claude-x" {
		t.Errorf("model at the branch point %s/%s, want the header's", p, mo)
	}
}

func TestUnknownTypesAreKeptAndSkipped(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	u := must(t)(s.AppendMessage(user("hi")))
	s.Close()
	line := fmt.Sprintf(`{"id":"future01","parentId":%q,"type":"hologram","time":"2030-01-01T00:00:00Z","hologram":{"depth":3},"n":3}`+"\n", u.ID)
	appendRaw(t, s.File(), line)

	r, err := m.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e, ok := r.Get("future01")
	if !ok || e.Type != "hologram" || e.Type.Known() || !strings.Contains(string(e.Raw), `"depth":3`) {
		t.Fatalf("unknown entry %+v", e)
	}
	if r.Leaf() != "future01" {
		t.Errorf("leaf %s", r.Leaf())
	}
	a := must(t)(r.AppendMessage(assistant("hello")))
	if a.ParentID != "future01" {
		t.Errorf("appended under %s", a.ParentID)
	}
	if got := texts(r.Messages()); !reflect.DeepEqual(got, []string{"hi", "hello"}) {
		t.Errorf("messages %q", got)
	}
	f, err := r.Fork("")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if e, ok := f.Get("future01"); !ok || !strings.Contains(string(e.Raw), `"hologram":{"depth":3}`) {
		t.Errorf("fork lost the unknown entry: %+v", e)
	}
	if _, err := r.Append(Entry{Type: "hologram"}); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("Append of an unknown type: %v", err)
	}
}

func TestTreeBranchAndPath(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	u1 := must(t)(s.AppendMessage(user("u1")))
	a1 := must(t)(s.AppendMessage(assistant("a1")))
	u2 := must(t)(s.AppendMessage(user("u2")))
	a2 := must(t)(s.AppendMessage(assistant("a2")))
	root := s.Path()[0]
	if root.Type != TypeHeader || u1.ParentID != root.ID || a2.ParentID != u2.ID {
		t.Fatalf("chain broken: root %+v u1 %+v", root, u1)
	}

	if err := s.Branch(a1.ID); err != nil {
		t.Fatal(err)
	}
	if got := texts(s.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1"}) {
		t.Errorf("after rewind %q", got)
	}
	u3 := must(t)(s.AppendMessage(user("u3")))
	if u3.ParentID != a1.ID {
		t.Errorf("u3 parent %s, want a1 %s", u3.ParentID, a1.ID)
	}
	if got := ids(s.Children(a1.ID)); !reflect.DeepEqual(got, []string{u2.ID, u3.ID}) {
		t.Errorf("children of a1 %v, want siblings u2 u3", got)
	}
	if got := ids(s.Path()); !reflect.DeepEqual(got, []string{root.ID, u1.ID, a1.ID, u3.ID}) {
		t.Errorf("path %v", got)
	}
	if got := texts(s.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u3"}) {
		t.Errorf("messages %q", got)
	}
	if p, err := s.PathTo(a2.ID); err != nil || len(p) != 5 || p[4].ID != a2.ID {
		t.Errorf("PathTo(a2) %v %v", ids(p), err)
	}

	r := reopen(t, m, s)
	if r.Leaf() != u3.ID {
		t.Errorf("leaf after reopen %s, want the last appended u3", r.Leaf())
	}
	if err := r.Branch(a2.ID); err != nil {
		t.Fatal(err)
	}
	r2 := reopen(t, m, r)
	if r2.Leaf() != a2.ID {
		t.Errorf("leaf after branch+reopen %s, want a2", r2.Leaf())
	}
	if got := texts(r2.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u2", "a2"}) {
		t.Errorf("messages %q", got)
	}
	if err := r2.Branch(root.ID); err != nil || len(r2.Messages()) != 0 {
		t.Errorf("rewind to the header: %v, %d messages", err, len(r2.Messages()))
	}

	if err := r2.Branch("nosuchid"); !IsNotFound(err) {
		t.Errorf("branch to a missing entry: %v", err)
	}
	if err := r2.SetLabel(u1.ID, "start"); err != nil {
		t.Fatal(err)
	}
	lbl := r2.Entries()[len(r2.Entries())-1]
	if err := r2.Branch(lbl.ID); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("branch to a label entry: %v", err)
	}
	if r2.Leaf() != root.ID {
		t.Errorf("a label moved the leaf to %s", r2.Leaf())
	}
}

func TestFork(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	u1 := must(t)(s.AppendMessage(user("u1")))
	a1 := must(t)(s.AppendMessage(assistant("a1")))
	must(t)(s.AppendMessage(user("u2")))
	if err := s.SetLabel(u1.ID, "first"); err != nil {
		t.Fatal(err)
	}
	before := jsonOf(t, s.Entries())

	f, err := s.Fork(a1.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.ID() == s.ID() || filepath.Dir(f.File()) != filepath.Dir(s.File()) {
		t.Fatalf("fork %s at %s", f.ID(), f.File())
	}
	h := f.Header()
	if h.ParentSession != s.ID() || h.ParentEntry != a1.ID || h.Title != "fix the build" || h.Model != "claude-x" {
		t.Errorf("fork header %+v", h)
	}
	path := f.Path()
	if got := ids(path[1:]); !reflect.DeepEqual(got, []string{u1.ID, a1.ID}) || path[0].Type != TypeHeader || path[1].ParentID != path[0].ID {
		t.Errorf("fork path %v", ids(path))
	}
	if f.Leaf() != a1.ID {
		t.Errorf("fork leaf %s", f.Leaf())
	}
	if e, err := f.Find("first"); err != nil || e.ID != u1.ID {
		t.Errorf("label not copied: %v %v", e, err)
	}
	must(t)(f.AppendMessage(user("u3 in fork")))
	if got := texts(f.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u3 in fork"}) {
		t.Errorf("fork messages %q", got)
	}
	if jsonOf(t, s.Entries()) != before {
		t.Error("forking changed the original")
	}
	s2 := reopen(t, m, s)
	if got := texts(s2.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u2"}) {
		t.Errorf("original messages %q", got)
	}
	f2, err := m.Open(f.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if got := texts(f2.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u3 in fork"}) {
		t.Errorf("reopened fork %q", got)
	}
	// Forking at the root copies nothing but the header.
	f3, err := s2.Fork(s2.Path()[0].ID)
	if err != nil || len(f3.Entries()) != 1 {
		t.Fatalf("fork at the root: %v", err)
	}
	f3.Close()
}

func TestMessagesHonourTheLatestCompaction(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	must(t)(s.AppendMessage(user("u1")))
	must(t)(s.AppendMessage(assistant("a1")))
	u2 := must(t)(s.AppendMessage(user("u2")))
	a2 := must(t)(s.AppendMessage(assistant("a2")))
	must(t)(s.AppendUsage(llm.Usage{InputTokens: 1}))
	must(t)(s.AppendCompaction(Compaction{Summary: "S1", FirstKeptID: u2.ID, TokensBefore: 100, TokensAfter: 40}))
	must(t)(s.AppendMessage(user("u3")))
	want := []string{"summary:S1", "u2", "a2", "u3"}
	if got := texts(s.Messages()); !reflect.DeepEqual(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
	if ms := s.Messages(); !IsSummary(ms[0]) || ms[0].Role != llm.RoleUser || IsSummary(ms[1]) {
		t.Errorf("first message %+v is not marked a summary", ms[0])
	}
	must(t)(s.AppendMessage(assistant("a3")))
	must(t)(s.AppendCompaction(Compaction{Summary: "S2"}))
	must(t)(s.AppendMessage(user("u4")))
	if got := texts(reopen(t, m, s).Messages()); !reflect.DeepEqual(got, []string{"summary:S2", "u4"}) {
		t.Errorf("after a second compaction %q", got)
	}
	// A compaction on another branch does not apply.
	r := reopen(t, m, s)
	if err := r.Branch(a2.ID); err != nil {
		t.Fatal(err)
	}
	must(t)(r.AppendMessage(user("u5")))
	if got := texts(r.Messages()); !reflect.DeepEqual(got, []string{"u1", "a1", "u2", "a2", "u5"}) {
		t.Errorf("on a branch without compaction %q", got)
	}
}

func TestLabels(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	u1 := must(t)(s.AppendMessage(user("u1")))
	a1 := must(t)(s.AppendMessage(assistant("a1")))
	if err := s.SetLabel(u1.ID, "good"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLabel(a1.ID, "done"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLabel(a1.ID, "good"); err != nil { // moves the name
		t.Fatal(err)
	}
	if s.Leaf() != a1.ID {
		t.Errorf("labels moved the leaf to %s", s.Leaf())
	}
	r := reopen(t, m, s)
	if got := r.Labels(); !reflect.DeepEqual(got, map[string]string{"good": a1.ID, "done": a1.ID}) {
		t.Errorf("labels %v", got)
	}
	if e, err := r.Find("good"); err != nil || e.ID != a1.ID {
		t.Errorf("Find(good) %v %v", e, err)
	}
	if err := r.RemoveLabel("done"); err != nil {
		t.Fatal(err)
	}
	r = reopen(t, m, r)
	if _, err := r.Find("done"); !IsNotFound(err) {
		t.Errorf("removed label: %v", err)
	}
	if err := r.SetLabel("missing", "x"); !IsNotFound(err) {
		t.Errorf("label on a missing entry: %v", err)
	}
	if err := r.SetLabel(u1.ID, ""); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("empty label: %v", err)
	}
	if r.Leaf() != a1.ID {
		t.Errorf("leaf %s after reopen, want a1: labels are not on the path", r.Leaf())
	}
}

func TestModelAndSnapshots(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	u1 := must(t)(s.AppendMessage(user("u1")))
	a1 := must(t)(s.AppendMessage(assistant("a1")))
	must(t)(s.AppendSnapshot("snap-before-turn-2"))
	must(t)(s.AppendMessage(user("u2: edit files")))
	must(t)(s.AppendModelChange("openai", "gpt-y"))
	a2 := must(t)(s.AppendMessage(assistant("a2 edited")))
	must(t)(s.AppendSnapshot("snap-before-turn-3"))
	if p, mo := s.Model(); p != "openai" || mo != "gpt-y" {
		t.Errorf("model %s/%s", p, mo)
	}
	for id, want := range map[string]string{u1.ID: "snap-before-turn-2", a1.ID: "snap-before-turn-2", a2.ID: "snap-before-turn-3"} {
		if name, ok, err := s.SnapshotFor(id); err != nil || !ok || name != want {
			t.Errorf("SnapshotFor(%s) = %q %v %v, want %q", id, name, ok, err, want)
		}
	}
	if _, ok, err := s.SnapshotFor(s.Leaf()); ok || err != nil {
		t.Errorf("SnapshotFor(leaf): %v %v", ok, err)
	}
	if _, err := s.AppendSnapshot(""); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("empty snapshot name: %v", err)
	}
	// A checkpoint says which neuron it saved, or why it could not.
	must(t)(s.AppendMessage(user("u3")))
	u3 := s.Leaf()
	must(t)(s.AppendCheckpoint(Snapshot{Name: "ckpt-3", Neuron: "n1", Error: "disk full"}))
	c, ok, err := reopen(t, m, s).CheckpointAfter(u3)
	if err != nil || !ok || *c != (Snapshot{Name: "ckpt-3", Neuron: "n1", Error: "disk full"}) {
		t.Errorf("CheckpointAfter(u3) = %+v %v %v", c, ok, err)
	}
}

func TestHistoryNamesEachMessagesEntry(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	must(t)(s.AppendMessage(user("u1")))
	must(t)(s.AppendMessage(assistant("a1")))
	u2 := must(t)(s.AppendMessage(user("u2")))
	must(t)(s.AppendSnapshot("ckpt"))
	a2 := must(t)(s.AppendMessage(assistant("a2")))
	c := must(t)(s.AppendCompaction(Compaction{Summary: "S", FirstKeptID: u2.ID}))
	u3 := must(t)(s.AppendMessage(user("u3")))
	msgs, ids := reopen(t, m, s).History()
	if got := texts(msgs); !reflect.DeepEqual(got, []string{"summary:S", "u2", "a2", "u3"}) {
		t.Fatalf("messages %q", got)
	}
	if want := []string{c.ID, u2.ID, a2.ID, u3.ID}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if !reflect.DeepEqual(texts(s.Messages()), texts(msgs)) {
		t.Fatal("History and Messages disagree")
	}
}

func TestManagerListContinueDelete(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if _, err := m.Continue(); !IsNotFound(err) {
		t.Errorf("Continue with no sessions: %v", err)
	}
	if l, err := m.List(); err != nil || len(l) != 0 {
		t.Errorf("List of a missing dir: %v %v", l, err)
	}
	a := create(t, m)
	must(t)(a.AppendMessage(user("a")))
	b, err := m.Create(Header{SessionID: "named-session", Title: "b", Model: "m-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := m.Create(Header{SessionID: "named-session"}); err == nil {
		t.Error("Create replaced an existing session")
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(b.File(), old, old); err != nil {
		t.Fatal(err)
	}
	// Litter the directory with files that are not sessions.
	os.WriteFile(filepath.Join(m.Dir(), "notes.txt"), nil, 0o600)
	os.WriteFile(filepath.Join(m.Dir(), ".hidden.jsonl"), nil, 0o600)
	os.WriteFile(filepath.Join(m.Dir(), "broken.jsonl"), []byte("not json\n"), 0o600)

	list, err := m.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].ID != a.ID() && list[0].ID != "broken" {
		t.Fatalf("list %+v", list)
	}
	byID := map[string]Info{}
	for _, i := range list {
		byID[i.ID] = i
	}
	if i := byID[a.ID()]; i.Title != "fix the build" || i.Model != "claude-x" || i.Entries != 2 || i.Err != nil || i.Created.IsZero() {
		t.Errorf("info %+v", i)
	}
	if i := byID["named-session"]; i.Entries != 1 || i.Model != "m-b" || i.Modified.After(old.Add(time.Second)) {
		t.Errorf("info %+v", i)
	}
	if i := byID["broken"]; !IsCorrupt(i.Err) {
		t.Errorf("broken session: %+v", i)
	}
	if list[len(list)-1].ID != "named-session" {
		t.Errorf("oldest is not last: %+v", list)
	}
	os.Remove(filepath.Join(m.Dir(), "broken.jsonl"))

	c, err := m.Continue()
	if err != nil || c.ID() != a.ID() {
		t.Fatalf("Continue %v, want %s", err, a.ID())
	}
	c.Close()
	if err := m.Delete(a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Open(a.ID()); !IsNotFound(err) {
		t.Errorf("Open after Delete: %v", err)
	}
	if err := m.Delete(a.ID()); !IsNotFound(err) {
		t.Errorf("Delete twice: %v", err)
	}
}

func TestInvalidIDs(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	create(t, m) // the directory exists
	outside := filepath.Join(filepath.Dir(m.Dir()), "victim.jsonl")
	os.WriteFile(outside, []byte("{}\n"), 0o600)
	for _, id := range []string{"", "../victim", "a/b", "..", ".", ".hidden", "-rf", "x\x00y", strings.Repeat("x", 65), "sp ace", "ü"} {
		if _, err := m.Open(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Open(%q): %v", id, err)
		}
		if err := m.Delete(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Delete(%q): %v", id, err)
		}
		if _, err := m.Create(Header{SessionID: id}); id != "" && !errors.Is(err, ErrInvalidID) {
			t.Errorf("Create(%q): %v", id, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the file outside was touched: %v", err)
	}
	if err := ValidateID("s0123abcd9"); err != nil {
		t.Error(err)
	}
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s := create(t, m)
	f, err := s.Fork("")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := os.Stat(m.Dir())
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("sessions dir %v %v", st.Mode(), err)
	}
	for _, p := range []string{s.File(), f.File()} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", p, st.Mode(), err)
		}
	}
	des, _ := os.ReadDir(m.Dir())
	if len(des) != 2 {
		t.Errorf("temporary files left: %v", des)
	}
}

func appendRaw(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// A session exported from one home and imported into another is the same
// session; what is imported is input: a file of another id, or one that
// does not load, is refused and the session already there is kept.
func TestExportImport(t *testing.T) {
	t.Parallel()
	from, to := newManager(t), newManager(t)
	s := create(t, from)
	must(t)(s.AppendMessage(user("carried over")))
	data, mod, err := from.Export(s.ID())
	if err != nil || mod.IsZero() {
		t.Fatalf("export: %v", err)
	}
	if err := to.Import(s.ID(), data); err != nil {
		t.Fatal(err)
	}
	got, err := to.Open(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	msgs := got.Messages()
	got.Close()
	if len(msgs) != 1 || msgs[0].Text() != "carried over" {
		t.Fatalf("imported messages: %+v", msgs)
	}
	for name, bad := range map[string][]byte{
		"another id's":  bytes.Replace(data, []byte(s.ID()), []byte("s-other-one"), 1),
		"not a session": []byte("{\"nope\":1}\n"),
		"empty":         nil,
	} {
		if err := to.Import(s.ID(), bad); err == nil {
			t.Errorf("%s file imported", name)
		}
	}
	if again, _, err := to.Export(s.ID()); err != nil || !bytes.Equal(again, data) {
		t.Fatalf("the session after refused imports: %v", err)
	}
	if err := to.Import("../x", data); !errors.Is(err, ErrInvalidID) {
		t.Errorf("import under a bad id: %v", err)
	}
	if _, _, err := to.Export("never"); !IsNotFound(err) {
		t.Errorf("export of a missing session: %v", err)
	}
	if ents, _ := os.ReadDir(to.Dir()); len(ents) != 1 {
		t.Errorf("left in the directory: %v", ents)
	}
}
