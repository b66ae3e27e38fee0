package gate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/policy"
)

type facts []map[string]any

func (f *facts) Record(event string, m map[string]any) error { *f = append(*f, m); return nil }

func TestGate(t *testing.T) {
	lay, err := layout.New(filepath.Join(t.TempDir(), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(lay.OverlayDir("n1"), 0o700)
	var log facts
	g := &Gate{Audit: &log, Layout: lay}
	ctx := context.Background()
	op := Principal{Kind: Operator}
	self := Principal{Kind: Neuron, Name: "n1"}
	check := func(p Principal, a Action) policy.Effect {
		t.Helper()
		return g.Check(ctx, &Request{Principal: p, Neuron: "n1", Action: a}, nil).Effect
	}
	for _, a := range Actions() {
		if a == Tool {
			continue
		}
		if e := check(op, a); e != policy.Allow {
			t.Errorf("the operator's %s: %s", a, e)
		}
	}
	// No policy recorded: the standard preset governs the neuron.
	if e := check(self, SnapshotCreate); e != policy.Allow {
		t.Errorf("snapshot under standard: %s", e)
	}
	ro, _ := policy.Preset("readonly")
	if err := RecordPolicy(lay, "n1", ro); err != nil {
		t.Fatal(err)
	}
	for a, want := range map[Action]policy.Effect{SnapshotCreate: policy.Deny, Destroy: policy.Deny, Restart: policy.Deny,
		Read: policy.Allow, TerminalInput: policy.Deny, FileWrite: policy.Deny} {
		if e := check(self, a); e != want {
			t.Errorf("a readonly neuron's own %s: %s, want %s", a, e, want)
		}
	}
	if err := g.Allow(ctx, &Request{Principal: self, Neuron: "n1", Action: Destroy}, nil); err == nil {
		t.Error("Allow let a denied request through")
	} else if de, ok := err.(*DeniedError); !ok || de.Decision.Effect != policy.Deny {
		t.Errorf("Allow's error: %v", err)
	}
	// Default deny for what the gate does not know.
	if e := check(op, Action("teleport")); e != policy.Deny {
		t.Errorf("an unknown action: %s", e)
	}
	if e := check(Principal{Kind: "alien"}, Exec); e != policy.Deny {
		t.Errorf("an unknown principal: %s", e)
	}
	if e := check(Principal{Kind: Agent}, Exec); e != policy.Deny {
		t.Errorf("an agent without a policy: %s", e)
	}
	if e := g.Check(ctx, &Request{Principal: Principal{Kind: Agent}, Action: Tool}, ro).Effect; e != policy.Deny {
		t.Errorf("a tool call without its request: %s", e)
	}
	// Facts name the principal, the action and the neuron.
	last := log[len(log)-1]
	if last["principal"] != "agent" || last["action"] != "tool" || last["effect"] != "deny" {
		t.Errorf("last fact %v", last)
	}
	for _, f := range log {
		if f["principal"] == nil || f["action"] == nil || f["effect"] == nil {
			t.Errorf("fact %v lacks a field", f)
		}
	}
}

// A fact keeps at most clipShort bytes of a neuron id or a detail (ids
// come from request paths before they are checked), cut on a character
// boundary and saying how long the value was.
func TestFactsBounded(t *testing.T) {
	var log facts
	g := &Gate{Audit: &log}
	long := strings.Repeat("é", 100_000) // 200,000 bytes, two a character
	g.Check(context.Background(), &Request{Principal: Principal{Kind: APIClient, Name: "k"}, Neuron: "x" + long, Action: Destroy, Detail: long}, nil)
	if len(log) != 1 {
		t.Fatalf("%d facts", len(log))
	}
	for _, k := range []string{"neuron", "detail"} {
		v, _ := log[0][k].(string)
		if len(v) > clipShort+32 || !utf8.ValidString(v) || !strings.HasSuffix(v, "... (200001 bytes)") && !strings.HasSuffix(v, "... (200000 bytes)") {
			t.Errorf("%s: %d bytes, %q...", k, len(v), v[:min(len(v), 40)])
		}
	}
	if v := log[0]["principal"]; v != "api:k" {
		t.Errorf("a short value was changed: %q", v)
	}
}
