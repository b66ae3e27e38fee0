// Command mcptest is a separate MCP process for the tests: "client" runs
// the official SDK's client against a server command over stdio and prints
// a JSON report; "server" is an external MCP server with tools that report
// what they were given (its environment, its arguments).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type call struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type toolInfo struct {
	Name        string               `json:"name"`
	Annotations *mcp.ToolAnnotations `json:"annotations"`
	Schema      any                  `json:"schema"`
}

type result struct {
	Name    string `json:"name"`
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
}

type report struct {
	Server  string     `json:"server"`
	Tools   []toolInfo `json:"tools"`
	Results []result   `json:"results"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mcptest client CALLS.json -- COMMAND ARGS... | mcptest server")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "client":
		err = client(os.Args[2], os.Args[4:])
	case "server":
		err = server()
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
}

func client(callsFile string, argv []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls []call
	data, err := os.ReadFile(callsFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &calls); err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	var r report
	if init := s.InitializeResult(); init != nil && init.ServerInfo != nil {
		r.Server = init.ServerInfo.Name
	}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		r.Tools = append(r.Tools, toolInfo{Name: t.Name, Annotations: t.Annotations, Schema: t.InputSchema})
	}
	for _, cl := range calls {
		var args any = map[string]any{}
		if len(cl.Args) > 0 {
			args = cl.Args
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: cl.Name, Arguments: args})
		if err != nil {
			return fmt.Errorf("call %s: %w", cl.Name, err)
		}
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		r.Results = append(r.Results, result{Name: cl.Name, IsError: res.IsError, Text: strings.Join(text, "\n")})
	}
	return json.NewEncoder(os.Stdout).Encode(&r)
}

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type envIn struct{}

func server() error {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest-server", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo text back.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "List the names of this server's environment variables."},
		func(context.Context, *mcp.CallToolRequest, envIn) (*mcp.CallToolResult, any, error) {
			var names []string
			for _, kv := range os.Environ() {
				k, _, _ := strings.Cut(kv, "=")
				names = append(names, k)
			}
			sort.Strings(names)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(names, " ")}}}, nil, nil
		})
	// Let tests see when the server started: it writes a marker file.
	if p := os.Getenv("MCPTEST_MARK"); p != "" {
		if err := os.WriteFile(p, []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
			return err
		}
	}
	return s.Run(context.Background(), &mcp.StdioTransport{})
}
