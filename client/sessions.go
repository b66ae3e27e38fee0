package cortex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Session is a conversation of the daemon's agent with one neuron: a JSONL
// file under the daemon's sessions/ directory.
type Session struct {
	ID     string `json:"id"`
	Title  string `json:"title,omitempty"`
	Neuron string `json:"neuron,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// Provider and Model are the current ones (a model change included)
	// for an open session, those it was created with otherwise.
	Provider string    `json:"provider,omitempty"`
	Model    string    `json:"model,omitempty"`
	Created  time.Time `json:"created"`
	Modified time.Time `json:"modified,omitzero"`
	// Entries counts the file's lines, the header included.
	Entries int `json:"entries,omitempty"`
	// Open says the daemon holds the session open (its agent is ready).
	Open bool `json:"open"`
	// ParentSession is the session this one was forked from.
	ParentSession string `json:"parentSession,omitempty"`
}

// SessionCreate opens a new session. Neuron "" creates a neuron; Provider
// and Model "" take the daemon's configuration (llm.provider, llm.model).
type SessionCreate struct {
	Neuron   string `json:"neuron,omitempty"`
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Title    string `json:"title,omitempty"`
}

// SessionMessage is one message on the session's current branch.
type SessionMessage struct {
	Role string `json:"role"`
	Text string `json:"text,omitempty"`
	// ToolCalls names the tools an assistant message called; ToolResults
	// counts the results a tool message carries.
	ToolCalls   []string `json:"toolCalls,omitempty"`
	ToolResults int      `json:"toolResults,omitempty"`
}

// SessionDetail is a session with its messages.
type SessionDetail struct {
	Session
	Messages []SessionMessage `json:"messages"`
}

// SessionTurn is one request of a session, a point a rewind can go back
// to, with what a rewind there does to the neuron's files (restored,
// unchanged, lost, unknown).
type SessionTurn struct {
	N          int    `json:"n"`
	Entry      string `json:"entry"`
	Request    string `json:"request"`
	Files      string `json:"files"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Why        string `json:"why,omitempty"`
}

// ChatEvent is one event of a turn's stream. Type is text (Text, a piece
// of the answer), tool_start (Tool, ID, Input), tool_result (Tool, ID,
// IsError, Output), loop (Pattern, Verdict, Message), compaction (What),
// checkpoint (Name, Neuron, Files, Error, Pruned), or turn_end (Stop,
// Message), the last.
type ChatEvent struct {
	Type    string          `json:"type"`
	Text    string          `json:"text,omitempty"`
	Tool    string          `json:"tool,omitempty"`
	ID      string          `json:"id,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	IsError bool            `json:"isError,omitempty"`
	Output  string          `json:"output,omitempty"`
	Pattern string          `json:"pattern,omitempty"`
	Verdict string          `json:"verdict,omitempty"`
	Message string          `json:"message,omitempty"`
	What    string          `json:"what,omitempty"`
	Name    string          `json:"name,omitempty"`
	Neuron  string          `json:"neuron,omitempty"`
	Files   int             `json:"files,omitempty"` // files in a checkpoint
	Error   string          `json:"error,omitempty"`
	Pruned  []string        `json:"pruned,omitempty"`
	// Stop is how the turn ended (turn_end): done, step_limit, time_limit,
	// max_tokens, loop, cancelled, error, refusal.
	Stop string `json:"stop,omitempty"`
}

// TurnRequest is one user message.
type TurnRequest struct {
	Message string `json:"message"`
}

// RewindRequest goes back to just before the request Entry (a
// SessionTurn's). KeepFiles rewinds the conversation alone when the files
// cannot be put back.
type RewindRequest struct {
	Entry     string `json:"entry"`
	KeepFiles bool   `json:"keepFiles,omitempty"`
}

// Rewound is what a rewind did: the turn gone back to and the checkpoint
// whose files were restored ("" when the files were left as they were).
type Rewound struct {
	Turn     SessionTurn `json:"turn"`
	Restored string      `json:"restored,omitempty"`
}

// ForkRequest forks a session at Entry ("" at its current point).
type ForkRequest struct {
	Entry string `json:"entry,omitempty"`
}

// SessionUpdate switches a session's model: "name" (same provider) or
// "provider/name".
type SessionUpdate struct {
	Model string `json:"model"`
}

// Sessions lists the sessions, newest first.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var out []Session
	return out, c.call(ctx, http.MethodGet, "/v1/sessions", nil, nil, &out)
}

// CreateSession opens a new session.
func (c *Client) CreateSession(ctx context.Context, r *SessionCreate) (*Session, error) {
	var out Session
	return &out, c.call(ctx, http.MethodPost, "/v1/sessions", nil, r, &out)
}

// Session returns session id with the messages of its current branch.
func (c *Client) Session(ctx context.Context, id string) (*SessionDetail, error) {
	var out SessionDetail
	return &out, c.call(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, nil, &out)
}

// UpdateSession switches session id's model.
func (c *Client) UpdateSession(ctx context.Context, id string, r *SessionUpdate) (*Session, error) {
	var out Session
	return &out, c.call(ctx, http.MethodPatch, "/v1/sessions/"+url.PathEscape(id), nil, r, &out)
}

// CloseSession closes session id in the daemon (its file stays); remove
// also deletes the file.
func (c *Client) CloseSession(ctx context.Context, id string, remove bool) error {
	q := url.Values{}
	if remove {
		q.Set("remove", "true")
	}
	return c.call(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), q, nil, nil)
}

// SessionTurns lists session id's requests, oldest first.
func (c *Client) SessionTurns(ctx context.Context, id string) ([]SessionTurn, error) {
	var out []SessionTurn
	return out, c.call(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/turns", nil, nil, &out)
}

// Rewind goes back to just before a request, files included.
func (c *Client) Rewind(ctx context.Context, id string, r *RewindRequest) (*Rewound, error) {
	var out Rewound
	return &out, c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/rewind", nil, r, &out)
}

// Fork forks session id and returns the new session (open in the daemon).
func (c *Client) Fork(ctx context.Context, id string, r *ForkRequest) (*Session, error) {
	var out Session
	return &out, c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/fork", nil, r, &out)
}

// Compact summarises session id's older turns now.
func (c *Client) Compact(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/compact", nil, nil, nil)
}

// Send runs one turn of session id: on is called with each event as it
// arrives, and Send returns the turn_end event. Cancelling ctx cancels the
// turn in the daemon (its tool calls end, no process is left).
func (c *Client) Send(ctx context.Context, id, message string, on func(ChatEvent)) (*ChatEvent, error) {
	b, err := json.Marshal(TurnRequest{Message: message})
	if err != nil {
		return nil, err
	}
	req, err := c.request(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/turns", nil, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	s, err := c.stream(req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the turn's event stream ended without its turn_end event")
		}
		if err != nil {
			return nil, err
		}
		if ev.Chat == nil {
			continue
		}
		if on != nil {
			on(*ev.Chat)
		}
		if ev.Chat.Type == "turn_end" {
			return ev.Chat, nil
		}
	}
}
