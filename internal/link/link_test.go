//go:build linux

package link_test

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
)

// pair is a host Link and an in-process agent serving it.
type pair struct {
	link   *link.Link
	client *link.Client
	root   string
	chdir  string
	agent  *agent.Agent
	stop   func()
}

func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cxl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// newPair starts an agent confined to a fresh root and connects a Link to it.
func newPair(t testing.TB, opts ...func(*agent.Config)) *pair {
	t.Helper()
	return newPairFor(t, "t1", opts...)
}

// newPairFor is newPair with a host that expects the agent of neuron
// (any, when "").
func newPairFor(t testing.TB, neuron string, opts ...func(*agent.Config)) *pair {
	t.Helper()
	base := shortTempDir(t)
	root := filepath.Join(base, "root")
	chdir := filepath.Join(base, "ch")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := link.Listen(filepath.Join(chdir, "h.sock"), link.Options{Neuron: neuron, Software: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{link: l, client: l.Client(), root: root, chdir: chdir}
	p.stop = newAgentOn(t, p, opts...)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if _, err := l.WaitConnected(wctx); err != nil {
		t.Fatalf("agent did not connect: %v", err)
	}
	t.Cleanup(func() { p.stop(); l.Close() })
	return p
}

// newAgentOn runs an agent for p's root and channel directory; the returned
// func stops it (and may be called more than once).
func newAgentOn(t testing.TB, p *pair, opts ...func(*agent.Config)) func() {
	t.Helper()
	cfg := agent.Config{ID: "t1", Root: p.root, ChannelDir: p.chdir, Version: "test", Logger: log.New(io.Discard, "", 0)}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	return func() { cancel(); <-done }
}
