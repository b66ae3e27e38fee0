package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nsys-cortex/cortex/internal/mcp"
	"github.com/nsys-cortex/cortex/internal/tools/toolstest"
)

// BenchmarkToolCall measures what MCP over stdio adds to a tool call: the
// same read of a small file, directly through the kit and through an MCP
// client and server joined by OS pipes (JSON-RPC framing, the SDK's
// dispatch, schema checks on both sides).
func BenchmarkToolCall(b *testing.B) {
	e := toolstest.New(b, "standard")
	e.Put("small.txt", "hello\nworld\n")
	args := map[string]any{"path": "small.txt"}
	raw, _ := json.Marshal(args)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if r := e.Kit.Call(ctx, "read", raw); r.IsError {
				b.Fatal(r.Text)
			}
		}
	})
	b.Run("stdio", func(b *testing.B) {
		c2sR, c2sW, _ := os.Pipe()
		s2cR, s2cW, _ := os.Pipe()
		ss, err := mcp.NewServer(e.Kit, "bench").Connect(ctx, &sdk.IOTransport{Reader: c2sR, Writer: s2cW}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer ss.Close()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		for b.Loop() {
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: args})
			if err != nil || r.IsError {
				b.Fatal(err, r)
			}
		}
	})
}
