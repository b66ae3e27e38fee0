package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nsys-cortex/cortex/internal/mcp"
	"github.com/nsys-cortex/cortex/internal/policy"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

// mcptest is the separate MCP program (testdata/mcptest): an external
// server for Attach.
var mcptest string

func TestMain(m *testing.M) {
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	dir, err := os.MkdirTemp("", "mcptest")
	if err != nil {
		panic(err)
	}
	mcptest = filepath.Join(dir, "mcptest")
	if out, err := exec.Command("go", "build", "-o", mcptest, "./testdata/mcptest").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mcptest: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// connect serves kit in memory and returns a client session on it.
func connect(t *testing.T, kit *tools.Kit, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := mcp.NewServer(kit, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *sdk.ClientSession, name string, args any) (string, bool) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.(*sdk.TextContent).Text)
	}
	return b.String(), r.IsError
}

func TestRoundTripInMemory(t *testing.T) {
	e := toolstest.New(t, "standard")
	cs := connect(t, e.Kit, nil)
	byName := map[string]*sdk.Tool{}
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		byName[tl.Name] = tl
	}
	for _, want := range []string{"read", "write", "edit", "apply_patch", "bash", "process", "grep", "find", "ls", "neuron", "snapshot", "memory_search"} {
		if byName[want] == nil {
			t.Errorf("tool %s not offered", want)
		}
	}
	if byName["elevated"] != nil {
		t.Error("standard offers elevated, which it never grants")
	}
	if a := byName["read"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("read annotations: %+v", a)
	}
	if a := byName["bash"].Annotations; a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("bash annotations: %+v", a)
	}
	if text, isErr := callText(t, cs, "write", map[string]any{"path": "m.txt", "content": "via mcp\n"}); isErr {
		t.Fatal(text)
	}
	if text, _ := callText(t, cs, "read", map[string]any{"path": "m.txt"}); !strings.Contains(text, "via mcp") {
		t.Fatalf("read: %s", text)
	}
	if text, isErr := callText(t, cs, "bash", map[string]any{"command": "rm -rf /"}); !isErr || !strings.Contains(text, "denied by policy") {
		t.Fatalf("policy not applied over MCP: %v %s", isErr, text)
	}
	if text, isErr := callText(t, cs, "read", map[string]any{"offset": 3}); !isErr || !strings.Contains(text, `"path" is required`) {
		t.Fatalf("validation over MCP: %v %s", isErr, text)
	}
	if f := e.Audit.Last("tool.decision"); f == nil || f["tool"] != "bash" || f["effect"] != "deny" {
		t.Fatalf("no audit fact: %v", f)
	}
}

func TestAskUsesElicitation(t *testing.T) {
	e := toolstest.New(t, "standard")
	var asked []string
	approve := true
	cs := connect(t, e.Kit, &sdk.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": approve}}, nil
		},
	})
	if text, isErr := callText(t, cs, "bash", map[string]any{"command": "sudo -n true 2>/dev/null; echo asked"}); isErr || !strings.Contains(text, "asked") {
		t.Fatalf("approved call: %v %s", isErr, text)
	}
	approve = false
	if text, isErr := callText(t, cs, "bash", map[string]any{"command": "sudo -n true"}); !isErr || !strings.Contains(text, "not approved") {
		t.Fatalf("refused call: %v %s", isErr, text)
	}
	if len(asked) != 2 || !strings.Contains(asked[0], "sudo") {
		t.Fatalf("elicitations: %q", asked)
	}
	if f := e.Audit.Last("tool.approval"); f == nil || f["approved"] != false {
		t.Fatalf("approval audit: %v", f)
	}
}

