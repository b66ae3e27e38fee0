package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// CountTokens asks the countTokens endpoint for req's exact input size,
// system instruction and tools included. genai's CountTokens refuses those
// two on the Gemini API, so this posts the documented
// {"generateContentRequest": ...} form itself.
func (p *Provider) CountTokens(ctx context.Context, req *llm.Request) (int, error) {
	contents, config, err := p.request(req)
	if err != nil {
		return 0, err
	}
	model := "models/" + p.modelFor(req)
	body, err := json.Marshal(map[string]any{
		"generateContentRequest": struct {
			Model             string           `json:"model"`
			Contents          []*genai.Content `json:"contents"`
			SystemInstruction *genai.Content   `json:"systemInstruction,omitempty"`
			Tools             []*genai.Tool    `json:"tools,omitempty"`
		}{model, contents, config.SystemInstruction, config.Tools},
	})
	if err != nil {
		return 0, fmt.Errorf("gemini: count tokens: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+apiVersion+"/"+model+":countTokens", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("gemini: count tokens: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("x-goog-api-key", p.key)
	res, err := p.http.Do(httpReq)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, &llm.Error{Provider: "gemini", Code: "connection", Message: err.Error(), Retryable: llm.IsTransient(err)}
	}
	defer res.Body.Close() //nolint:errcheck // read-only body
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, &llm.Error{Provider: "gemini", Code: "connection", Message: err.Error(), Retryable: true}
	}
	if res.StatusCode >= 400 {
		var e struct {
			Error *genai.APIError `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == nil {
			e.Error = &genai.APIError{Message: string(data)}
		}
		e.Error.Code = res.StatusCode
		return 0, apiError(*e.Error, res.Header)
	}
	var out struct {
		TotalTokens int `json:"totalTokens"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("gemini: count tokens: bad response: %w", err)
	}
	return out.TotalTokens, nil
}
