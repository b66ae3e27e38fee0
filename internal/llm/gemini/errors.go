package gemini

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

// headerKey is the context key under which a request carries the
// *http.Header its failed response's headers are copied into.
type headerKey struct{}

// headerCapture keeps the headers of failed responses for the request that
// asked (by context): genai's APIError has none, and retry-after lives there.
type headerCapture struct{ next http.RoundTripper }

func (h *headerCapture) RoundTrip(req *http.Request) (*http.Response, error) {
	next := h.next
	if next == nil {
		next = http.DefaultTransport
	}
	res, err := next.RoundTrip(req)
	if err == nil && res.StatusCode >= 400 {
		if slot, ok := req.Context().Value(headerKey{}).(*http.Header); ok {
			*slot = res.Header.Clone()
		}
	}
	return res, err
}

// classify turns a failure of one attempt into an *llm.Error. ctx is the
// attempt's context: Stream has already returned the caller's own ctx error
// if the caller cancelled, so a done ctx here is our request timeout.
func (p *Provider) classify(ctx context.Context, err error, header http.Header) error {
	if ctx.Err() != nil {
		return &llm.Error{Provider: "gemini", Code: "timeout", Message: "request timed out after " + p.timeout.String()}
	}
	var ae genai.APIError
	if errors.As(err, &ae) {
		return apiError(ae, header)
	}
	var aep *genai.APIError
	if errors.As(err, &aep) {
		return apiError(*aep, header)
	}
	return &llm.Error{Provider: "gemini", Code: "connection", Message: err.Error(), Retryable: llm.IsTransient(err)}
}

func apiError(ae genai.APIError, header http.Header) *llm.Error {
	le := &llm.Error{Provider: "gemini", Status: ae.Code, Code: ae.Status, Message: ae.Message}
	if le.Message == "" {
		le.Message = http.StatusText(ae.Code)
	}
	switch {
	case ae.Code == http.StatusTooManyRequests, ae.Code >= 500, ae.Code == http.StatusRequestTimeout:
		le.Retryable = true
	}
	switch ae.Status {
	case "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED":
		le.Retryable = true
	}
	le.RetryAfter = retryAfter(header)
	if le.RetryAfter == 0 {
		le.RetryAfter = retryInfo(ae.Details)
	}
	le.ContextOverflow = isOverflow(ae.Code, ae.Message)
	if le.ContextOverflow {
		le.Retryable = false
	}
	return le
}

// retryInfo reads google.rpc.RetryInfo's retryDelay ("37s") from details.
func retryInfo(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); !strings.HasSuffix(t, "google.rpc.RetryInfo") {
			continue
		}
		if s, _ := d["retryDelay"].(string); s != "" {
			if dur, err := time.ParseDuration(s); err == nil && dur > 0 {
				return dur
			}
		}
	}
	return 0
}

// retryAfter reads retry-after (seconds or an HTTP date): the Gemini API
// names no retry-after-ms, so a header by that name is not honoured.
func retryAfter(h http.Header) time.Duration {
	return llm.RetryAfter(http.Header{"Retry-After": h.Values("Retry-After")}, time.Now())
}

// isOverflow recognises Gemini's "the input is over the window" 400s
// ("The input token count (N) exceeds the maximum number of tokens allowed (M).").
func isOverflow(status int, msg string) bool {
	if status != http.StatusBadRequest && status != 0 {
		return false
	}
	m := strings.ToLower(msg)
	for _, s := range []string{"exceeds the maximum number of tokens", "input token count", "context window", "too many tokens", "context length"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
