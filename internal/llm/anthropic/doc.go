// Package anthropic is the llm.Provider for Anthropic's Messages API, on the
// official Go SDK (github.com/anthropics/anthropic-sdk-go/v2).
//
// It maps llm.Request to a streaming Messages request, turns the SSE event
// stream (message_start, content_block_start/delta/stop, message_delta,
// message_stop, ping, error) into llm.Events and one assembled
// llm.Response, counts tokens with the count_tokens endpoint, and classifies
// failures as *llm.Error.
//
// It owns the retry policy: the SDK's own retries are off, and a request is
// retried on 429, 5xx, 529 (overloaded) and connection failures, with
// exponential backoff and jitter, honouring retry-after-ms and retry-after,
// but never once an event has reached the caller.
//
// What it must not do: read the environment for anything but the key
// variable the operator names (the SDK's own environment defaults —
// ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, profiles, custom headers — are
// switched off), or put the key or any request header into an error, an
// event or a log.
//
// Redacted thinking: Anthropic may return a redacted_thinking block whose
// opaque data must go back verbatim. llm.Part has no field for it, so it is
// carried as a Part with an empty Thinking and the data in Signature, and
// mapped back to a redacted_thinking block on the next request.
package anthropic
