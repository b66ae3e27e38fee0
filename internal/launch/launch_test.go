package launch

import (
	"slices"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// TestPlanSecretsStayProxied: a neuron's secrets (create --secret) are
// named in the contract as proxied, and --pass-env of one of them, which
// would put its value inside, is refused.
func TestPlanSecretsStayProxied(t *testing.T) {
	st := &sandbox.State{ID: "n1", Mode: "nsbox", Policy: &sandbox.Policy{
		Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"api.anthropic.com:443"}},
		Secrets: []sandbox.SecretPolicy{{Name: "ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}}}}}
	lookup := func(name string) (string, bool) { return "sk-ant-the-value-itself", true }
	p := &Profile{Name: "generic", IO: IOStdio}
	c, err := Plan(&Request{Profile: p, Argv: []string{"claude", "-p", "hi"}, Lookup: lookup}, st)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Proxied, []string{"ANTHROPIC_API_KEY"}) || len(c.Passed) != 0 {
		t.Errorf("proxied %v, passed %v", c.Proxied, c.Passed)
	}
	for _, kv := range c.Env {
		if strings.Contains(kv, "the-value-itself") {
			t.Errorf("the contract's environment holds the value: %q", kv)
		}
	}
	_, err = Plan(&Request{Profile: p, Argv: []string{"claude"}, PassEnv: []string{"ANTHROPIC_API_KEY"}, Lookup: lookup}, st)
	if err == nil || !strings.Contains(err.Error(), "is a secret of neuron n1") {
		t.Errorf("--pass-env of the neuron's secret: %v", err)
	}
}

// Receipts stay on the host, outside what the neuron's commands work
// in: in the overlay where the neuron's files are the host's, else (a
// process-mode neuron, or a kube neuron whose files are in the cluster
// and whose state names no overlay) in the home's receipts/<id>/, never
// a path relative to the current directory.
func TestReceiptsDir(t *testing.T) {
	lay := layout.Layout{Home: "/h"}
	for _, c := range []struct {
		st   *sandbox.State
		want string
	}{
		{&sandbox.State{ID: "a", Mode: "nsbox", OverlayPath: "/h/overlays/a"}, "/h/overlays/a/receipts"},
		{&sandbox.State{ID: "a", Mode: "process", OverlayPath: "/h/overlays/a"}, "/h/receipts/a"},
		{&sandbox.State{ID: "a", Mode: "kube"}, "/h/receipts/a"},
	} {
		if got := ReceiptsDir(lay, c.st); got != c.want {
			t.Errorf("%s: %s, want %s", c.st.Mode, got, c.want)
		}
	}
}
