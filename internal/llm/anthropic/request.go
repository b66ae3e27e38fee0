package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// newParams maps req to a Messages request.
func (p *Provider) newParams(req *llm.Request) (sdk.MessageNewParams, error) {
	model, msgs, tools, err := p.common(req)
	if err != nil {
		return sdk.MessageNewParams{}, err
	}
	params := sdk.MessageNewParams{
		Model:     model,
		MaxTokens: int64(req.MaxTokens),
		Messages:  msgs,
	}
	if params.MaxTokens <= 0 {
		params.MaxTokens = defaultMaxTokens(model)
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	if req.Temperature != nil {
		// This SDK version dropped the deprecated temperature field; the
		// API still reads it, so it goes in as an extra field.
		params.SetExtraFields(map[string]any{"temperature": *req.Temperature})
	}
	for _, t := range tools {
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: t})
	}
	return params, nil
}

// newCountParams maps req to a count_tokens request.
func (p *Provider) newCountParams(req *llm.Request) (sdk.MessageCountTokensParams, error) {
	model, msgs, tools, err := p.common(req)
	if err != nil {
		return sdk.MessageCountTokensParams{}, err
	}
	params := sdk.MessageCountTokensParams{Model: model, Messages: msgs}
	if req.System != "" {
		params.System.OfTextBlockArray = []sdk.TextBlockParam{{Text: req.System}}
	}
	for _, t := range tools {
		params.Tools = append(params.Tools, sdk.MessageCountTokensToolUnionParam{OfTool: t})
	}
	return params, nil
}

func (p *Provider) common(req *llm.Request) (string, []sdk.MessageParam, []*sdk.ToolParam, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return "", nil, nil, requestError("no model: set model in the provider config or the request")
	}
	msgs, err := mapMessages(req.Messages)
	if err != nil {
		return "", nil, nil, err
	}
	tools, err := mapTools(req.Tools)
	if err != nil {
		return "", nil, nil, err
	}
	return model, msgs, tools, nil
}

// defaultMaxTokens is an output limit every model of the family accepts:
// the Claude 3 (not 3.5+) models stop at 4096.
func defaultMaxTokens(model string) int64 {
	for _, old := range []string{"claude-3-haiku", "claude-3-sonnet", "claude-3-opus"} {
		if strings.HasPrefix(model, old) {
			return 4096
		}
	}
	return DefaultMaxTokens
}

func mapTools(tools []llm.Tool) ([]*sdk.ToolParam, error) {
	var out []*sdk.ToolParam
	for _, t := range tools {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		if !json.Valid(schema) {
			return nil, requestError(fmt.Sprintf("tool %q: input schema is not valid JSON", t.Name))
		}
		tp := &sdk.ToolParam{
			Name: t.Name,
			// The schema goes out verbatim: $defs, enums, additionalProperties and all.
			InputSchema: param.Override[sdk.ToolInputSchemaParam](schema),
		}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		out = append(out, tp)
	}
	return out, nil
}

// mapMessages turns the conversation into the API's alternating turns:
// RoleTool becomes a user turn of tool_result blocks; consecutive turns of
// the same API role merge into one, tool results first (the API wants them
// at the start of the user content); empty turns are dropped.
func mapMessages(msgs []llm.Message) ([]sdk.MessageParam, error) {
	type turn struct {
		user    bool
		results []sdk.ContentBlockParamUnion // tool_result blocks (user turns)
		blocks  []sdk.ContentBlockParamUnion
	}
	var turns []*turn
	for i, m := range msgs {
		var user bool
		switch m.Role {
		case llm.RoleUser, llm.RoleTool:
			user = true
		case llm.RoleAssistant:
		default:
			return nil, requestError(fmt.Sprintf("message %d: unknown role %q", i, m.Role))
		}
		if len(turns) == 0 || turns[len(turns)-1].user != user {
			turns = append(turns, &turn{user: user})
		}
		t := turns[len(turns)-1]
		for _, part := range m.Parts {
			b, isResult, err := mapPart(part, user)
			if err != nil {
				return nil, requestError(fmt.Sprintf("message %d: %v", i, err))
			}
			switch {
			case b == nil:
			case isResult:
				t.results = append(t.results, *b)
			default:
				t.blocks = append(t.blocks, *b)
			}
		}
	}
	var out []sdk.MessageParam
	for _, t := range turns {
		blocks := append(t.results, t.blocks...)
		if len(blocks) == 0 {
			continue
		}
		if n := len(out); n > 0 && (out[n-1].OfUser != nil) == t.user {
			// Dropping an empty turn brought two of one role together.
			prev := &out[n-1]
			if t.user {
				prev.OfUser.Content = append(prev.OfUser.Content, blocks...)
			} else {
				prev.OfAssistant.Content = append(prev.OfAssistant.Content, blocks...)
			}
			continue
		}
		if t.user {
			out = append(out, sdk.NewUserMessage(blocks...))
		} else {
			out = append(out, sdk.NewAssistantMessage(blocks...))
		}
	}
	return out, nil
}

// mapPart maps one part to a content block (nil: nothing to send, such as
// empty text, which the API refuses).
func mapPart(part llm.Part, user bool) (b *sdk.ContentBlockParamUnion, isResult bool, err error) {
	var block sdk.ContentBlockParamUnion
	switch {
	case part.ToolResult != nil:
		if !user {
			return nil, false, fmt.Errorf("tool result %q in an assistant message", part.ToolResult.CallID)
		}
		r := part.ToolResult
		tr := &sdk.ToolResultBlockParam{ToolUseID: r.CallID, IsError: param.NewOpt(r.IsError)}
		if r.Content != "" {
			tr.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: r.Content}}}
		}
		return &sdk.ContentBlockParamUnion{OfToolResult: tr}, true, nil
	case part.ToolCall != nil:
		if user {
			return nil, false, fmt.Errorf("tool call %q in a user message", part.ToolCall.ID)
		}
		c := part.ToolCall
		input := c.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		if !json.Valid(input) {
			return nil, false, fmt.Errorf("tool call %q: input is not valid JSON", c.ID)
		}
		block = sdk.NewToolUseBlock(c.ID, input, c.Name)
	case part.Thinking != "":
		block = sdk.NewThinkingBlock(part.Signature, part.Thinking)
	case part.Signature != "":
		block = sdk.NewRedactedThinkingBlock(part.Signature)
	case part.Text != "":
		block = sdk.NewTextBlock(part.Text)
	default:
		return nil, false, nil
	}
	return &block, false, nil
}

func requestError(msg string) *llm.Error {
	return &llm.Error{Provider: providerName, Code: "invalid_request", Message: msg}
}
