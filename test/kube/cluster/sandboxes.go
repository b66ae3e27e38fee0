package cluster

import (
	"context"
	"path/filepath"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
)

// Sandboxes is an nsbox manager, its home in dir (short: its sockets'
// paths are bound), whose neurons run agentBin: where a kubelet's pods
// run their agents (kubesim.InSandboxes), each a real cortex-agent behind
// a boundary, as a container's is. Where nsbox cannot run on this
// machine it is nil, with why. t closes it: make it before the Kubelet,
// whose cleanup (the pods' neurons stopped and wiped) must come first.
func Sandboxes(t T, dir, agentBin string) (sandbox.Manager, string) {
	t.Helper()
	lay, err := layout.New(filepath.Join(dir, "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	env := sandbox.Env{AgentBinary: func() (string, error) { return agentBin, nil }, Layout: lay}
	if c := nsbox.SelfCheck(context.Background(), env); !c.OK {
		return nil, "nsbox cannot run here: " + c.Summary
	}
	m := nsbox.New(env)
	t.Cleanup(func() { m.Close() })
	return m, ""
}
