package openai

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/nsys-cortex/cortex/internal/llm"
)

var loaderOnce sync.Once

// encodingFor returns the tokenizer of an OpenAI model: tiktoken's own
// table, else o200k_base, which every OpenAI chat model since gpt-4o uses.
func encodingFor(model string) (*tiktoken.Tiktoken, error) {
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	if enc, err := tiktoken.EncodingForModel(model); err == nil {
		return enc, nil
	}
	return tiktoken.GetEncoding(tiktoken.MODEL_O200K_BASE)
}

// CountTokens counts req's input tokens with OpenAI's tokenizer (offline),
// following OpenAI's accounting for chat messages. Only the "openai"
// provider has a tokenizer that is exact for its models; for a compatible
// server it returns an error, and the caller estimates instead.
func (p *Provider) CountTokens(ctx context.Context, req *llm.Request) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if p.name != "openai" {
		return 0, fmt.Errorf("%s: no tokenizer known for this server's models", p.name)
	}
	model := req.Model
	if model == "" {
		model = p.model
	}
	enc, err := encodingFor(model)
	if err != nil {
		return 0, fmt.Errorf("openai: tokenizer for %s: %w", model, err)
	}
	count := func(s string) int { return len(enc.EncodeOrdinary(s)) }
	// Each message costs 3 tokens of framing plus its role and content;
	// the reply is primed with 3 more (OpenAI's cookbook accounting).
	const perMessage, reply = 3, 3
	n := reply
	if req.System != "" {
		n += perMessage + count("system") + count(req.System)
	}
	for _, m := range req.Messages {
		var text strings.Builder
		for _, part := range m.Parts {
			switch {
			case part.ToolResult != nil:
				n += perMessage + count("tool") + count(part.ToolResult.Content) + count(part.ToolResult.CallID)
			case part.ToolCall != nil:
				n += perMessage + count(part.ToolCall.Name) + count(string(part.ToolCall.Input)) + count(part.ToolCall.ID)
			default:
				text.WriteString(part.Text)
			}
		}
		if text.Len() > 0 {
			n += perMessage + count(string(m.Role)) + count(text.String())
		}
	}
	// Tool definitions are rendered into the prompt in a format OpenAI does
	// not publish; their names, descriptions and schemas are most of it.
	for _, t := range req.Tools {
		n += count(t.Name) + count(t.Description) + count(string(t.InputSchema)) + 8
	}
	return n, nil
}
