package session

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// buildSession appends n entries shaped like an agent's work: per step a
// user or tool-result message (tool output of 0.2-2 KiB), an assistant
// message with a tool call, a usage entry; a compaction every 2000 entries.
func buildSession(t testing.TB, s *Session, n int) {
	t.Helper()
	out := strings.Repeat("ok  \tgithub.com/x/y\t0.01s\n", 80) // ~2 KiB
	for i := 0; s.Len() < n+1; i++ {
		var m llm.Message
		switch i % 4 {
		case 0:
			m = user(fmt.Sprintf("step %d: please run the tests and fix what fails", i))
		case 1:
			m = llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Text: "Running the tests."}, {ToolCall: &llm.ToolCall{
				ID: fmt.Sprintf("call_%d", i), Name: "exec", Input: json.RawMessage(`{"cmd":["go","test","./..."],"timeout":120}`)}}}}
		case 2:
			m = llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{ToolResult: &llm.ToolResult{
				CallID: fmt.Sprintf("call_%d", i-1), Name: "exec", Content: out[:200+(i*37)%(len(out)-200)]}}}}
		case 3:
			must(t)(s.AppendUsage(llm.Usage{InputTokens: 1000 + i, OutputTokens: 50}))
			if s.Len()%2000 < 4 && s.Len() < n+1 {
				must(t)(s.AppendCompaction(Compaction{Summary: strings.Repeat("summary ", 200), FirstKeptID: s.Leaf(), TokensBefore: 90000, TokensAfter: 8000}))
			}
			continue
		}
		must(t)(s.AppendMessage(m))
	}
}

// BenchmarkResume is Open + Messages of a 10 000-entry session (target:
// ≤ 200 ms).
func BenchmarkResume(b *testing.B) {
	m := newManager(b)
	s := create(b, m)
	buildSession(b, s, 10_000)
	s.Close()
	b.ResetTimer()
	for b.Loop() {
		r, err := m.Open(s.ID())
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Messages()) == 0 {
			b.Fatal("no messages")
		}
		r.Close()
	}
}

// BenchmarkAppend appends a ~1 KiB message and reports the median.
func BenchmarkAppend(b *testing.B) {
	m := newManager(b)
	s := create(b, m)
	msg := user(strings.Repeat("x", 1024))
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.AppendMessage(msg); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkList lists 20 sessions of 2 000 entries each.
func BenchmarkList(b *testing.B) {
	m := newManager(b)
	for range 20 {
		s := create(b, m)
		buildSession(b, s, 2_000)
		s.Close()
	}
	b.ResetTimer()
	for b.Loop() {
		if l, err := m.List(); err != nil || len(l) != 20 {
			b.Fatal(l, err)
		}
	}
}
