package link_test

import (
	"context"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

func TestSmoke(t *testing.T) {
	p := newPair(t)
	ctx := context.Background()
	res, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo hi; echo err >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v out=%q err=%q", res.ExecResult, res.Stdout, res.Stderr)
	if err := p.client.WriteFile(ctx, "a/b.txt", []byte("hello"), &link.WriteOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	b, err := p.client.ReadFile(ctx, "a/b.txt")
	t.Logf("%q %v", b, err)
}
