package loop

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// SummaryPrefix starts the message that stands for compacted history.
const SummaryPrefix = "[Summary of the earlier conversation]\n"

// summaryHeadings are the fixed sections of a summary.
var summaryHeadings = []string{"Goal", "Constraints", "Progress", "Decisions", "Next steps", "Critical context"}

const summarySystem = `You compact the history of a coding agent's session so it can continue with less context.
Write a summary under exactly these Markdown headings, in this order: %s.
Keep file paths, commands, error messages, names and numbers exactly. Say what was done and what is left.
Do not invent anything. If a previous summary is given, update it: keep what still holds, add what is new.`

// keepResultChars is how much of an old tool result survives trimming.
const keepResultChars = 2000

// compact makes the history fit the budget: first old tool results are
// trimmed (head and tail), then older turns are summarised into one
// message; the system prompt (AGENTS.md, ...) is not part of the history
// and the current request and what followed it stay verbatim. A summary
// request that itself overflows drops the oldest message and tries again.
func (a *Agent) compact(ctx context.Context, request string) (Finding, error) {
	if f := a.cfg.Detector.Overflow(); f.Verdict == End && !a.cfg.DisableLoopDetection {
		return f, nil
	}
	cur := a.currentTurn()
	// 1. Trim tool results before the current turn.
	trimmed := 0
	for i := 0; i < cur; i++ {
		for j, p := range a.history[i].Parts {
			if p.ToolResult != nil && len(p.ToolResult.Content) > keepResultChars {
				r := *p.ToolResult
				r.Content = headTail(r.Content, keepResultChars)
				a.history[i].Parts[j].ToolResult = &r
				trimmed++
			}
		}
	}
	if trimmed > 0 && !a.budget.over(a.request()) {
		a.emit(Event{Kind: EventCompaction, Text: fmt.Sprintf("trimmed %d old tool results", trimmed)})
		return Finding{}, nil
	}
	// 2. Summarise everything before the kept part.
	split := cur
	if split == 0 {
		// One long turn: keep its request and the last exchange.
		split = max(1, len(a.history)-2)
		for split > 1 && a.history[split].Role == llm.RoleTool {
			split-- // never separate tool results from their calls
		}
	}
	older := a.history[:split]
	kept := a.history[split:]
	if cur == 0 {
		kept = append([]llm.Message{a.history[0]}, a.history[split:]...)
		older = a.history[1:split]
	}
	if len(older) == 0 {
		return Finding{}, fmt.Errorf("the context is full and nothing is left to compact: the current request and its last step alone exceed the budget")
	}
	var previous string
	if t := older[0].Text(); older[0].Role == llm.RoleUser && strings.HasPrefix(t, SummaryPrefix) {
		previous, older = strings.TrimPrefix(t, SummaryPrefix), older[1:]
	}
	for {
		summary, err := a.summarise(ctx, previous, older)
		if llm.IsContextOverflow(err) && len(older) > 1 {
			older = older[1:] // the oldest goes unsummarised
			continue
		}
		if err != nil {
			return Finding{}, fmt.Errorf("compaction: %w", err)
		}
		before := len(a.history)
		msg := llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: SummaryPrefix + summary}}}
		a.history = append([]llm.Message{msg}, kept...)
		a.emit(Event{Kind: EventCompaction, Text: fmt.Sprintf("summarised %d messages", before-len(kept))})
		if a.cfg.OnMessage != nil {
			a.cfg.OnMessage(msg)
		}
		return Finding{}, nil
	}
}

// currentTurn returns the index of the message that opened the current
// turn (the latest user request that is not a summary).
func (a *Agent) currentTurn() int {
	for i := len(a.history) - 1; i >= 0; i-- {
		m := a.history[i]
		if m.Role == llm.RoleUser && !strings.HasPrefix(m.Text(), SummaryPrefix) {
			return i
		}
	}
	return 0
}

func (a *Agent) request() *llm.Request {
	return &llm.Request{Model: a.cfg.Model, System: a.cfg.System, Messages: a.history, Tools: a.toolDefs()}
}

// summarise asks the model for the summary of msgs (updating previous).
func (a *Agent) summarise(ctx context.Context, previous string, msgs []llm.Message) (string, error) {
	var b strings.Builder
	if previous != "" {
		fmt.Fprintf(&b, "## Previous summary\n%s\n\n", previous)
	}
	b.WriteString("## Conversation to summarise\n")
	for _, m := range msgs {
		for _, p := range m.Parts {
			switch {
			case p.Text != "":
				fmt.Fprintf(&b, "%s: %s\n", m.Role, p.Text)
			case p.ToolCall != nil:
				fmt.Fprintf(&b, "assistant called %s %s\n", p.ToolCall.Name, headTail(string(p.ToolCall.Input), 1000))
			case p.ToolResult != nil:
				status := "result"
				if p.ToolResult.IsError {
					status = "error"
				}
				fmt.Fprintf(&b, "%s %s: %s\n", p.ToolResult.Name, status, headTail(p.ToolResult.Content, keepResultChars))
			}
		}
	}
	resp, err := a.cfg.Provider.Stream(ctx, &llm.Request{
		Model:    a.cfg.Model,
		System:   fmt.Sprintf(summarySystem, strings.Join(summaryHeadings, ", ")),
		Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: b.String()}}}},
	}, nil)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(resp.Message.Text())
	if s == "" {
		return "", fmt.Errorf("the model returned an empty summary")
	}
	return s, nil
}

// headTail keeps the head and tail of s within n bytes.
func headTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	h, t := n*2/3, len(s)-(n-n*2/3)
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return fmt.Sprintf("%s\n[… %d characters trimmed …]\n%s", s[:h], t-h, s[t:])
}
