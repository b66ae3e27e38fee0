// Package llm is the small provider interface the agent loop drives, and
// the types it speaks: messages with text, tool calls and tool results;
// streamed events; usage; stop reasons. Each vendor lives in its own
// subpackage (anthropic, openai, gemini) on the vendor's official Go SDK;
// what they share (the retry rule: Retry, Backoff, RetryAfter, IsTransient)
// lives here, and this package imports no vendor SDK.
//
// Keys never enter this package's values: a provider is built with its key
// read from the environment variable the operator names, and nothing here
// is ever written to a session or a log with it.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Role is who wrote a message.
type Role string

// Roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries tool results back to the model (Anthropic sends them
	// as a user message; OpenAI as tool messages; Gemini as function
	// responses: providers map it).
	RoleTool Role = "tool"
)

// Part is one piece of a message: exactly one of Text, ToolCall, ToolResult
// (or Thinking, kept for providers that must get it back).
type Part struct {
	Text       string      `json:"text,omitempty"`
	ToolCall   *ToolCall   `json:"toolCall,omitempty"`
	ToolResult *ToolResult `json:"toolResult,omitempty"`
	// Thinking is reasoning text some providers return and require back
	// verbatim (with its Signature) in the next request.
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// ToolCall is the model asking to run a tool.
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolResult answers one ToolCall.
type ToolResult struct {
	CallID  string `json:"callId"`
	Name    string `json:"name,omitempty"` // Gemini matches results by name
	Content string `json:"content"`
	IsError bool   `json:"isError,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role  Role   `json:"role"`
	Parts []Part `json:"parts"`
}

// Text joins the message's text parts.
func (m *Message) Text() string {
	s := ""
	for _, p := range m.Parts {
		s += p.Text
	}
	return s
}

// ToolCalls returns the message's tool calls.
func (m *Message) ToolCalls() []*ToolCall {
	var out []*ToolCall
	for _, p := range m.Parts {
		if p.ToolCall != nil {
			out = append(out, p.ToolCall)
		}
	}
	return out
}

// Tool describes a tool to the model.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"` // a JSON schema object
}

// Request is one call to the model.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0: the provider's default for the model
	// Temperature, when set, overrides the provider's default.
	Temperature *float64
}

// StopReason says why the model stopped.
type StopReason string

// Stop reasons, normalised across vendors.
const (
	StopEnd       StopReason = "end"        // the model finished its answer
	StopToolUse   StopReason = "tool_use"   // it wants tool results
	StopMaxTokens StopReason = "max_tokens" // the output limit cut it
	StopRefusal   StopReason = "refusal"    // the model or a safety filter refused
	StopOther     StopReason = "other"      // anything else (the raw reason in Response.RawStop)
)

// Usage counts tokens as the provider reports them (zero: not reported).
type Usage struct {
	InputTokens       int `json:"inputTokens"`
	OutputTokens      int `json:"outputTokens"`
	CacheReadTokens   int `json:"cacheReadTokens,omitempty"`
	CacheCreateTokens int `json:"cacheCreateTokens,omitempty"`
}

// Response is the model's whole answer.
type Response struct {
	Message Message
	Stop    StopReason
	RawStop string // the vendor's own stop reason
	Usage   Usage
	Model   string // the model that answered, as the vendor names it
}

// EventKind names a streamed event.
type EventKind string

// Event kinds.
const (
	EventText      EventKind = "text"       // Text holds a piece of the answer
	EventThinking  EventKind = "thinking"   // Text holds a piece of reasoning
	EventToolStart EventKind = "tool_start" // ToolCall has ID and Name; its input follows
	EventToolDelta EventKind = "tool_delta" // Text holds a piece of the tool call's JSON input
	EventToolEnd   EventKind = "tool_end"   // ToolCall is complete (Input parsed and valid JSON)
	EventUsage     EventKind = "usage"      // Usage so far
)

// Event is one piece of a streamed answer.
type Event struct {
	Kind     EventKind
	Text     string
	ToolCall *ToolCall
	// Index orders parallel tool calls (the position in the message).
	Index int
	Usage *Usage
}

// Provider is one model vendor's API.
//
// Stream sends req and calls onEvent for each piece as it arrives (onEvent
// may be nil), then returns the whole Response assembled from the stream.
// Tool calls whose JSON arrives in pieces are assembled; parallel tool calls
// keep their order. Retryable failures (429, 5xx, overloaded, connection
// reset before any event) are retried with backoff honouring retry-after,
// up to the provider's limit; after the first event has reached onEvent a
// failure is returned, never retried (the caller has shown output).
// Cancelling ctx stops the request at once and returns ctx's error.
type Provider interface {
	// Name is the provider's name ("anthropic", "openai", "gemini", or the
	// OpenAI-compatible server's configured name).
	Name() string
	Stream(ctx context.Context, req *Request, onEvent func(Event)) (*Response, error)
}

// TokenCounter is a Provider that can count a request's input tokens
// exactly (a vendor count endpoint, or a real tokenizer).
type TokenCounter interface {
	CountTokens(ctx context.Context, req *Request) (int, error)
}

// Error is a provider failure, classified.
type Error struct {
	Provider string
	Status   int    // HTTP status, 0 when none
	Code     string // the vendor's error type/code
	Message  string
	// Retryable failures were retried until the limit; RetryAfter is what
	// the server asked for last.
	Retryable  bool
	RetryAfter time.Duration
	// ContextOverflow: the request was over the model's context window.
	ContextOverflow bool
}

func (e *Error) Error() string {
	s := e.Provider
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	return s + ": " + e.Message
}

// Class is errdefs.Internal: a provider's failure is the daemon's to
// report (the API's INTERNAL, as before classes), whatever its status;
// the provider's status and code are in the message.
func (e *Error) Class() errdefs.Class { return errdefs.Internal }

// IsContextOverflow reports whether err says the request did not fit the
// model's context window.
func IsContextOverflow(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.ContextOverflow
}

// Config selects and configures a provider (from the config file or flags).
type Config struct {
	Provider string `json:"provider"` // anthropic, openai, gemini, or an OpenAI-compatible name: ollama, vllm, lmstudio, sglang, grok, mistral, openai-compatible
	Model    string `json:"model"`
	BaseURL  string `json:"baseUrl,omitempty"`
	// KeyEnv names the environment variable holding the API key (default
	// per provider: ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY,
	// XAI_API_KEY, MISTRAL_API_KEY; local servers need none).
	KeyEnv     string        `json:"keyEnv,omitempty"`
	MaxRetries int           `json:"maxRetries,omitempty"` // default 4
	Timeout    time.Duration `json:"timeout,omitempty"`    // per request, default 10 min
}
