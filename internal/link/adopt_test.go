//go:build linux

package link_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// newWarmPair is newPair's agent started with no neuron id, as a warm pod
// of kube mode's pool is, and a host that takes whichever it serves.
func newWarmPair(t *testing.T) *pair {
	t.Helper()
	return newPairFor(t, "", func(c *agent.Config) { c.ID = "" })
}

// adopt hands a warm agent its neuron and environment once: its commands
// see both from then on (a request's own variables still win), a retry
// of the same adopt is done, and anything else is refused with nothing
// changed: another id, another environment, bad ids and entries, and an
// agent that was started as a neuron's.
func TestAdopt(t *testing.T) {
	p := newWarmPair(t)
	ctx := context.Background()
	env := func(extra ...string) string {
		t.Helper()
		res, err := p.client.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: `echo "[$NSYS_CORTEX_NEURON] [$FOO] [$BAR]"`, Env: extra}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	if got := env(); got != "[] [] []" {
		t.Fatalf("before the adopt: %s", got)
	}
	for _, bad := range []struct {
		id  string
		env []string
	}{
		{"../x", nil}, {"", nil}, {"ok", []string{"NOKEY"}}, {"ok", []string{"=v"}}, {"ok", []string{"A=b\x00c"}},
		{"ok", make([]string, 5000)},
	} {
		if err := p.client.Adopt(ctx, bad.id, bad.env); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Errorf("adopt %q %.40q: %v", bad.id, bad.env, err)
		}
	}
	if got := env(); got != "[] [] []" {
		t.Fatalf("after refused adopts: %s", got)
	}
	if err := p.client.Adopt(ctx, "web-1", []string{"FOO=bar", "BAR=1"}); err != nil {
		t.Fatal(err)
	}
	if got := env(); got != "[web-1] [bar] [1]" {
		t.Errorf("adopted: %s", got)
	}
	if got := env("FOO=own"); got != "[web-1] [own] [1]" {
		t.Errorf("a request's own variable: %s", got)
	}
	if err := p.client.Adopt(ctx, "web-1", []string{"FOO=bar", "BAR=1"}); err != nil {
		t.Errorf("the same adopt again: %v", err)
	}
	if err := p.client.Adopt(ctx, "web-2", nil); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("another neuron: %v", err)
	}
	if err := p.client.Adopt(ctx, "web-1", []string{"FOO=other"}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("another environment: %v", err)
	}
	if got := env(); got != "[web-1] [bar] [1]" {
		t.Errorf("after refused adopts: %s", got)
	}
	// A host that connects now is greeted by the neuron's id.
	l2, err := link.Listen(filepath.Join(p.chdir, "h2.sock"), link.Options{Neuron: "web-1", Software: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l2.WaitConnected(wctx); err != nil {
		t.Errorf("a host that expects web-1: %v", err)
	}

	started := newPair(t) // started as t1's
	if err := started.client.Adopt(ctx, "web-1", nil); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Errorf("an agent started as a neuron's: %v", err)
	}
}
