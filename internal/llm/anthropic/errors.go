package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// statusOverloaded is Anthropic's "the API is temporarily overloaded".
const statusOverloaded = 529

// retryableTypes are the error types an SSE error event (sent with HTTP
// 200, so the status cannot tell) carries for a transient failure.
var retryableTypes = map[string]bool{
	"overloaded_error": true,
	"api_error":        true,
	"rate_limit_error": true,
	"timeout_error":    true,
}

// overflowPhrases are how the API words "the request does not fit the
// context window" in a 400 invalid_request_error.
var overflowPhrases = []string{
	"prompt is too long",
	"exceed context limit",
	"exceeds the context window",
	"context window",
	"context length",
	"too many tokens",
}

// classify turns an attempt's failure into an *llm.Error. timedOut says the
// attempt's own timeout (not the caller's ctx) ended it.
func (p *Provider) classify(err error, timedOut bool) *llm.Error {
	var lerr *llm.Error
	if errors.As(err, &lerr) {
		return lerr
	}
	var aerr *sdk.Error
	if errors.As(err, &aerr) {
		return p.apiError(aerr)
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		// A malformed event: the server is not speaking the protocol, and
		// asking again will not change that.
		return protocolError("malformed stream event: " + p.scrub(err.Error()))
	}
	e := &llm.Error{Provider: providerName, Retryable: true}
	switch {
	case timedOut:
		e.Code = "timeout"
		e.Message = fmt.Sprintf("no complete answer within %v", p.timeout)
	case errors.Is(err, errIncomplete):
		e.Code = "connection_error"
		e.Message = err.Error()
	default:
		// Transport failures (refused, reset, EOF mid-body). *url.Error
		// names method and URL, never headers; the key is scrubbed anyway.
		e.Code = "connection_error"
		e.Message = p.scrub(err.Error())
	}
	return e
}

func (p *Provider) apiError(aerr *sdk.Error) *llm.Error {
	e := &llm.Error{
		Provider: providerName,
		Code:     string(aerr.Type()),
		Message:  p.scrub(aerr.Message),
	}
	// An error event inside a 200 stream has the stream's status; it is not
	// the error's.
	if aerr.StatusCode >= 400 {
		e.Status = aerr.StatusCode
	}
	if e.Message == "" {
		if raw := aerr.RawJSON(); raw != "" {
			e.Message = p.scrub(truncate(raw, 500))
		} else if e.Status != 0 {
			e.Message = http.StatusText(e.Status)
		}
	}
	var h http.Header
	if aerr.Response != nil {
		h = aerr.Response.Header
	}
	e.RetryAfter = llm.RetryAfter(h, time.Now())
	switch {
	case e.Status == http.StatusTooManyRequests, e.Status == statusOverloaded,
		e.Status == http.StatusRequestTimeout, e.Status == http.StatusConflict,
		e.Status >= 500:
		e.Retryable = true
	case e.Status == 0:
		e.Retryable = retryableTypes[e.Code]
	}
	// The server's explicit word beats the status.
	switch h.Get("x-should-retry") {
	case "true":
		e.Retryable = true
	case "false":
		e.Retryable = false
	}
	if e.Status == http.StatusRequestEntityTooLarge || (e.Status == http.StatusBadRequest && isOverflow(e.Message)) {
		e.ContextOverflow = true
	}
	return e
}

func isOverflow(msg string) bool {
	msg = strings.ToLower(msg)
	for _, p := range overflowPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// scrub removes the key from text bound for an error, in case a server or
// proxy echoes it back.
func (p *Provider) scrub(s string) string {
	if p.key == "" {
		return s
	}
	return strings.ReplaceAll(s, p.key, "[redacted]")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
