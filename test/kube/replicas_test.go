package kube_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// replica is one `nsys-cortex serve` in kube mode, as deploy/kubernetes
// runs it: its own home, the shared API token and signing key.
type replica struct {
	t    *testing.T
	bin  string
	env  []string
	addr string
	args []string // serve's flags beyond --listen
	cmd  *exec.Cmd
	done chan error
	out  []*strings.Builder // each start's output, read once it has ended
	up   bool
}

func (r *replica) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, append([]string{"serve", "--listen", r.addr}, r.args...)...)
	r.cmd.Env = r.env
	out := &strings.Builder{}
	r.out = append(r.out, out)
	r.cmd.Stdout, r.cmd.Stderr = out, out
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.up, r.done = true, make(chan error, 1)
	go func(c *exec.Cmd) { r.done <- c.Wait() }(r.cmd)
	waittest.For(r.t, 30*time.Second, "serve on "+r.addr+" healthy", func() bool {
		res, err := http.Get("http://" + r.addr + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	})
}

func (r *replica) stop() {
	r.t.Helper()
	r.up = false
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
		r.t.Fatalf("serve on %s did not stop within 30 s of SIGTERM", r.addr)
	}
}

// serveEnv is the environment of a `serve` in kube mode on the cluster rc
// reaches, with API token token: every replica started with it shares
// the signing key (made by the first).
func serveEnv(t *testing.T, rc *rest.Config, cfg kube.Config, token string) []string {
	kc, keyDir := writeKubeconfig(t, rc), t.TempDir()
	return []string{"PATH=" + os.Getenv("PATH"), "NSYS_CORTEX_MODE=kube", "NSYS_CORTEX_KUBE_IMAGE=" + cfg.Image,
		"NSYS_CORTEX_KUBE_NAMESPACE=" + cfg.Namespace, "NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK=true", // kubesim's pods are on loopback
		"NSYS_CORTEX_KUBE_KUBECONFIG=" + kc, "NSYS_CORTEX_KUBE_SIGNING_KEY=" + filepath.Join(keyDir, "signing.key"),
		"NSYS_CORTEX_KUBE_API_KEYS=nsys-cortex-api-keys", "NSYS_CORTEX_API_TOKEN=" + token}
}

// newReplica starts `serve` (binary bin, with flags args) with base and
// a home of its own, on a free loopback port; it is stopped at the
// test's end, and what it said is logged if the test failed.
func newReplica(t *testing.T, bin string, base []string, args ...string) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	env := append(append([]string{}, base...), "HOME="+t.TempDir(), "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h"))
	r := &replica{t: t, bin: bin, env: env, addr: addr, args: args}
	r.start()
	t.Cleanup(func() {
		if r.up {
			r.stop()
		}
		if t.Failed() {
			for _, out := range r.out {
				t.Logf("serve on %s said:\n%s", r.addr, out)
			}
		}
	})
	return r
}

// Two serve replicas, as behind one Service, with nothing in common but
// the cluster, the API token and the signing key: a neuron created
// through one is listed and driven through the other, and a replica
// restarted (a new process; its home kept or not) drives it on.
func TestReplicas(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, cluster.Agents(rc), cfg) })
	bin := buildCLI(t)
	const token = "0123456789abcdef0123456789abcdef"
	base := serveEnv(t, rc, cfg, token)
	replicas := []*replica{newReplica(t, bin, base), newReplica(t, bin, base)} // the first makes the signing key, the second reads it
	// The CLI as a client of replica i, with bearer token tok.
	as := func(tok string, i int, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NSYS_CORTEX_HOME=" + filepath.Join(t.TempDir(), "c"),
			"NSYS_CORTEX_API_URL=http://" + replicas[i].addr, "NSYS_CORTEX_API_TOKEN=" + tok}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	via := func(i int, args ...string) string {
		t.Helper()
		out, err := as(token, i, args...)
		if err != nil {
			t.Fatalf("nsys-cortex %s through replica %d: %v\n%s", strings.Join(args, " "), i, err, out)
		}
		return out
	}
	// The CLI run inside replica i's pod (kubectl exec): its home, its
	// settings; what it writes to stdout.
	in := func(i int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = replicas[i].env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("nsys-cortex %s in replica %d: %v\n%s%s", strings.Join(args, " "), i, err, out, stderr.String())
		}
		return string(out)
	}
	via(0, "create", "--mode", "kube", "shared")
	via(0, "exec", "shared", "--", "sh", "-c", "echo from-0 > f")
	if out := via(1, "list"); !strings.Contains(out, "shared") || !strings.Contains(out, "running") {
		t.Fatalf("the other replica's list:\n%s", out)
	}
	if out := via(1, "exec", "shared", "--", "cat", "f"); out != "from-0\n" {
		t.Fatalf("exec through the other replica: %q", out)
	}
	// Replica 0 goes and comes back: nothing of the neuron was its own.
	replicas[0].stop()
	if out := via(1, "exec", "shared", "--", "sh", "-c", "echo from-1 >> f; cat f"); out != "from-0\nfrom-1\n" {
		t.Fatalf("exec with replica 0 gone: %q", out)
	}
	replicas[0].start()
	if out := via(0, "exec", "shared", "--", "cat", "f"); out != "from-0\nfrom-1\n" {
		t.Fatalf("exec through replica 0 restarted: %q", out)
	}
	via(1, "destroy", "--wipe", "shared")
	if out := via(0, "list"); strings.Contains(out, "shared") {
		t.Fatalf("list after a wipe through the other replica:\n%s", out)
	}

	// API keys are the cluster's too (kube.api_keys): a key made in one
	// replica works through the other, and through a replica started
	// again with a new home (a pod replaced: its emptyDir gone), which
	// also sees when it was last used; one
	// removed through either is refused by both within a few seconds.
	lines := strings.Split(strings.TrimSpace(in(0, "token", "create", "--scope", "admin", "team")), "\n")
	key := lines[len(lines)-1]
	if out, err := as(key, 1, "list"); err != nil {
		t.Fatalf("the key made in replica 0, through replica 1: %v\n%s", err, out)
	}
	replicas[0].stop()
	replicas[0].env = append(replicas[0].env, "HOME="+t.TempDir(), "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h2"))
	replicas[0].start()
	if out, err := as(key, 0, "list"); err != nil {
		t.Fatalf("the key through replica 0 with a new home: %v\n%s", err, out)
	}
	if out := in(0, "token", "list"); !strings.Contains(out, "team") {
		t.Errorf("token list in replica 0 with a new home:\n%s", out)
	}
	// When it was last used is the cluster's too: its use through
	// replica 1 shows in a list in replica 0, whose home is new.
	waittest.For(t, 15*time.Second, "the key's use through replica 1 to show in replica 0", func() bool {
		out := in(0, "token", "list")
		return strings.Contains(out, "team") && !strings.Contains(out, "never")
	})
	in(1, "token", "rm", "team")
	for i := range replicas {
		waittest.For(t, 10*time.Second, fmt.Sprintf("replica %d to refuse the removed key", i), func() bool {
			out, err := as(key, i, "list")
			return err != nil && strings.Contains(out, "bearer token is wrong")
		})
	}
}
