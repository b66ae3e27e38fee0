package kube_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// boxedSandboxes is an nsbox manager for a Kubelet's pods
// (kubesim.InSandboxes): each pod's agent is a real cortex-agent process
// inside an nsbox neuron, so what these tests drive through kube mode is
// behind a boundary, as a container's agent is. Made before the Kubelet,
// its cleanup runs after the Kubelet's (which stops and wipes the pods'
// neurons). Where nsbox cannot run here, nil (the Kubelet then runs the
// agents in this process), unless NSYS_CORTEX_REQUIRE_NSBOX=1 (CI).
func boxedSandboxes(t testing.TB) (sandbox.Manager, string) {
	t.Helper()
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	m, why := cluster.Sandboxes(t, sandboxtest.ShortTempDir(t), bin)
	if m == nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
			t.Fatalf("for the pods' agents: %s", why)
		}
		t.Logf("the pods' agents run in this process: %s", why)
		return nil, ""
	}
	return m, bin
}

// boxedKubelet is the Kubelet start starts, its pods' agents inside
// nsbox neurons (boxedSandboxes) where nsbox runs.
func boxedKubelet(t *testing.T, start func() *kubesim.Kubelet) *kubesim.Kubelet {
	t.Helper()
	m, bin := boxedSandboxes(t)
	k := start()
	if m != nil {
		if err := k.InSandboxes(m, bin); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// The simulated kubelet's pods run their agents behind a boundary: a
// neuron's commands are in another mount namespace than the test's and
// run as nsbox's unprivileged agent user, not as the test's root.
func TestBoxedAgents(t *testing.T) {
	if m, _ := boxedSandboxes(t); m == nil {
		t.Skip("nsbox cannot run here")
	}
	core, ag, cfg := besideController(t)
	ctx := context.Background()
	m := manager(t, core, ag, cfg)
	if _, err := m.Create(ctx, "boxed", sandbox.CreateOptions{BootTimeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(ctx, "boxed")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: `id -u; readlink /proc/self/ns/mnt`}})
	if err != nil {
		t.Fatal(err)
	}
	ours, _ := os.Readlink("/proc/self/ns/mnt")
	lines := strings.Fields(string(res.Stdout))
	if len(lines) != 2 || lines[0] == "0" || lines[1] == ours {
		t.Errorf("the pod's command: uid and mount namespace %q, the test's namespace %s", lines, ours)
	}
}
