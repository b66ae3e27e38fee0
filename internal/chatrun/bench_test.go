package chatrun_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/llm"
)

// BenchmarkRunnerTurn measures what a Runner adds to the loop per turn,
// the model's latency excluded (a scripted provider answers at once): a
// read-only tool call (no checkpoint) and an answer, every message
// appended to the session file.
func BenchmarkRunnerTurn(b *testing.B) {
	f := newBenchFixture(b, func(n int, req *llm.Request) *llm.Response {
		if n%2 == 1 {
			return toolCall(fmt.Sprint(n), "no_such_tool", map[string]any{})
		}
		return answer("ok")
	})
	r, err := chatrun.Open(f.env.Ctx, f.host, chatrun.Options{LLM: llm.Config{Provider: "openai", Model: "m1"}, Window: 200000})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	i := 0
	for b.Loop() {
		i++
		if _, err := r.Turn(f.env.Ctx, fmt.Sprintf("request %d", i), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpoint measures a turn that changes a file of a workspace
// of 200 files (2 MiB): the checkpoint copies the overlay.
func BenchmarkCheckpoint(b *testing.B) {
	f := newBenchFixture(b, func(n int, req *llm.Request) *llm.Response {
		if n%2 == 1 {
			return toolCall(fmt.Sprint(n), "write", map[string]any{"path": "out.txt", "content": fmt.Sprint(n)})
		}
		return answer("ok")
	})
	for i := 0; i < 200; i++ {
		f.env.Put(fmt.Sprintf("src/f%03d.txt", i), strings.Repeat("x", 10<<10))
	}
	r, err := chatrun.Open(f.env.Ctx, f.host, chatrun.Options{LLM: llm.Config{Provider: "openai", Model: "m1"}, Checkpoints: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	i := 0
	for b.Loop() {
		i++
		res, err := r.Turn(f.env.Ctx, fmt.Sprintf("request %d", i), nil)
		if err != nil || res.Checkpoint == nil || res.Checkpoint.Err != "" {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

func newBenchFixture(b *testing.B, next func(int, *llm.Request) *llm.Response) *fixture {
	f := newFixture(b, nil)
	f.provs["m1"].next = next
	return f
}
