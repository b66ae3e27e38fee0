package loop

import (
	"context"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// Budget is the context budget of an agent.
type Budget struct {
	// Window is the model's context window in tokens (0: never compact).
	Window int
	// Reserve is kept free for the model's answer and the next step
	// (default: a fifth of the window).
	Reserve int
	// Counter counts a request's tokens exactly (a vendor count endpoint, a
	// tokenizer); asked only when the estimate comes near the limit.
	Counter llm.TokenCounter
}

// budgetState estimates a request's size in tokens. The estimate is
// calibrated by the real counts the provider reports after each call
// (tokens per byte of the request as sent); before any report, and for
// local servers that report none, it assumes 0.3 tokens per byte (English
// and code run 0.25-0.3). A context overflow the estimate missed raises
// the ratio.
type budgetState struct {
	cfg   Budget
	ratio float64
}

func newBudgetState(b Budget) *budgetState {
	if b.Reserve <= 0 {
		b.Reserve = b.Window / 5
	}
	return &budgetState{cfg: b, ratio: defaultRatio}
}

// defaultRatio is the tokens per byte assumed before a provider reports.
const defaultRatio = 0.3

// size is the request's bytes as the provider will see them, near enough.
func size(req *llm.Request) int {
	n := len(req.System)
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			n += len(p.Text) + len(p.Thinking) + 16
			if p.ToolCall != nil {
				n += len(p.ToolCall.Name) + len(p.ToolCall.Input) + 32
			}
			if p.ToolResult != nil {
				n += len(p.ToolResult.Content) + 32
			}
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return n
}

// estimate returns the request's tokens as the budget believes.
func (b *budgetState) estimate(req *llm.Request) int { return int(float64(size(req)) * b.ratio) }

// limit is the most tokens a request may use.
func (b *budgetState) limit() int { return b.cfg.Window - b.cfg.Reserve }

// over reports whether req does not fit the budget. Near the limit an
// exact counter, when there is one, has the last word.
func (b *budgetState) over(req *llm.Request) bool {
	if b.cfg.Window <= 0 {
		return false
	}
	est := b.estimate(req)
	if b.cfg.Counter != nil && est > b.limit()*9/10 {
		if n, err := b.cfg.Counter.CountTokens(context.Background(), req); err == nil {
			return n > b.limit()
		}
	}
	return est > b.limit()
}

// observe calibrates the ratio from the provider's count of req.
func (b *budgetState) observe(req *llm.Request, u llm.Usage) {
	in := u.InputTokens + u.CacheReadTokens + u.CacheCreateTokens
	if in <= 0 {
		return
	}
	if s := size(req); s > 0 {
		b.ratio = float64(in) / float64(s)
	}
}

// overflowed raises the ratio after the provider refused req as too long.
func (b *budgetState) overflowed(*llm.Request) { b.ratio *= 1.25 }
