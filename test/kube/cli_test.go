package kube_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// buildCLI builds nsys-cortex (the full program: kube mode is its).
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nsys-cortex")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/nsys-cortex")
	cmd.Dir = "../.." // the main module: the program as users build it
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building nsys-cortex: %v\n%s", err, out)
	}
	return bin
}

// buildAgent builds cortex-agent, what a host runs its neurons' egress
// proxies with, and returns it as a Manager's AgentBinary.
func buildAgent(t *testing.T) func() (string, error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cortex-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cortex-agent")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cortex-agent: %v\n%s", err, out)
	}
	return func() (string, error) { return bin, nil }
}

// nsys-cortex, as a user runs it, against a real API server: kube.image
// and a kubeconfig set, create --mode kube, exec, list, destroy and
// create again on the kept home, destroy --wipe. The CLI makes its
// signing key and the trust ConfigMap itself; the simulated kubelet's
// pods trust what the ConfigMap holds, as real pods do.
func TestCLI(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, ag, cfg) })
	forwarded := cluster.ServePortForward(t, core)
	bin := buildCLI(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NSYS_CORTEX_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	env = append(env, "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h"), "NSYS_CORTEX_KUBE_IMAGE="+cfg.Image, "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true",
		"NSYS_CORTEX_KUBE_KUBECONFIG="+writeKubeconfig(t, rc))
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nsys-cortex %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// doctor, against the real admission chain: a neuron's pod is taken
	// as a dry run; a RuntimeClass the cluster lacks is named.
	doctor := func(extra ...string) string {
		cmd := exec.Command(bin, "doctor")
		cmd.Env = append(append([]string{}, env...), extra...)
		out, _ := cmd.CombinedOutput() // other modes may fail here
		return string(out)
	}
	if out := doctor(); !strings.Contains(out, "admission takes it") {
		t.Fatalf("doctor:\n%s", out)
	}
	if out := doctor("NSYS_CORTEX_KUBE_RUNTIME_CLASS=kata"); !strings.Contains(out, `RuntimeClass "kata" not found`) {
		t.Fatalf("doctor with a RuntimeClass the cluster lacks:\n%s", out)
	}
	run("create", "--mode", "kube", "job1")
	if out := run("exec", "job1", "--", "sh", "-c", "echo kept > f; echo hi"); out != "hi\n" {
		t.Fatalf("exec: %q", out)
	}
	if out := run("list"); !strings.Contains(out, "job1") || !strings.Contains(out, "kube") || !strings.Contains(out, "running") {
		t.Fatalf("list:\n%s", out)
	}
	run("destroy", "job1")
	if out := run("list"); !strings.Contains(out, "stopped") {
		t.Fatalf("list after destroy:\n%s", out)
	}
	run("create", "--mode", "kube", "job1")
	if out := run("exec", "job1", "--", "cat", "f"); out != "kept\n" {
		t.Fatalf("the home after destroy and create: %q", out)
	}
	run("destroy", "--wipe", "job1")
	// From outside the cluster: the channel over the API server's
	// port-forward, through the kubelet.
	if n := forwarded.Load(); n != 0 {
		t.Fatalf("%d connections forwarded before --kube-port-forward", n)
	}
	run("--kube-port-forward", "create", "--mode", "kube", "job2")
	if out := run("--kube-port-forward", "exec", "job2", "--", "echo", "forwarded"); out != "forwarded\n" {
		t.Fatalf("exec over port-forward: %q", out)
	}
	if n := forwarded.Load(); n < 2 {
		t.Fatalf("%d connections went through the kubelet's port-forward, want one for the create and one for the exec", n)
	}
	run("--kube-port-forward", "destroy", "--wipe", "job2")
	ctx := context.Background()
	if sbs, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).List(ctx, metav1.ListOptions{}); err != nil || len(sbs.Items) != 0 {
		t.Fatalf("after destroy --wipe: %v %v", sbs, err)
	}
	if pods, err := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("after destroy --wipe: pods %v %v", pods, err)
	}
}
