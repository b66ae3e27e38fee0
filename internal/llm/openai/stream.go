package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// accumulator assembles one streamed answer from its chunks and emits the
// normalised events as they come.
type accumulator struct {
	provider string
	emit     func(llm.Event)

	model    string
	text     strings.Builder
	thinking strings.Builder
	refused  bool
	calls    []*pendingCall         // in the order they started
	byIndex  map[int64]*pendingCall // keyed by the chunk's tool call index
	// Parts take their place in the message when they first appear;
	// events carry that place as Index.
	parts       int
	thinkingPos int // -1: none yet
	textPos     int // -1: none yet
	rawStop     string
	usage       llm.Usage
	callsDone   bool
}

// pendingCall is a tool call whose arguments are still arriving.
type pendingCall struct {
	pos     int // position in the message (Event.Index)
	n       int // position among the message's tool calls
	id      string
	name    string
	args    strings.Builder
	started bool // tool_start emitted
}

func newAccumulator(provider string, emit func(llm.Event)) *accumulator {
	return &accumulator{provider: provider, emit: emit, byIndex: map[int64]*pendingCall{}, thinkingPos: -1, textPos: -1}
}

// add takes one chunk.
func (a *accumulator) add(chunk sdk.ChatCompletionChunk) error {
	if chunk.Model != "" {
		a.model = chunk.Model
	}
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue // we never ask for n > 1
		}
		if err := a.delta(choice.Delta); err != nil {
			return err
		}
		if choice.FinishReason != "" {
			a.rawStop = choice.FinishReason
			if err := a.endCalls(); err != nil {
				return err
			}
		}
	}
	if chunk.JSON.Usage.Valid() {
		u := chunk.Usage
		cached := int(u.PromptTokensDetails.CachedTokens)
		a.usage = llm.Usage{
			InputTokens:     int(u.PromptTokens) - cached,
			OutputTokens:    int(u.CompletionTokens),
			CacheReadTokens: cached,
		}
		usage := a.usage
		a.emit(llm.Event{Kind: llm.EventUsage, Usage: &usage})
	}
	return nil
}

func (a *accumulator) delta(d sdk.ChatCompletionChunkChoiceDelta) error {
	// Reasoning servers (vLLM, SGLang, Ollama, DeepSeek-style) stream their
	// reasoning beside the content under one of these names.
	for _, key := range []string{"reasoning_content", "reasoning"} {
		if f, ok := d.JSON.ExtraFields[key]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				a.thinking.WriteString(s)
				a.emit(llm.Event{Kind: llm.EventThinking, Text: s, Index: a.place(&a.thinkingPos)})
			}
		}
	}
	if d.Content != "" {
		a.text.WriteString(d.Content)
		a.emit(llm.Event{Kind: llm.EventText, Text: d.Content, Index: a.place(&a.textPos)})
	}
	if d.Refusal != "" {
		a.refused = true
		a.text.WriteString(d.Refusal)
		a.emit(llm.Event{Kind: llm.EventText, Text: d.Refusal, Index: a.place(&a.textPos)})
	}
	for _, tc := range d.ToolCalls {
		a.toolDelta(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments)
	}
	// The legacy single function_call streams like one tool call.
	//lint:ignore SA1019 servers that still stream the legacy function_call are served on purpose
	if fc := d.FunctionCall; fc.Name != "" || fc.Arguments != "" {
		a.toolDelta(-1, "", fc.Name, fc.Arguments)
	}
	return nil
}

// toolDelta adds one piece of a tool call. Servers send the id and name in
// the call's first chunk only (some never send an id); arguments arrive in
// any number of pieces, parallel calls interleaved by index.
func (a *accumulator) toolDelta(index int64, id, name, args string) {
	c := a.byIndex[index]
	if c == nil {
		c = &pendingCall{pos: a.parts, n: len(a.calls)}
		a.parts++
		a.byIndex[index] = c
		a.calls = append(a.calls, c)
	}
	if c.id == "" && id != "" {
		c.id = id
	}
	if c.name == "" && name != "" {
		c.name = name
	}
	c.args.WriteString(args)
	if !c.started {
		if c.name == "" {
			return // wait for the name; the arguments so far stay buffered
		}
		c.started = true
		if c.id == "" {
			c.id = fmt.Sprintf("call_%d", c.n)
		}
		a.emit(llm.Event{Kind: llm.EventToolStart, Index: c.pos, ToolCall: &llm.ToolCall{ID: c.id, Name: c.name}})
		args = c.args.String() // everything buffered so far
	}
	if args != "" {
		a.emit(llm.Event{Kind: llm.EventToolDelta, Index: c.pos, Text: args, ToolCall: &llm.ToolCall{ID: c.id, Name: c.name}})
	}
}

