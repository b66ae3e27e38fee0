package gemini

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genai"

	"github.com/nsys-cortex/cortex/internal/llm"
)

const (
	baseBackoff = 500 * time.Millisecond
	maxBackoff  = 30 * time.Second
	// maxRetryAfter is the longest retry delay we wait out; a server asking
	// for more gets its error returned instead.
	maxRetryAfter = 2 * time.Minute
)

// backoff is the wait before retry number attempt+1: exponential, with
// jitter over its upper half.
func backoff(attempt int) time.Duration {
	d := min(baseBackoff<<min(attempt, 10), maxBackoff)
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

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
	return &llm.Error{Provider: "gemini", Code: "connection", Message: err.Error(), Retryable: isTransient(err)}
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

func retryAfter(h http.Header) time.Duration {
	v := h.Get("retry-after")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
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

// isTransient reports a connection that broke rather than one refused.
func isTransient(err error) bool {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "unexpected EOF")
}
