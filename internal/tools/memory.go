package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/tools/memory"
)

// store returns the kit's memory store.
func (c *call) memoryStore() (*memory.Store, error) {
	if c.kit.memory == nil {
		return nil, errors.New("memory is not configured for this session")
	}
	return c.kit.memory()
}

type memorySearchIn struct {
	Query string `json:"query" jsonschema:"words to look for (a trailing * matches a prefix)"`
	Limit int    `json:"limit,omitempty" jsonschema:"most results (default 10)"`
}

var memorySearchTool = define("memory_search", GroupMemory, Annotations{ReadOnly: true, Idempotent: true},
	"Search your persistent memory (notes kept across sessions) by full text. Returns keys with snippets; read a whole note with memory_get.",
	func(s *jsonschema.Schema) { bounds(s, "limit", 0, 100) },
	nil,
	func(ctx context.Context, c *call, in *memorySearchIn) (*Result, error) {
		st, err := c.memoryStore()
		if err != nil {
			return nil, err
		}
		limit := in.Limit
		if limit == 0 {
			limit = 10
		}
		hits, err := st.Search(ctx, in.Query, limit)
		if err != nil {
			return nil, err
		}
		if len(hits) == 0 {
			return textf("no memory matches %q", in.Query), nil
		}
		var b strings.Builder
		for _, h := range hits {
			fmt.Fprintf(&b, "%s", h.Key)
			if len(h.Tags) > 0 {
				fmt.Fprintf(&b, " [%s]", strings.Join(h.Tags, ", "))
			}
			fmt.Fprintf(&b, " (updated %s)\n  %s\n", h.Updated.Format(time.DateOnly), h.Snippet)
		}
		return text(strings.TrimSuffix(b.String(), "\n")), nil
	})

type memoryGetIn struct {
	Key string `json:"key" jsonschema:"the note's key"`
}

var memoryGetTool = define("memory_get", GroupMemory, Annotations{ReadOnly: true, Idempotent: true},
	"Read one note of your persistent memory by key.",
	nil, nil,
	func(ctx context.Context, c *call, in *memoryGetIn) (*Result, error) {
		st, err := c.memoryStore()
		if err != nil {
			return nil, err
		}
		e, err := st.Get(ctx, in.Key)
		if err != nil {
			return nil, err
		}
		head := e.Key
		if len(e.Tags) > 0 {
			head += " [" + strings.Join(e.Tags, ", ") + "]"
		}
		return textf("%s (updated %s)\n\n%s", head, e.Updated.Format(time.RFC3339), e.Content), nil
	})

type memoryUpdateIn struct {
	Key     string   `json:"key" jsonschema:"the note's key (a short path-like name: project/decisions)"`
	Content string   `json:"content,omitempty" jsonschema:"the note's text (replace, append)"`
	Tags    []string `json:"tags,omitempty" jsonschema:"labels for the note"`
	Mode    string   `json:"mode,omitempty" jsonschema:"replace (default), append or delete"`
}

var memoryUpdateTool = define("memory_update", GroupMemory, Annotations{Destructive: true}, // replace and delete
	"Write to your persistent memory: replace a note, append a paragraph to it, or delete it. Keep notes short and factual: what future sessions need (decisions, conventions, where things are).",
	func(s *jsonschema.Schema) { enum(s, "mode", "replace", "append", "delete") },
	nil,
	func(ctx context.Context, c *call, in *memoryUpdateIn) (*Result, error) {
		st, err := c.memoryStore()
		if err != nil {
			return nil, err
		}
		mode := memory.Mode(in.Mode)
		if mode == "" {
			mode = memory.ModeReplace
		}
		if mode != memory.ModeDelete && in.Content == "" {
			return nil, &InputError{Tool: "memory_update", Field: "content", Msg: "is required to " + string(mode)}
		}
		e, err := st.Update(ctx, in.Key, in.Content, in.Tags, mode)
		if err != nil {
			return nil, err
		}
		if mode == memory.ModeDelete {
			return textf("deleted %s", in.Key), nil
		}
		return textf("saved %s (%d characters)", e.Key, len(e.Content)), nil
	})
