package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChatCompactionKeepsAgentsMDAndRequest drives a chat whose context
// window a long answer overflows: what reaches the model after the
// compaction holds AGENTS.md (in the system prompt), the summary and the
// latest request verbatim, and nothing of the long answer; /compact then
// compacts again, updating the summary, and the session file says so.
func TestChatCompactionKeepsAgentsMDAndRequest(t *testing.T) {
	c := newCLI(t, "process")
	agents := filepath.Join(c.home, "agents", "default")
	if err := os.MkdirAll(agents, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agents, "AGENTS.md"), []byte("AGENTS-MARKER: run make check before saying done.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog, over and over again. ", 4600) // ~300 KB
	summaries := 0
	fake := &fakeOpenAI{route: func(body map[string]any) func(io.Writer) {
		if isSummaryRequest(body) {
			summaries++
			return text(fmt.Sprintf("## Goal\nSUMMARY-MARKER-%d", summaries))
		}
		switch req, _ := lastUser(body); req {
		case "first request":
			return text(long)
		default:
			return text("ok: " + req)
		}
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c.env = append(c.env, "OPENAI_API_KEY=test-key")
	stdin := "first request\nsecond request\nthird request\n/compact\nfourth request\n/exit\n"
	out, errs, code := c.run(stdin, "chat", "agent1", "--provider", "openai", "--model", "fake", "--base-url", srv.URL+"/v1",
		"--context-window", "60000")
	if code != 0 {
		t.Fatalf("chat: exit %d\n%s\n%s", code, out, errs)
	}
	reqs := fake.requests()
	var turns, sums []map[string]any
	for _, b := range reqs {
		if isSummaryRequest(b) {
			sums = append(sums, b)
		} else {
			turns = append(turns, b)
		}
	}
	if len(sums) != 2 || len(turns) != 4 {
		t.Fatalf("%d summary requests, %d turn requests\nstderr: %s", len(sums), len(turns), errs)
	}
	// The turn after the automatic compaction.
	second := turns[1]
	msgs := messages(second)
	if req, _ := lastUser(second); req != "second request" {
		t.Fatalf("the second turn asked %q", req)
	}
	if !strings.Contains(system(second), "AGENTS-MARKER") {
		t.Fatal("AGENTS.md is not in the system prompt after the compaction")
	}
	if len(msgs) != 3 || !strings.HasPrefix(content(msgs[1]), "<conversation-summary>") || !strings.Contains(content(msgs[1]), "SUMMARY-MARKER-1") {
		t.Fatalf("after the compaction the model got %d messages: %v", len(msgs), msgs)
	}
	for _, m := range msgs {
		if strings.Contains(content(m), "quick brown fox") {
			t.Fatal("the long answer was sent after the compaction")
		}
	}
	// /compact: the summary request updates the previous summary; the
	// latest request before it (third) stays verbatim.
	if b, _ := json.Marshal(sums[1]); !strings.Contains(string(b), "Previous summary") || !strings.Contains(string(b), "SUMMARY-MARKER-1") {
		t.Fatal("the second compaction did not update the first summary")
	}
	fourth := messages(turns[3])
	var got []string
	for _, m := range fourth[1:] {
		got = append(got, fmt.Sprint(m["role"], ": ", firstWords(content(m))))
	}
	want := []string{"user: <conversation-summary>", "user: third request", "assistant: ok: third request", "user: fourth request"}
	if strings.Join(got, "|") != strings.Join(want, "|") || !strings.Contains(content(fourth[1]), "SUMMARY-MARKER-2") {
		t.Fatalf("the fourth turn got %q", got)
	}
	if !strings.Contains(system(turns[3]), "AGENTS-MARKER") || !strings.Contains(errs, "compacted") {
		t.Fatalf("stderr: %s", errs)
	}
	// The session file holds both compactions; a resume sends what the
	// fourth turn saw, and the answer to it.
	files, _ := filepath.Glob(filepath.Join(c.home, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("sessions: %v", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	compactions := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"compaction"`) {
			compactions++
		}
	}
	if compactions != 2 {
		t.Fatalf("%d compaction entries", compactions)
	}
	_, errs, code = c.run("", "chat", "agent1", "--provider", "openai", "--model", "fake", "--base-url", srv.URL+"/v1", "--continue", "-p", "fifth request")
	if code != 0 {
		t.Fatalf("resume: %d %s", code, errs)
	}
	reqs = fake.requests()
	fifth := messages(reqs[len(reqs)-1])
	if len(fifth) != len(fourth)+2 || !strings.Contains(content(fifth[1]), "SUMMARY-MARKER-2") || content(fifth[2]) != "third request" {
		t.Fatalf("the resumed request has %d messages (want %d)", len(fifth), len(fourth)+2)
	}
}

func firstWords(s string) string {
	if len(s) > 24 {
		s = s[:24]
	}
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
