package mcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// ServerName is how the server introduces itself to clients.
const ServerName = "nsys-cortex"

// NewServer returns an MCP server offering kit's tools (those its policy
// does not deny outright), with their schemas and annotations.
func NewServer(kit *tools.Kit, version string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: ServerName, Title: "Nsys Cortex neuron tools", Version: version}, &sdk.ServerOptions{
		Instructions: fmt.Sprintf("Tools acting inside one isolated Linux environment (a neuron), under the %q policy. Paths are relative to the neuron's workdir unless absolute.", kit.Policy().Name),
	})
	for _, t := range kit.Tools() {
		s.AddTool(describe(t), handler(kit, t.Name))
	}
	return s
}

// describe turns a kit tool into its MCP description.
func describe(t *tools.Tool) *sdk.Tool {
	destructive := t.Annotations.Destructive
	open := t.Annotations.OpenWorld
	return &sdk.Tool{
		Name:        t.Name,
		Description: t.Description,
		InputSchema: t.Schema,
		Annotations: &sdk.ToolAnnotations{
			ReadOnlyHint:    t.Annotations.ReadOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  t.Annotations.Idempotent,
			OpenWorldHint:   &open,
		},
	}
}

// handler runs one tool through the kit. Tool failures are results with
// isError set (the model reads them); only a broken request is a protocol
// error.
//
// A call the policy marks "ask" is put to the client's user with MCP's
// multi round-trip requests: the first call answers with an elicitation
// to fulfil, and the client calls again with the answer and the request
// state, which binds the answer to this exact call (tool and input).
func handler(kit *tools.Kit, name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var args json.RawMessage
		var answer *sdk.ElicitResult
		var state string
		if req.Params != nil {
			args = req.Params.Arguments
			state = req.Params.RequestState
			answer, _ = req.Params.InputResponses[approvalID].(*sdk.ElicitResult)
		}
		want := requestState(name, args)
		var asked *policy.Decision
		if req.Session != nil && canElicit(req.Session) {
			ctx = tools.ContextWithApprover(ctx, func(_ context.Context, _ *tools.Tool, _ json.RawMessage, d policy.Decision) (bool, error) {
				if answer != nil && state == want {
					ok, _ := answer.Content["approve"].(bool)
					return answer.Action == "accept" && ok, nil
				}
				asked = &d
				return false, errPending
			})
		}
		r := kit.Call(ctx, name, args)
		if asked != nil {
			return &sdk.CallToolResult{
				InputRequests: sdk.InputRequestMap{approvalID: approvalRequest(name, *asked)},
				RequestState:  want,
			}, nil
		}
		out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: r.Text}}, IsError: r.IsError}
		if r.Decision != nil { // its subject is redacted by the kit
			out.Meta = sdk.Meta{"nsys-cortex/decision": r.Decision}
		}
		return out, nil
	}
}

// approvalID names the one input request an "ask" makes.
const approvalID = "approve"

// errPending stops a call whose approval is being asked for.
var errPending = errors.New("waiting for the user's approval")

// stateKey keys the request states of this process, so a client cannot
// compute one and answer an "ask" without asking its user.
var stateKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("mcp: no randomness for the approval key: " + err.Error()) // crypto/rand never fails on Linux
	}
	return k
}()

// requestState binds an approval to one call: the tool and its input,
// under a key only this server knows.
func requestState(name string, args json.RawMessage) string {
	h := hmac.New(sha256.New, stateKey)
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(args)
	return "approve:" + hex.EncodeToString(h.Sum(nil))
}

func canElicit(ss *sdk.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// approvalRequest asks the client's user about an "ask" decision.
func approvalRequest(tool string, d policy.Decision) *sdk.ElicitParams {
	msg := fmt.Sprintf("Allow %s? The policy asks first: %s", tool, d.Rule)
	if d.Subject != "" {
		msg += fmt.Sprintf(" (matched %q)", d.Subject)
	}
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	return &sdk.ElicitParams{
		Message: msg,
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"approve": map[string]any{"type": "boolean", "description": "run this call"}},
			"required":   []string{"approve"},
		},
	}
}

// ServeStdio serves kit on stdin/stdout until the client disconnects or ctx
// ends.
func ServeStdio(ctx context.Context, kit *tools.Kit, version string) error {
	return NewServer(kit, version).Run(ctx, &sdk.StdioTransport{})
}

// HTTPHandler serves kit over MCP's streamable HTTP transport.
func HTTPHandler(kit *tools.Kit, version string) http.Handler {
	s := NewServer(kit, version)
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
}

// Protect requires "Authorization: Bearer token" on every request when
// token is set.
func Protect(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nsys-cortex mcp"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
