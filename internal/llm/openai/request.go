package openai

import (
	"encoding/json"
	"fmt"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// params maps req onto a Chat Completions request.
func (p *Provider) params(req *llm.Request) (sdk.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	params := sdk.ChatCompletionNewParams{
		Model:         model,
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	if req.System != "" {
		params.Messages = append(params.Messages, sdk.SystemMessage(req.System))
	}
	for i := range req.Messages {
		msgs, err := messages(&req.Messages[i])
		if err != nil {
			return params, fmt.Errorf("%s: message %d: %w", p.name, i, err)
		}
		params.Messages = append(params.Messages, msgs...)
	}
	for _, t := range req.Tools {
		tool, err := functionTool(t)
		if err != nil {
			return params, fmt.Errorf("%s: %w", p.name, err)
		}
		params.Tools = append(params.Tools, tool)
	}
	if req.MaxTokens > 0 {
		// OpenAI's reasoning models reject max_tokens; most local servers
		// only know it.
		if p.local {
			params.MaxTokens = sdk.Int(int64(req.MaxTokens))
		} else {
			params.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
		}
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	return params, nil
}

// messages maps one llm.Message onto Chat Completions messages: tool
// results become one "tool" message each; thinking is not sent back
// (Chat Completions has no place for it).
func messages(m *llm.Message) ([]sdk.ChatCompletionMessageParamUnion, error) {
	var out []sdk.ChatCompletionMessageParamUnion
	text := ""
	var calls []sdk.ChatCompletionMessageToolCallUnionParam
	for _, part := range m.Parts {
		switch {
		case part.ToolResult != nil:
			r := part.ToolResult
			content := r.Content
			if r.IsError {
				// Chat Completions has no error flag on tool results.
				content = "Error: " + content
			}
			out = append(out, sdk.ToolMessage(content, r.CallID))
		case part.ToolCall != nil:
			c := part.ToolCall
			args := string(c.Input)
			if len(c.Input) == 0 {
				args = "{}"
			}
			calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       c.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: args},
				},
			})
		default:
			text += part.Text
		}
	}
	switch m.Role {
	case llm.RoleAssistant:
		if text == "" && len(calls) == 0 {
			return out, nil
		}
		var a sdk.ChatCompletionAssistantMessageParam
		if text != "" {
			a.Content.OfString = sdk.String(text)
		}
		a.ToolCalls = calls
		return append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a}), nil
	case llm.RoleUser, llm.RoleTool:
		if len(calls) > 0 {
			return nil, fmt.Errorf("a %s message carries tool calls", m.Role)
		}
		if text != "" {
			out = append(out, sdk.UserMessage(text))
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown role %q", m.Role)
	}
}

// functionTool maps a tool onto a function tool whose parameters are the
// tool's JSON schema.
func functionTool(t llm.Tool) (sdk.ChatCompletionToolUnionParam, error) {
	params := shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
	if len(t.InputSchema) > 0 {
		params = shared.FunctionParameters{}
		if err := json.Unmarshal(t.InputSchema, &params); err != nil {
			return sdk.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: input schema is not a JSON object: %w", t.Name, err)
		}
	}
	def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
	if t.Description != "" {
		def.Description = sdk.String(t.Description)
	}
	return sdk.ChatCompletionFunctionTool(def), nil
}
