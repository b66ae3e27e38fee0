package chatrun

import (
	"context"
	"strings"
	"unicode"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/tools"
)

const suggestSystem = `You predict what the user of a coding agent types next.
You are given the user's last request and the agent's answer.
Reply with the single message the user most likely sends next: short (at most 15 words), in the user's own voice, something they would really type (a follow-up request, a confirmation, "run the tests").
No quotes, no explanation, no options. If nothing obvious comes next, reply with nothing.`

// suggestMaxTokens bounds the suggestion's answer: it is a hint, not a turn.
const suggestMaxTokens = 48

// Suggest asks the model, in one short request that carries only the last
// exchange, for the message the user most likely sends next: ghost text a
// UI shows and sends only when the user takes it. It is never written to
// the session. "" when there is no exchange yet or the model has no idea.
// It runs beside nothing: ErrBusy during another operation.
func (r *Runner) Suggest(ctx context.Context) (string, error) {
	if err := r.acquire(); err != nil {
		return "", err
	}
	history := r.agent.History()
	p, model := r.agent.Model()
	r.busy.Unlock() // the request below needs nothing of the Runner
	request, answer := lastExchange(history)
	if request == "" || answer == "" {
		return "", nil
	}
	prompt := "The user asked:\n" + tools.CapText(request, 2000) + "\n\nThe agent answered:\n" + tools.CapText(answer, 4000) +
		"\n\nWhat does the user type next?"
	resp, err := p.Stream(ctx, &llm.Request{Model: model, System: suggestSystem, MaxTokens: suggestMaxTokens,
		Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Text: prompt}}}}}, nil)
	if err != nil {
		return "", err
	}
	return cleanSuggestion(resp.Message.Text()), nil
}

// lastExchange returns the latest request and the last text the assistant
// gave after it.
func lastExchange(history []llm.Message) (request, answer string) {
	for i := len(history) - 1; i >= 0; i-- {
		m := history[i]
		switch {
		case m.Role == llm.RoleAssistant && answer == "":
			answer = strings.TrimSpace(m.Text())
		case m.Role == llm.RoleUser && !session.IsSummary(m):
			return strings.TrimSpace(m.Text()), answer
		}
	}
	return "", ""
}

// cleanSuggestion keeps the first line of the model's answer, without
// quotes, control characters (it is drawn on a terminal) or a "User:"
// label, at most 200 characters.
func cleanSuggestion(s string) string {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, "User:"), "user:"))
		line = strings.Trim(line, "\"'`“”")
		line = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || r == unicode.ReplacementChar {
				return -1
			}
			return r
		}, line)
		if rs := []rune(line); len(rs) > 200 {
			line = string(rs[:200])
		}
		return strings.TrimSpace(line)
	}
	return ""
}
