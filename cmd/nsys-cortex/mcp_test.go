package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPOverStdioWithARealClient runs the official SDK's client in its own
// process (internal/mcp/testdata/mcptest) against nsys-cortex mcp.
func TestMCPOverStdioWithARealClient(t *testing.T) {
	client := filepath.Join(t.TempDir(), "mcptest")
	if out, err := exec.Command("go", "build", "-o", client, "github.com/nsys-cortex/cortex/internal/mcp/testdata/mcptest").CombinedOutput(); err != nil {
		t.Fatalf("building the MCP client: %v\n%s", err, out)
	}
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "mcp1")
		calls := filepath.Join(t.TempDir(), "calls.json")
		os.WriteFile(calls, []byte(`[
			{"name":"write","args":{"path":"hello.txt","content":"from an MCP client\n"}},
			{"name":"bash","args":{"command":"cat hello.txt; id -u"}},
			{"name":"grep","args":{"pattern":"MCP"}},
			{"name":"bash","args":{"command":"sh -c 'rm -rf /'"}},
			{"name":"edit","args":{"path":"hello.txt"}}
		]`), 0o600)
		cmd := exec.Command(client, "client", calls, "--", filepath.Join(binDir, "nsys-cortex"), "mcp", "--neuron", "mcp1")
		cmd.Env = c.env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mcp client: %v\n%s", err, stderr.String())
		}
		var r struct {
			Server  string
			Tools   []struct{ Name string }
			Results []struct {
				Name    string
				IsError bool
				Text    string
			}
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if r.Server != "nsys-cortex" || len(r.Tools) < 12 {
			t.Fatalf("server %q offers %d tools", r.Server, len(r.Tools))
		}
		res := r.Results
		if res[0].IsError || res[1].IsError || !strings.Contains(res[1].Text, "from an MCP client") {
			t.Fatalf("write/bash: %+v", res[:2])
		}
		if !strings.Contains(res[2].Text, "hello.txt:1:from an MCP client") {
			t.Fatalf("grep: %+v", res[2])
		}
		if !res[3].IsError || !strings.Contains(res[3].Text, "denied by policy") {
			t.Fatalf("policy: %+v", res[3])
		}
		if !res[4].IsError || !strings.Contains(res[4].Text, "old_string") && !strings.Contains(res[4].Text, "empty") {
			t.Fatalf("bad edit input: %+v", res[4])
		}
		// The decisions are in the audit log.
		audit, err := os.ReadFile(filepath.Join(c.home, "logs", "audit.log"))
		if err != nil || !strings.Contains(string(audit), `"event":"tool.decision"`) || !strings.Contains(string(audit), `"effect":"deny"`) {
			t.Fatalf("audit log: %v\n%s", err, audit)
		}
	})
}

func TestPolicyExplain(t *testing.T) {
	c := newCLI(t, "process")
	out, _, code := c.run("", "policy", "explain", "--tool", "bash", "--input", `{"command":"echo ok && sudo rm -rf /"}`)
	if code != 1 || !strings.Contains(out, "deny") || !strings.Contains(out, "rm -rf /") {
		t.Fatalf("explain (exit %d):\n%s", code, out)
	}
	out, _, code = c.run("", "policy", "explain", "--policy", "readonly", "--tool", "read", "--input", `{"path":"src/main.go"}`)
	if code != 0 || !strings.Contains(out, "allow") {
		t.Fatalf("explain readonly read (exit %d):\n%s", code, out)
	}
	_, errOut, code := c.run("", "policy", "explain", "--tool", "read", "--input", `{"offset":1}`)
	if code == 0 || !strings.Contains(errOut, `"path" is required`) {
		t.Fatalf("explain bad input (exit %d): %s", code, errOut)
	}
	out = c.ok("tools", "list", "--policy", "readonly")
	if !strings.Contains(out, "read") || strings.Contains(out, "apply_patch") {
		t.Fatalf("tools list readonly:\n%s", out)
	}
}