// place gives a part its position in the message the first time it shows.
func (a *accumulator) place(pos *int) int {
	if *pos < 0 {
		*pos = a.parts
		a.parts++
	}
	return *pos
}

// endCalls validates every tool call's JSON and emits tool_end, once.
func (a *accumulator) endCalls() error {
	if a.callsDone {
		return nil
	}
	a.callsDone = true
	for _, c := range a.calls {
		if c.name == "" {
			return &llm.Error{Provider: a.provider, Code: "invalid_tool_call",
				Message: fmt.Sprintf("tool call %d arrived without a function name", c.n)}
		}
		call, err := c.toolCall()
		if err != nil {
			return &llm.Error{Provider: a.provider, Code: "invalid_tool_call", Message: err.Error()}
		}
		a.emit(llm.Event{Kind: llm.EventToolEnd, Index: c.pos, ToolCall: call})
	}
	return nil
}

func (c *pendingCall) toolCall() (*llm.ToolCall, error) {
	raw := strings.TrimSpace(c.args.String())
	if raw == "" {
		raw = "{}"
	}
	if !json.Valid([]byte(raw)) {
		return nil, fmt.Errorf("tool %q (call %s): arguments are not valid JSON: %q", c.name, c.id, truncate(raw, 200))
	}
	return &llm.ToolCall{ID: c.id, Name: c.name, Input: json.RawMessage(raw)}, nil
}

// finish builds the Response once the stream has ended.
func (a *accumulator) finish() (*llm.Response, error) {
	if a.rawStop == "" {
		// Every compatible server ends a choice with a finish_reason; a
		// stream without one was cut (a dropped connection reads as EOF).
		return nil, &llm.Error{Provider: a.provider, Code: "incomplete_stream",
			Message: "the stream ended before the model finished", Retryable: true}
	}
	if err := a.endCalls(); err != nil {
		return nil, err
	}
	resp := &llm.Response{Model: a.model, RawStop: a.rawStop, Usage: a.usage}
	parts := make([]llm.Part, a.parts)
	if a.thinkingPos >= 0 {
		parts[a.thinkingPos] = llm.Part{Thinking: a.thinking.String()}
	}
	if a.textPos >= 0 {
		parts[a.textPos] = llm.Part{Text: a.text.String()}
	}
	for _, c := range a.calls {
		call, err := c.toolCall()
		if err != nil {
			return nil, &llm.Error{Provider: a.provider, Code: "invalid_tool_call", Message: err.Error()}
		}
		parts[c.pos] = llm.Part{ToolCall: call}
	}
	resp.Message = llm.Message{Role: llm.RoleAssistant, Parts: parts}
	resp.Stop = stopReason(a.rawStop, len(a.calls) > 0, a.refused)
	return resp, nil
}

// stopReason normalises finish_reason. Some servers (older Ollama) say
// "stop" while returning tool calls: the calls decide.
func stopReason(raw string, hasCalls, refused bool) llm.StopReason {
	switch {
	case refused:
		return llm.StopRefusal
	case raw == "tool_calls" || raw == "function_call":
		return llm.StopToolUse
	case hasCalls && (raw == "stop" || raw == ""):
		return llm.StopToolUse
	case raw == "stop":
		return llm.StopEnd
	case raw == "length":
		return llm.StopMaxTokens
	case raw == "content_filter":
		return llm.StopRefusal
	case raw == "":
		// The stream ended without a finish reason (some servers): an
		// answer without tool calls is finished.
		return llm.StopEnd
	default:
		return llm.StopOther
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
