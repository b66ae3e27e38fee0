package gemini

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// accumulator assembles one streamed answer and emits events as it goes.
type accumulator struct {
	emit   func(llm.Event)
	parts  []llm.Part // in arrival order; consecutive text (or thinking) merged
	calls  int
	model  string
	raw    string // finish reason, or the prompt's block reason
	usage  llm.Usage
	usaged bool
}

func newAccumulator(emit func(llm.Event)) *accumulator {
	return &accumulator{emit: emit}
}

func (a *accumulator) add(chunk *genai.GenerateContentResponse) {
	if chunk.ModelVersion != "" {
		a.model = chunk.ModelVersion
	}
	if len(chunk.Candidates) > 0 {
		cand := chunk.Candidates[0]
		if cand.Content != nil {
			for _, p := range cand.Content.Parts {
				a.part(p)
			}
		}
		if cand.FinishReason != "" && cand.FinishReason != genai.FinishReasonUnspecified {
			a.raw = string(cand.FinishReason)
		}
	} else if fb := chunk.PromptFeedback; fb != nil && fb.BlockReason != "" {
		a.raw = string(fb.BlockReason)
	}
	if u := chunk.UsageMetadata; u != nil {
		cached := int(u.CachedContentTokenCount)
		usage := llm.Usage{
			InputTokens:     int(u.PromptTokenCount) - cached,
			OutputTokens:    int(u.CandidatesTokenCount + u.ThoughtsTokenCount),
			CacheReadTokens: cached,
		}
		// Gemini repeats the running totals on every chunk: report changes.
		if !a.usaged || usage != a.usage {
			a.usage, a.usaged = usage, true
			a.emit(llm.Event{Kind: llm.EventUsage, Usage: &usage})
		}
	}
}

func (a *accumulator) part(p *genai.Part) {
	sig := ""
	if len(p.ThoughtSignature) > 0 {
		sig = base64.StdEncoding.EncodeToString(p.ThoughtSignature)
	}
	switch {
	case p.FunctionCall != nil:
		a.call(p.FunctionCall, sig)
	case p.Thought:
		if last := a.last(); last != nil && last.Thinking != "" && last.ToolCall == nil {
			if p.Text != "" {
				a.emit(llm.Event{Kind: llm.EventThinking, Text: p.Text, Index: len(a.parts) - 1})
			}
			last.Thinking += p.Text
			if sig != "" {
				last.Signature = sig
			}
			return
		}
		if p.Text != "" {
			a.emit(llm.Event{Kind: llm.EventThinking, Text: p.Text, Index: len(a.parts)})
		}
		if p.Text != "" || sig != "" {
			a.parts = append(a.parts, llm.Part{Thinking: p.Text, Signature: sig})
		}
	case p.Text != "" || sig != "":
		if last := a.last(); last != nil && last.Text != "" && last.ToolCall == nil {
			if p.Text != "" {
				a.emit(llm.Event{Kind: llm.EventText, Text: p.Text, Index: len(a.parts) - 1})
			}
			last.Text += p.Text
			if sig != "" {
				last.Signature = sig
			}
			return
		}
		if p.Text != "" {
			a.emit(llm.Event{Kind: llm.EventText, Text: p.Text, Index: len(a.parts)})
		}
		a.parts = append(a.parts, llm.Part{Text: p.Text, Signature: sig})
	}
}

func (a *accumulator) last() *llm.Part {
	if len(a.parts) == 0 {
		return nil
	}
	return &a.parts[len(a.parts)-1]
}

// call takes one whole function call: start, its input at once, end.
func (a *accumulator) call(fc *genai.FunctionCall, sig string) {
	index := len(a.parts) // its position in the message
	id := fc.ID
	if id == "" {
		id = fmt.Sprintf("%s%d", syntheticIDPrefix, a.calls)
	}
	a.calls++
	args := fc.Args
	if args == nil {
		args = map[string]any{}
	}
	input, err := json.Marshal(args)
	if err != nil {
		// Args came from JSON; it cannot fail to go back.
		input = []byte("{}")
	}
	call := &llm.ToolCall{ID: id, Name: fc.Name, Input: input}
	a.emit(llm.Event{Kind: llm.EventToolStart, Index: index, ToolCall: &llm.ToolCall{ID: id, Name: fc.Name}})
	a.emit(llm.Event{Kind: llm.EventToolDelta, Index: index, Text: string(input), ToolCall: &llm.ToolCall{ID: id, Name: fc.Name}})
	a.emit(llm.Event{Kind: llm.EventToolEnd, Index: index, ToolCall: call})
	a.parts = append(a.parts, llm.Part{ToolCall: call, Signature: sig})
}

func (a *accumulator) finish() (*llm.Response, error) {
	if a.raw == "" {
		// The last chunk carries the finish reason; a stream without one
		// was cut (a dropped connection reads as EOF).
		return nil, &llm.Error{Provider: "gemini", Code: "incomplete_stream",
			Message: "the stream ended before the model finished", Retryable: true}
	}
	return &llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, Parts: a.parts},
		Stop:    stopReason(a.raw, a.calls > 0),
		RawStop: a.raw,
		Usage:   a.usage,
		Model:   a.model,
	}, nil
}

// stopReason normalises Gemini's finish (or block) reason. Gemini says STOP
// when it calls functions too.
func stopReason(raw string, hasCalls bool) llm.StopReason {
	switch raw {
	case "STOP", "":
		if hasCalls {
			return llm.StopToolUse
		}
		return llm.StopEnd
	case "MAX_TOKENS":
		return llm.StopMaxTokens
	case "SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "JAILBREAK", "MODEL_ARMOR", "LANGUAGE":
		return llm.StopRefusal
	default:
		return llm.StopOther
	}
}
