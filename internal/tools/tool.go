package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/policy"
)

// Group names a family of tools; the policy grants access by group.
type Group string

// Tool groups.
const (
	GroupFSRead   Group = "fs_read"  // read, grep, find, ls
	GroupFSWrite  Group = "fs_write" // write, edit, apply_patch
	GroupExec     Group = "exec"     // bash, process
	GroupElevated Group = "elevated" // elevated
	GroupNeuron   Group = "neuron"   // neuron
	GroupSnapshot Group = "snapshot" // snapshot
	GroupMemory   Group = "memory"   // memory_search, memory_get, memory_update
	GroupMCP      Group = "mcp"      // tools of attached MCP servers
	GroupSessions Group = "sessions" // sessions_spawn, sessions_send, sessions_history, sessions_list (the agent runtime)
)

// Groups lists the built-in groups in a stable order.
func Groups() []Group {
	return []Group{GroupFSRead, GroupFSWrite, GroupExec, GroupElevated, GroupNeuron, GroupSnapshot, GroupMemory, GroupMCP, GroupSessions}
}

// Annotations are hints for clients (MCP tool annotations).
type Annotations struct {
	ReadOnly    bool // does not change the neuron
	Destructive bool // may delete or overwrite what it did not create
	Idempotent  bool // calling twice with the same input changes nothing more
	OpenWorld   bool // reaches outside the neuron (attached MCP servers)
}

// Tool is one tool of the kit.
type Tool struct {
	Name        string
	Description string
	Group       Group
	Annotations Annotations
	// Schema is the JSON schema of the input (an object).
	Schema *jsonschema.Schema

	resolved *jsonschema.Resolved
	// subject turns a decoded input into what the policy judges (paths
	// still relative: the kit resolves them).
	subject func(in any) *subject
	// run executes the decoded input.
	run func(ctx context.Context, c *call, in any) (*Result, error)
	// decode turns coerced JSON into the tool's input value.
	decode func(data []byte) (any, error)
}

// subject is what one call asks the policy about.
type subject struct {
	Action  string
	Reads   []string // paths read
	Writes  []string // paths written
	Command string
	Dir     string // where Command starts ("": the workdir)
	// DirUnknown: Command runs where a running process is (text typed
	// into it), which only it knows.
	DirUnknown bool
	Elevated   bool
	Reason     string // an elevated call's justification
}

// Result is what a tool returns: text for a model, and whether it is an
// error the model should act on.
type Result struct {
	Text    string `json:"text"`
	IsError bool   `json:"isError,omitempty"`
	// Decision is the policy's verdict on the call.
	Decision *policy.Decision `json:"decision,omitempty"`
}

// text returns a successful result.
func text(s string) *Result { return &Result{Text: s} }

// textf returns a successful result, formatted.
func textf(format string, args ...any) *Result { return &Result{Text: fmt.Sprintf(format, args...)} }

// define builds a Tool whose input is In. tune adjusts the inferred schema
// (enums, bounds, descriptions); subj extracts the policy subject.
func define[In any](name string, group Group, ann Annotations, desc string,
	tune func(s *jsonschema.Schema), subj func(in *In) *subject,
	run func(ctx context.Context, c *call, in *In) (*Result, error)) *Tool {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: schema of %s: %v", name, err)) // a programming error, caught by every test
	}
	s.Type = "object"
	if tune != nil {
		tune(s)
	}
	t := &Tool{Name: name, Description: desc, Group: group, Annotations: ann, Schema: s}
	t.decode = func(data []byte) (any, error) {
		in := new(In)
		if err := json.Unmarshal(data, in); err != nil {
			return nil, err
		}
		return in, nil
	}
	t.subject = func(in any) *subject {
		if subj == nil {
			return &subject{}
		}
		return subj(in.(*In))
	}
	t.run = func(ctx context.Context, c *call, in any) (*Result, error) { return run(ctx, c, in.(*In)) }
	if t.resolved, err = s.Resolve(nil); err != nil {
		panic(fmt.Sprintf("tools: schema of %s does not resolve: %v", name, err))
	}
	return t
}

// prop returns the schema of property name, for tune functions.
func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p, ok := s.Properties[name]
	if !ok {
		panic("tools: no property " + name)
	}
	return p
}

// enum restricts a string property to values.
func enum(s *jsonschema.Schema, name string, values ...string) {
	p := prop(s, name)
	for _, v := range values {
		p.Enum = append(p.Enum, v)
	}
}

// bounds sets an integer property's minimum and maximum.
func bounds(s *jsonschema.Schema, name string, lo, hi float64) {
	p := prop(s, name)
	p.Minimum, p.Maximum = &lo, &hi
}
