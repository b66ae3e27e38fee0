package loop_test

import (
	"fmt"
	"testing"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

// BenchmarkTurnOverhead measures what the loop itself costs per turn,
// the model's latency excluded (a scripted provider answers at once): a
// turn with one tool call whose tool does nothing in the neuron (an
// unknown tool is refused by the kit before any channel call), then an
// answer, over a history that grows to 200 messages and a 200k window.
func BenchmarkTurnOverhead(b *testing.B) {
	e := toolstest.New(b, "standard")
	p := &script{next: func(n int, req *llm.Request) (*llm.Response, error) {
		if n%2 == 1 {
			return calls(call(fmt.Sprint(n), "no_such_tool", map[string]any{})), nil
		}
		return answer(fmt.Sprintf("answer %d", n)), nil
	}}
	a, _ := loop.New(loop.Config{Provider: p, Kit: e.Kit, Budget: loop.Budget{Window: 200000}, DisableLoopDetection: false})
	i := 0
	for b.Loop() {
		if i%50 == 0 {
			a.SetHistory(nil) // keep the history realistic, not unbounded
			p.reqs = p.reqs[:0]
		}
		i++
		if r := a.Turn(e.Ctx, fmt.Sprintf("request %d", i)); r.Stop != loop.StopDone {
			b.Fatalf("%+v", r)
		}
	}
}
