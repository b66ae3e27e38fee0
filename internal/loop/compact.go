package loop

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// The message that stands for compacted history is the session's summary
// message (session.SummaryPrefix ... session.SummarySuffix), so a resumed
// session and a running agent see the same thing.

// summaryHeadings are the fixed sections of a summary.
var summaryHeadings = []string{"Goal", "Constraints", "Progress", "Decisions", "Next steps", "Critical context"}

const summarySystem = `You compact the history of a coding agent's session so it can continue with less context.
Write a summary under exactly these Markdown headings, in this order: %s.
Keep file paths, commands, error messages, names and numbers exactly. Say what was done and what is left.
Do not invent anything. If a previous summary is given, update it: keep what still holds, add what is new.`

// keepResultChars is how much of an old tool result survives trimming.
const keepResultChars = 2000

// ErrNothingToCompact says a forced compaction found no turn before the
// latest request to summarise.
var ErrNothingToCompact = errors.New("nothing to compact: the history holds only the latest request and what followed it")

// Compact summarises the history now, whatever the budget (the /compact
// command): old tool results are trimmed, and the turns before the latest
// request become one summary (updating an earlier one); the latest request
// and what followed it stay verbatim. Call it between turns; the
// compaction is reported as Turn reports one (OnEvent, OnCompaction).
func (a *Agent) Compact(ctx context.Context) error {
	return a.compact(ctx, "", true)
}

// compact makes the history fit the budget: first old tool results are
// trimmed (head and tail), then older turns are summarised into one
// message; the system prompt (AGENTS.md, ...) is not part of the history
// and the current request and what followed it stay verbatim. A summary
// request that itself overflows drops the oldest message and tries again.
// force summarises even when trimming made room, and never cuts into the
// latest turn.
func (a *Agent) compact(ctx context.Context, request string, force bool) error {
	cur := a.currentTurn()
	// 1. Trim tool results before the current turn (all but the last two
	// messages when the turn is all there is).
	trimmed := 0
	upto := cur
	if upto <= 0 {
		upto = len(a.history) - 2
	}
	for i := 0; i < upto; i++ {
		for j, p := range a.history[i].Parts {
			if p.ToolResult != nil && len(p.ToolResult.Content) > keepResultChars {
				r := *p.ToolResult
				r.Content = tools.CapText(r.Content, keepResultChars)
				a.history[i].Parts[j].ToolResult = &r
				trimmed++
			}
		}
	}
	if trimmed > 0 && !force && !a.budget.over(a.request()) {
		a.emit(Event{Kind: EventCompaction, Text: fmt.Sprintf("trimmed %d old tool results", trimmed)})
		return nil
	}
	// 2. Summarise everything before the kept part: the current request
	// and what followed it. When the current turn alone is too long, keep
	// its last exchange and carry the request verbatim in the summary.
	first, previous := 0, ""
	if len(a.history) > 0 && session.IsSummary(a.history[0]) {
		t := a.history[0].Text()
		previous, first = t[len(session.SummaryPrefix):len(t)-len(session.SummarySuffix)], 1
	}
	var older, kept []llm.Message
	carry := ""
	if cur > first {
		older, kept = a.history[first:cur], a.history[cur:]
	} else if force {
		return ErrNothingToCompact
	} else {
		split := max(first+1, len(a.history)-2)
		for split > first+1 && a.history[split].Role == llm.RoleTool {
			split-- // never separate tool results from their calls
		}
		older, kept = a.history[first:split], a.history[split:]
		carry = request
	}
	if len(older) == 0 {
		return fmt.Errorf("the context is full and nothing is left to compact: the current request and its last step alone exceed the budget")
	}
	for {
		summary, err := a.summarise(ctx, previous, older)
		if llm.IsContextOverflow(err) && len(older) > 1 {
			older = older[1:] // the oldest goes unsummarised
			continue
		}
		if err != nil {
			return fmt.Errorf("compaction: %w", err)
		}
		if carry != "" && !strings.Contains(summary, carry) {
			summary += "\n\n## Current request (verbatim)\n" + carry
		}
		before := len(a.history)
		msg := llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Text: session.SummaryPrefix + summary + session.SummarySuffix}}}
		a.history = append([]llm.Message{msg}, kept...)
		a.emit(Event{Kind: EventCompaction, Text: fmt.Sprintf("summarised %d messages", before-len(kept))})
		if a.cfg.OnCompaction != nil {
			a.cfg.OnCompaction(summary, len(kept))
		}
		return nil
	}
}

// currentTurn returns the index of the message that opened the current
// turn (the latest user request that is not a summary), or -1.
func (a *Agent) currentTurn() int {
	for i := len(a.history) - 1; i >= 0; i-- {
		m := a.history[i]
		if m.Role == llm.RoleUser && !session.IsSummary(m) {
			return i
		}
	}
	return -1
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
				fmt.Fprintf(&b, "assistant called %s %s\n", p.ToolCall.Name, tools.CapText(string(p.ToolCall.Input), 1000))
			case p.ToolResult != nil:
				status := "result"
				if p.ToolResult.IsError {
					status = "error"
				}
				fmt.Fprintf(&b, "%s %s: %s\n", p.ToolResult.Name, status, tools.CapText(p.ToolResult.Content, keepResultChars))
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
