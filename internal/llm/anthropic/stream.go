package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// errIncomplete is a stream that ended before message_stop: a dropped
// connection, to be retried if nothing reached the caller.
var errIncomplete = errors.New("stream ended before message_stop")

// block is one content block being assembled.
type block struct {
	kind      string // text, thinking, redacted_thinking, tool_use, or another the API added
	text      strings.Builder
	signature string
	call      *llm.ToolCall
	input     strings.Builder // tool_use input_json_delta pieces
	startJSON json.RawMessage // tool_use input in content_block_start, if any
	done      bool
	invalid   bool // tool_use whose input was not valid JSON
}

// assembler turns one attempt's event stream into Events and a Response.
type assembler struct {
	onEvent func(llm.Event)
	// emitted: an event reached the caller, so the attempt must not be
	// retried. Usage from message_start is held back until something else
	// goes out, so that an error right after message_start is retryable.
	emitted      bool
	pendingUsage bool

	blocks  map[int64]*block
	resp    llm.Response
	stopped bool // message_stop seen
}

func newAssembler(onEvent func(llm.Event)) *assembler {
	return &assembler{onEvent: onEvent, blocks: map[int64]*block{}}
}

func (a *assembler) emit(ev llm.Event) {
	if a.pendingUsage && ev.Kind != llm.EventUsage {
		a.pendingUsage = false
		a.emit(a.usageEvent())
	}
	a.emitted = true
	a.onEvent(ev)
}

func (a *assembler) usageEvent() llm.Event {
	u := a.resp.Usage
	return llm.Event{Kind: llm.EventUsage, Usage: &u}
}

