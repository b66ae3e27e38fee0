package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/google/jsonschema-go/jsonschema"
)

// toolName is what a tool may be called (MCP's rule, and safe in audit logs).
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// External returns a tool defined outside the kit (an attached MCP
// server's): its input is coerced and checked against schema, the policy
// judges it by name and group like any other, and run does the work.
func External(name, desc string, group Group, ann Annotations, schema *jsonschema.Schema,
	run func(ctx context.Context, input json.RawMessage) (*Result, error)) (*Tool, error) {
	if !toolName.MatchString(name) {
		return nil, fmt.Errorf("tool name %q: use 1-128 letters, digits, '_', '-', '.'", name)
	}
	if schema == nil {
		schema = &jsonschema.Schema{Type: "object"}
	}
	if schema.Type == "" && len(schema.Types) == 0 {
		schema.Type = "object"
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: its input schema does not resolve: %w", name, err)
	}
	return &Tool{
		Name: name, Description: desc, Group: group, Annotations: ann, Schema: schema, resolved: resolved,
		decode:  func(data []byte) (any, error) { return json.RawMessage(data), nil },
		subject: func(any) *subject { return &subject{} },
		run: func(ctx context.Context, _ *call, in any) (*Result, error) {
			return run(ctx, in.(json.RawMessage))
		},
	}, nil
}
