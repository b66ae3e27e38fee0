package kube_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// E2B's official JavaScript SDK drives kube neurons through serve --e2b
// in kube mode, on the real API server: testdata/e2b.cjs makes the calls
// of a typical agent program (create with metadata and envs, commands
// streamed, stdin, background commands re-attached and killed, a PTY,
// files text and binary, list by metadata, timeout, info, kill).
// NSYS_CORTEX_TEST_E2B_SDK names the node_modules directory with npm's
// e2b (.ci/run installs it); where it is unset the test skips, unless
// NSYS_CORTEX_REQUIRE_E2B=1 (CI).
func TestE2B(t *testing.T) {
	sdk := os.Getenv("NSYS_CORTEX_TEST_E2B_SDK")
	node, err := exec.LookPath("node")
	if sdk == "" || err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_E2B") == "1" {
			t.Fatalf("E2B's SDK is required here: NSYS_CORTEX_TEST_E2B_SDK=%q, node: %v", sdk, err)
		}
		t.Skip("no E2B SDK: set NSYS_CORTEX_TEST_E2B_SDK to a node_modules directory with npm's e2b")
	}
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, cluster.Agents(rc), cfg) })
	bin := buildCLI(t)
	r := newReplica(t, bin, serveEnv(t, rc, cfg, "0123456789abcdef0123456789abcdef"), "--e2b")
	cmd := exec.Command(bin, "token", "create", "--e2b", "sdk")
	cmd.Env = r.env // the replica's home: its key store
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key := lines[len(lines)-1]
	if err != nil || !strings.HasPrefix(key, "e2b_") {
		t.Fatalf("token create --e2b: %v, last line %q", err, key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := "http://" + r.addr
	js := exec.CommandContext(ctx, node, "testdata/e2b.cjs")
	js.Env = append(os.Environ(), "NODE_PATH="+sdk, "E2B_API_KEY="+key, "E2B_API_URL="+url+"/e2b", "E2B_SANDBOX_URL="+url+"/e2b/sandbox")
	got, err := js.CombinedOutput()
	t.Logf("the SDK's program (kube mode):\n%s", got)
	if err != nil {
		t.Fatalf("E2B's SDK against serve --e2b in kube mode: %v", err)
	}
}
