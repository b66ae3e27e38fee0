package gemini

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// syntheticIDPrefix marks call ids made here for calls the API sent
// without one; they are not sent back.
const syntheticIDPrefix = "gemini_call_"

// request maps req onto Gemini contents and config.
func (p *Provider) request(req *llm.Request) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	config := &genai.GenerateContentConfig{}
	if req.System != "" {
		config.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.System}}}
	}
	if req.MaxTokens > 0 {
		config.MaxOutputTokens = int32(req.MaxTokens)
	}
	if req.Temperature != nil {
		t := float32(*req.Temperature)
		config.Temperature = &t
	}
	if len(req.Tools) > 0 {
		tool := &genai.Tool{}
		for _, t := range req.Tools {
			decl, err := declaration(t)
			if err != nil {
				return nil, nil, err
			}
			tool.FunctionDeclarations = append(tool.FunctionDeclarations, decl)
		}
		config.Tools = []*genai.Tool{tool}
	}
	contents, err := contents(req.Messages)
	if err != nil {
		return nil, nil, err
	}
	return contents, config, nil
}

// declaration maps a tool onto a function declaration whose parameters are
// the tool's JSON schema as is (parametersJsonSchema, not genai's Schema
// subset).
func declaration(t llm.Tool) (*genai.FunctionDeclaration, error) {
	var schema map[string]any
	if len(t.InputSchema) > 0 {
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return nil, fmt.Errorf("gemini: tool %q: input schema is not a JSON object: %w", t.Name, err)
		}
	} else {
		schema = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: schema}, nil
}

// contents maps the conversation. Tool results become functionResponse
// parts in a user turn, named after their call (found by id when the
// result carries no name). Consecutive turns of one role merge into one
// (tool results, then a request after a turn that ended without an
// answer): the API wants user and model turns to alternate.
func contents(msgs []llm.Message) ([]*genai.Content, error) {
	names := map[string]string{} // call id → function name
	var out []*genai.Content
	for i, m := range msgs {
		c := &genai.Content{Role: genai.RoleUser}
		if m.Role == llm.RoleAssistant {
			c.Role = genai.RoleModel
		} else if m.Role != llm.RoleUser && m.Role != llm.RoleTool {
			return nil, fmt.Errorf("gemini: message %d: unknown role %q", i, m.Role)
		}
		for _, part := range m.Parts {
			gp, err := toPart(part, names)
			if err != nil {
				return nil, fmt.Errorf("gemini: message %d: %w", i, err)
			}
			if gp != nil {
				c.Parts = append(c.Parts, gp)
			}
		}
		switch {
		case len(c.Parts) == 0:
		case len(out) > 0 && out[len(out)-1].Role == c.Role:
			out[len(out)-1].Parts = append(out[len(out)-1].Parts, c.Parts...)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

func toPart(part llm.Part, names map[string]string) (*genai.Part, error) {
	sig, err := signature(part.Signature)
	if err != nil {
		return nil, err
	}
	switch {
	case part.ToolCall != nil:
		call := part.ToolCall
		names[call.ID] = call.Name
		args := map[string]any{}
		if len(call.Input) > 0 {
			if err := json.Unmarshal(call.Input, &args); err != nil {
				return nil, fmt.Errorf("tool call %s (%s): input is not a JSON object: %w", call.ID, call.Name, err)
			}
		}
		return &genai.Part{FunctionCall: &genai.FunctionCall{ID: apiID(call.ID), Name: call.Name, Args: args}, ThoughtSignature: sig}, nil
	case part.ToolResult != nil:
		r := part.ToolResult
		name := r.Name
		if name == "" {
			name = names[r.CallID]
		}
		if name == "" {
			return nil, fmt.Errorf("tool result for call %s has no function name", r.CallID)
		}
		key := "output"
		if r.IsError {
			key = "error"
		}
		return &genai.Part{FunctionResponse: &genai.FunctionResponse{
			ID: apiID(r.CallID), Name: name, Response: map[string]any{key: r.Content},
		}}, nil
	case part.Thinking != "":
		return &genai.Part{Text: part.Thinking, Thought: true, ThoughtSignature: sig}, nil
	case part.Text != "" || sig != nil:
		return &genai.Part{Text: part.Text, ThoughtSignature: sig}, nil
	}
	return nil, nil
}

// apiID is the id to send back: the API's own, never one made here.
func apiID(id string) string {
	if strings.HasPrefix(id, syntheticIDPrefix) {
		return ""
	}
	return id
}

func signature(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("thought signature is not base64: %w", err)
	}
	return b, nil
}
