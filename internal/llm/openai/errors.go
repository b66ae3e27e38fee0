package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// statusError is a non-2xx response, caught by middleware before the SDK
// parses it: compatible servers shape their error bodies differently
// ({"error": {...}}, {"error": "text"}, {"message": ...}, {"detail": ...},
// plain text), and the SDK drops the status of the ones it cannot parse.
type statusError struct {
	status int
	header http.Header
	body   []byte
}

func (e *statusError) Error() string { return "HTTP " + strconv.Itoa(e.status) }

// catchStatus is SDK middleware that turns a non-2xx response into a
// *statusError.
func catchStatus(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil || res.StatusCode < 400 {
		return res, err
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10)) // best effort: the message only
	_ = res.Body.Close()                                    // read what we need; the rest is discarded
	return nil, &statusError{status: res.StatusCode, header: res.Header, body: body}
}

// classify turns a failure of one attempt into an *llm.Error. ctx is the
// attempt's context: Stream has already returned the caller's own ctx error
// if the caller cancelled, so a done ctx here is our request timeout.
func (p *Provider) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &llm.Error{Provider: p.name, Code: "timeout", Message: "request timed out after " + p.timeout.String()}
	}
	var se *statusError
	if errors.As(err, &se) {
		return p.httpError(se)
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		le := &llm.Error{Provider: p.name, Status: apiErr.StatusCode, Code: apiErr.Code, Message: apiErr.Message}
		le.Retryable = retryableStatus(apiErr.StatusCode)
		le.ContextOverflow = isOverflow(le.Code, le.Message)
		return le
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return p.streamError(streamErr)
	}
	le := &llm.Error{Provider: p.name, Code: "connection", Message: err.Error()}
	le.Retryable = llm.IsTransient(err)
	return le
}

func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500 ||
		status == http.StatusRequestTimeout || status == http.StatusConflict
}

func (p *Provider) httpError(e *statusError) *llm.Error {
	le := &llm.Error{Provider: p.name, Status: e.status}
	le.Code, le.Message = parseErrorBody(e.body)
	if le.Message == "" {
		le.Message = http.StatusText(e.status)
	}
	le.Retryable = retryableStatus(e.status)
	le.RetryAfter = llm.RetryAfter(e.header, time.Now())
	le.ContextOverflow = isOverflow(le.Code, le.Message)
	if le.ContextOverflow || le.Code == "insufficient_quota" {
		le.Retryable = false // waiting will not make it fit, or pay
	}
	return le
}

// parseErrorBody reads the error shapes OpenAI and the compatible servers send.
func parseErrorBody(body []byte) (code, msg string) {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return "", truncate(strings.TrimSpace(string(body)), 500)
	}
	if len(v.Error) > 0 {
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &obj) == nil {
			return codeOf(obj.Code, obj.Type), obj.Message
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil {
			return "", s
		}
	}
	if v.Message != "" {
		return codeOf(v.Code, v.Type), v.Message
	}
	if len(v.Detail) > 0 {
		var s string
		if json.Unmarshal(v.Detail, &s) == nil {
			return "", s
		}
		return "", truncate(string(v.Detail), 500)
	}
	return "", truncate(strings.TrimSpace(string(body)), 500)
}

// codeOf prefers the string code ("context_length_exceeded") over the type
// ("invalid_request_error"); a numeric code (vLLM sends the status) is no code.
func codeOf(raw json.RawMessage, typ string) string {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	return typ
}

// streamError classifies an error the server sent inside the stream
// (data: {"error": {...}}).
func (p *Provider) streamError(e *ssestream.StreamError) *llm.Error {
	var body struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	le := &llm.Error{Provider: p.name, Message: e.Message}
	if json.Unmarshal(e.Event.Data, &body) == nil && body.Error.Message != "" {
		le.Message = body.Error.Message
		le.Code = codeOf(body.Error.Code, body.Error.Type)
	}
	le.ContextOverflow = isOverflow(le.Code, le.Message)
	switch le.Code {
	case "server_error", "rate_limit_exceeded", "overloaded", "overloaded_error", "service_unavailable":
		le.Retryable = true
	}
	return le
}

var overflowPhrases = []string{
	"maximum context length",
	"context length exceeded",
	"context_length_exceeded",
	"context window",
	"too many tokens",
	"prompt is too long",
	"input is too long",
	"exceeds the context",
}

// isOverflow recognises "the prompt did not fit" across OpenAI and the
// compatible servers, which phrase it differently.
func isOverflow(code, msg string) bool {
	if code == "context_length_exceeded" || code == "string_above_max_length" {
		return true
	}
	m := strings.ToLower(msg)
	for _, s := range overflowPhrases {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