// run reads the stream to its end and returns the assembled Response.
func (a *assembler) run(stream *ssestream.Stream[sdk.MessageStreamEventUnion]) (*llm.Response, error) {
	defer stream.Close()
	for stream.Next() {
		if err := a.handle(stream.Current()); err != nil {
			return nil, err
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if !a.stopped {
		return nil, errIncomplete
	}
	return a.finish()
}

func (a *assembler) handle(ev sdk.MessageStreamEventUnion) error {
	switch ev.Type {
	case "message_start":
		m := ev.Message
		a.resp.Model = m.Model
		a.resp.Usage = llm.Usage{
			InputTokens:       int(m.Usage.InputTokens),
			OutputTokens:      int(m.Usage.OutputTokens),
			CacheReadTokens:   int(m.Usage.CacheReadInputTokens),
			CacheCreateTokens: int(m.Usage.CacheCreationInputTokens),
		}
		a.pendingUsage = true
	case "content_block_start":
		a.start(ev.Index, ev.ContentBlock)
	case "content_block_delta":
		return a.delta(ev.Index, ev.Delta)
	case "content_block_stop":
		return a.stop(ev.Index)
	case "message_delta":
		a.resp.RawStop = string(ev.Delta.StopReason)
		u := ev.Usage
		// output_tokens is cumulative; the input counts come only when the
		// server sends them (they may be null here).
		if u.JSON.OutputTokens.Valid() {
			a.resp.Usage.OutputTokens = int(u.OutputTokens)
		}
		if u.JSON.InputTokens.Valid() {
			a.resp.Usage.InputTokens = int(u.InputTokens)
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			a.resp.Usage.CacheReadTokens = int(u.CacheReadInputTokens)
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			a.resp.Usage.CacheCreateTokens = int(u.CacheCreationInputTokens)
		}
		a.pendingUsage = false
		a.emit(a.usageEvent())
	case "message_stop":
		a.stopped = true
	}
	// Unknown event types are skipped, as the API's versioning policy asks.
	return nil
}

func (a *assembler) start(i int64, cb sdk.ContentBlockStartEventContentBlockUnion) {
	b := &block{kind: cb.Type}
	a.blocks[i] = b
	switch cb.Type {
	case "text":
		if cb.Text != "" {
			b.text.WriteString(cb.Text)
			a.emit(llm.Event{Kind: llm.EventText, Text: cb.Text, Index: int(i)})
		}
	case "thinking":
		b.text.WriteString(cb.Thinking)
		b.signature = cb.Signature
		if cb.Thinking != "" {
			a.emit(llm.Event{Kind: llm.EventThinking, Text: cb.Thinking, Index: int(i)})
		}
	case "redacted_thinking":
		b.signature = cb.Data
	case "tool_use":
		b.call = &llm.ToolCall{ID: cb.ID, Name: cb.Name}
		if raw := cb.JSON.Input.Raw(); raw != "" && raw != "null" {
			b.startJSON = json.RawMessage(raw)
		}
		c := *b.call
		a.emit(llm.Event{Kind: llm.EventToolStart, ToolCall: &c, Index: int(i)})
	}
}

func (a *assembler) delta(i int64, d sdk.MessageStreamEventUnionDelta) error {
	b, ok := a.blocks[i]
	if !ok {
		return protocolError(fmt.Sprintf("content_block_delta for block %d before its start", i))
	}
	switch d.Type {
	case "text_delta":
		b.text.WriteString(d.Text)
		a.emit(llm.Event{Kind: llm.EventText, Text: d.Text, Index: int(i)})
	case "thinking_delta":
		b.text.WriteString(d.Thinking)
		a.emit(llm.Event{Kind: llm.EventThinking, Text: d.Thinking, Index: int(i)})
	case "signature_delta":
		b.signature += d.Signature
	case "input_json_delta":
		if d.PartialJSON == "" {
			return nil
		}
		b.input.WriteString(d.PartialJSON)
		a.emit(llm.Event{Kind: llm.EventToolDelta, Text: d.PartialJSON, Index: int(i)})
	}
	// citations_delta and types added later carry nothing this package keeps.
	return nil
}

func (a *assembler) stop(i int64) error {
	b, ok := a.blocks[i]
	if !ok {
		return protocolError(fmt.Sprintf("content_block_stop for block %d before its start", i))
	}
	b.done = true
	if b.kind != "tool_use" {
		return nil
	}
	input := json.RawMessage(b.input.String())
	if len(strings.TrimSpace(b.input.String())) == 0 {
		input = b.startJSON
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
	}
	if !json.Valid(input) {
		// Decided in finish: a call cut by max_tokens is dropped, any other
		// invalid input is an error.
		b.invalid = true
		return nil
	}
	b.call.Input = input
	c := *b.call
	a.emit(llm.Event{Kind: llm.EventToolEnd, ToolCall: &c, Index: int(i)})
	return nil
}

// finish assembles the message from the blocks in index order.
func (a *assembler) finish() (*llm.Response, error) {
	a.resp.Stop = mapStop(a.resp.RawStop)
	idx := make([]int64, 0, len(a.blocks))
	for i := range a.blocks {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(x, y int) bool { return idx[x] < idx[y] })
	a.resp.Message.Role = llm.RoleAssistant
	for _, i := range idx {
		b := a.blocks[i]
		switch b.kind {
		case "text":
			if b.text.Len() > 0 {
				a.resp.Message.Parts = append(a.resp.Message.Parts, llm.Part{Text: b.text.String()})
			}
		case "thinking":
			a.resp.Message.Parts = append(a.resp.Message.Parts, llm.Part{Thinking: b.text.String(), Signature: b.signature})
		case "redacted_thinking":
			a.resp.Message.Parts = append(a.resp.Message.Parts, llm.Part{Signature: b.signature})
		case "tool_use":
			if b.invalid || !b.done {
				if a.resp.Stop == llm.StopMaxTokens {
					continue // cut off mid-call: nothing to run
				}
				return nil, protocolError(fmt.Sprintf("tool call %s (%s): input is not valid JSON", b.call.Name, b.call.ID))
			}
			a.resp.Message.Parts = append(a.resp.Message.Parts, llm.Part{ToolCall: b.call})
		}
	}
	if a.pendingUsage {
		a.pendingUsage = false
		a.emit(a.usageEvent())
	}
	return &a.resp, nil
}

func mapStop(raw string) llm.StopReason {
	switch sdk.StopReason(raw) {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence:
		return llm.StopEnd
	case sdk.StopReasonToolUse:
		return llm.StopToolUse
	case sdk.StopReasonMaxTokens:
		return llm.StopMaxTokens
	case sdk.StopReasonRefusal:
		return llm.StopRefusal
	default:
		return llm.StopOther
	}
}

func protocolError(msg string) *llm.Error {
	return &llm.Error{Provider: providerName, Code: "protocol_error", Message: msg}
}