func TestStreamableHTTP(t *testing.T) {
	e := toolstest.New(t, "readonly")
	ts := httptest.NewServer(mcp.Protect(mcp.HTTPHandler(e.Kit, "test"), "tok-123"))
	defer ts.Close()
	// Without the token: refused.
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	hc := &http.Client{Transport: bearer{"tok-123"}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	e.Put("h.txt", "over http\n")
	if text, isErr := callText(t, cs, "read", map[string]any{"path": "h.txt"}); isErr || !strings.Contains(text, "over http") {
		t.Fatalf("read over http: %v %s", isErr, text)
	}
	if text, isErr := callText(t, cs, "bash", map[string]any{"command": "touch x"}); !isErr || !strings.Contains(text, "denied") {
		t.Fatalf("readonly over http: %v %s", isErr, text)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestAttachExternalServer(t *testing.T) {
	trusted, err := policy.Preset("trusted")
	if err != nil {
		t.Fatal(err)
	}
	e := toolstest.New(t, "trusted")
	cache := t.TempDir()
	mark := filepath.Join(t.TempDir(), "started")
	t.Setenv("MCPTEST_PASSED", "named-value")
	t.Setenv("MCPTEST_NOT_PASSED", "operator-secret")
	cfg := mcp.ServerConfig{Command: mcptest, Args: []string{"server"}, Env: []string{"MCPTEST_PASSED"},
		SetEnv: map[string]string{"MCPTEST_MARK": mark}}
	ctx := context.Background()
	// The first attach starts the server to learn its tools, and caches them.
	att, err := mcp.Attach(ctx, e.Kit, "ext", cfg, cache)
	if err != nil {
		t.Fatal(err)
	}
	att.Close()
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("first attach did not start the server: %v", err)
	}
	os.Remove(mark)

	// A later attach starts nothing until a tool is called.
	kit, err := tools.New(tools.NewSetNeuron(e.Set, e.Layout, e.State.ID), tools.WithPolicy(trusted), tools.WithAudit(e.Audit))
	if err != nil {
		t.Fatal(err)
	}
	att, err = mcp.Attach(ctx, kit, "ext", cfg, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if _, err := os.Stat(mark); err == nil || att.Started() {
		t.Fatal("attach started the server before any call")
	}
	cs := connect(t, kit, nil)
	if text, isErr := callText(t, cs, "mcp__ext__echo", map[string]any{"text": "hi"}); isErr || text != "echo: hi" {
		t.Fatalf("echo: %v %q", isErr, text)
	}
	if !att.Started() {
		t.Fatal("no start on the first call")
	}
	text, _ := callText(t, cs, "mcp__ext__env", map[string]any{})
	names := strings.Fields(text)
	for _, n := range names {
		switch n {
		case "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "MCPTEST_PASSED", "MCPTEST_MARK":
		default:
			t.Errorf("the server got %s from the operator's environment", n)
		}
	}
	if !strings.Contains(text, "MCPTEST_PASSED") {
		t.Errorf("the named variable did not reach the server: %s", text)
	}
	// Bad input is caught before the server sees it.
	if text, isErr := callText(t, cs, "mcp__ext__echo", map[string]any{"text": 5, "extra": true}); !isErr || !strings.Contains(text, "extra") {
		t.Fatalf("validation of external tools: %v %s", isErr, text)
	}
	// Standard asks before external tools run; with no one to ask, that is a denial.
	std := toolstest.New(t, "standard")
	if _, err := mcp.Attach(ctx, std.Kit, "ext", cfg, cache); err != nil {
		t.Fatal(err)
	}
	r := std.Kit.Call(ctx, "mcp__ext__echo", json.RawMessage(`{"text":"x"}`))
	if !r.IsError || !strings.Contains(r.Text, "needs approval") {
		t.Fatalf("standard on mcp tools: %+v", r)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{`{"servers":{"a b":{"command":"x"}}}`, `server name "a b"`},
		{`{"servers":{"a__b":{"command":"x"}}}`, `server name "a__b"`},
		{`{"servers":{"a":{}}}`, "command is empty"},
		{`{"servers":{"a":{"command":"x","env":["A=B"]}}}`, "not a variable name"},
		{`{"servers":{"a":{"command":"x","bogus":1}}}`, "unknown field"},
	} {
		p := filepath.Join(dir, "mcp.json")
		os.WriteFile(p, []byte(tc.body), 0o600)
		if _, err := mcp.LoadConfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
	if c, err := mcp.LoadConfig(filepath.Join(dir, "none.json")); err != nil || len(c.Servers) != 0 {
		t.Fatalf("missing file: %v %v", c, err)
	}
}
