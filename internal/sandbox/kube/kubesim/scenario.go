package kubesim

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunManager drives a kube neuron through kube.Manager on the cluster
// core (and ag: nil is the pods path) reach, with a Kubelet: created (its
// agent reached with a pod token), commands run, stopped with its home
// kept, created again on it, driven by a second host that shares nothing
// with the first but the cluster, and wiped. A create the cluster cannot
// run fails naming why, and leaves nothing; what the mode cannot give is
// refused by name.
func RunManager(t *testing.T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config) {
	runManager(t, core, ag, Hosts{Core: core, Agents: ag}, cfg, Start, false)
}

// RunManagerBeside is RunManager's scenario beside agent-sandbox's own
// controller, which the caller runs (StartBeside).
func RunManagerBeside(t *testing.T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config) {
	runManager(t, core, ag, Hosts{Core: core, Agents: ag}, cfg, StartBeside, true)
}

// Hosts are the clients the scenario's hosts (kube.Managers) use.
type Hosts struct {
	Core   kubernetes.Interface
	Agents agents.Interface // nil: the pods path
	// Forward, when set, carries the hosts' links over the API server's
	// port-forward (kube.Manager.Forward).
	Forward *kube.Forwarder
}

// RunManagerAs is RunManager's scenario with its hosts reaching the
// cluster as hosts says (a deployed host's identity, held to the Role
// deploy/kubernetes grants it), and the Kubelet, the checks and the
// attacker that swaps the trust key through core and ag.
func RunManagerAs(t *testing.T, core kubernetes.Interface, ag agents.Interface, hosts Hosts, cfg kube.Config) {
	runManager(t, core, ag, hosts, cfg, Start, false)
}

func runManager(t *testing.T, core kubernetes.Interface, ag agents.Interface, hosts Hosts, cfg kube.Config,
	start func(T, kubernetes.Interface, agents.Interface, kube.Config, ...string) *Kubelet, beside bool) {
	cfg = cfg.Defaults()
	cl := &kube.Cluster{Core: hosts.Core, Config: cfg}
	if hosts.Agents != nil {
		cl.Agents = hosts.Agents
	}
	ctx := context.Background()
	priv, _ := podtoken.NewKey()
	if err := kube.EnsureTrust(ctx, hosts.Core, cfg, priv); err != nil {
		t.Fatal(err)
	}
	kl := start(t, core, ag, cfg, "bad")
	// The default address: the pod's IP and the agent port.
	m := &kube.Manager{Cluster: cl, Key: priv, Forward: hosts.Forward}
	t.Cleanup(func() { m.Close() })
	st, err := m.Create(ctx, "a", sandbox.CreateOptions{Labels: map[string]string{"team": "a"}, Env: []string{"FOO=bar"}, BootTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != sandbox.StatusRunning || st.Labels["team"] != "a" || st.Mode != kube.Mode {
		t.Fatalf("created: %+v", st)
	}
	c, err := m.Connect(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if beside {
		// The pod is the controller's: owned by the Sandbox (kubesim's
		// stand-in sets no owner).
		pod, err := core.CoreV1().Pods(cfg.Namespace).Get(ctx, kube.ObjectName("a"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "Sandbox" || ref.Name != kube.ObjectName("a") {
			t.Fatalf("the pod's controller: %+v, want Sandbox %s", ref, kube.ObjectName("a"))
		}
	}
	if out := run(t, c, "echo kept > home-file; echo ran"); out != "ran\n" {
		t.Fatalf("exec: %q", out)
	}
	// The environment is the container's: the neuron's variables, and
	// HOME on the home volume (the pod's /home/agent).
	if out := run(t, c, `echo "$FOO"; test "$HOME" != "`+os.Getenv("HOME")+`" && test -d "$HOME" && echo home`); out != "bar\nhome\n" {
		t.Errorf("the environment: %q", out)
	}
	if err := m.Destroy(ctx, "a", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Get(ctx, "a"); err != nil || st.Status != sandbox.StatusStopped {
		t.Errorf("stopped: %+v %v", st, err)
	}
	if _, err := m.Create(ctx, "a", sandbox.CreateOptions{BootTimeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Another host: nothing in common with the first but the cluster.
	m2 := &kube.Manager{Cluster: &kube.Cluster{Core: hosts.Core, Agents: cl.Agents, Config: cfg}, Key: priv, Forward: hosts.Forward}
	t.Cleanup(func() { m2.Close() })
	c2, err := m2.Connect(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if out := run(t, c2, "cat home-file"); out != "kept\n" {
		t.Fatalf("the home after a stop and a create, from another host: %q", out)
	}
	if list, err := m2.List(ctx); err != nil || len(list) != 1 || list[0].ID != "a" {
		t.Errorf("another host's list: %+v %v", list, err)
	}
	if err := m2.Destroy(ctx, "a", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	var nf *sandbox.NotFoundError
	if _, err := m.Get(ctx, "a"); !errors.As(err, &nf) {
		t.Errorf("a wiped neuron: %v", err)
	}

	_, err = m.Create(ctx, "bad", sandbox.CreateOptions{BootTimeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "ImagePullBackOff") {
		t.Fatalf("a pod whose image cannot be pulled: %v", err)
	}
	if pods, _ := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("a failed create left pod %s", pods.Items[0].Name)
	}
	// Claims go once the cluster lets them (pvc-protection, after their
	// pods): none may be left that is not on its way out.
	if claims, _ := core.CoreV1().PersistentVolumeClaims(cfg.Namespace).List(ctx, metav1.ListOptions{}); ag == nil {
		for _, c := range claims.Items {
			if c.DeletionTimestamp == nil {
				t.Errorf("a failed create left claim %s", c.Name)
			}
		}
	}
	waittest.For(t, 20*time.Second, "the claims deleted to go", func() bool {
		claims, err := core.CoreV1().PersistentVolumeClaims(cfg.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0
	})
	if ag != nil {
		if sbs, _ := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).List(ctx, metav1.ListOptions{}); len(sbs.Items) != 0 {
			t.Errorf("a failed create left Sandbox %s", sbs.Items[0].Name)
		}
	}
	death(t, m, kl, cfg)
	swappedTrust(t, m, core, priv, cfg)

	_, err = m.Create(ctx, "open", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}})
	var unenforceable *sandbox.UnenforceableError
	if !errors.As(err, &unenforceable) {
		t.Errorf("a neuron with the host's network: %v", err)
	}
	if _, err := m.Create(ctx, "Upper_Case", sandbox.CreateOptions{}); !errdefs.Of(err).Is(errdefs.Invalid) {
		t.Errorf("an id that is no DNS label: %v", err)
	}
}

// death kills a neuron's agent, and loses another's node, each with a
// command pending: the command fails NOT_RUNNING within 2 s (the closed
// connection tells the first; the informer, the pod Failed, the second,
// whose connection stays open), and the neuron is dead, with its exit
// code.
func death(t *testing.T, m *kube.Manager, kl *Kubelet, cfg kube.Config) {
	ctx := context.Background()
	for _, how := range []string{"killed", "lost"} {
		id := "death-" + how
		if _, err := m.Create(ctx, id, sandbox.CreateOptions{BootTimeout: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
		c, err := m.Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		pending := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: "echo started > started; exec sleep 30"}, Timeout: link.NoTimeout})
			pending <- err
		}()
		waittest.For(t, 10*time.Second, "the command to start", func() bool {
			ok, err := c.Exists(ctx, "started")
			return err == nil && ok
		})
		died := time.Now()
		if how == "killed" {
			err = kl.Kill(ctx, cfg.Namespace, kube.ObjectName(id), 137)
		} else {
			err = kl.Lose(ctx, cfg.Namespace, kube.ObjectName(id))
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-pending:
			if !errdefs.IsNotRunning(err) {
				t.Errorf("%s: the pending command: %v, want NOT_RUNNING", how, err)
			}
			if d := time.Since(died); d > 2*time.Second {
				t.Errorf("%s: the pending command failed %v after, want within 2 s", how, d)
			} else {
				t.Logf("%s: the pending command failed NOT_RUNNING %v after", how, d.Round(time.Millisecond))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the pending command hangs", how)
		}
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "true"}}); !errdefs.IsNotRunning(err) {
			t.Errorf("%s: a command after: %v, want NOT_RUNNING", how, err)
		}
		if _, err := m.Connect(ctx, id); !errdefs.IsNotRunning(err) {
			t.Errorf("%s: connect after: %v, want NOT_RUNNING", how, err)
		}
		if st, err := m.Get(ctx, id); err != nil || st.Status != sandbox.StatusStopped {
			t.Errorf("%s: get after: %+v %v", how, st, err)
		}
		o, err := m.Cluster.Observe(ctx, id, true, true)
		if err != nil || o.Phase != kube.Dead || how == "killed" && o.ExitCode != 137 {
			t.Errorf("%s: observed %+v %v, want dead (exit code 137 when killed)", how, o, err)
		}
		if err := m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// swappedTrust makes the trust ConfigMap again with another key (what
// one who may write ConfigMaps in the namespace would do, to sign tokens
// the pods take): a neuron created after does not start, its agent
// pinned to the host's key, and the create says why and leaves nothing.
// The ConfigMap is put back after.
func swappedTrust(t *testing.T, m *kube.Manager, core kubernetes.Interface, priv ed25519.PrivateKey, cfg kube.Config) {
	ctx := context.Background()
	cms := core.CoreV1().ConfigMaps(cfg.Namespace)
	if err := cms.Delete(ctx, cfg.TrustConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	theirs, _ := podtoken.NewKey()
	if err := kube.EnsureTrust(ctx, core, cfg, theirs); err != nil {
		t.Fatal(err)
	}
	_, err := m.Create(ctx, "pinned", sandbox.CreateOptions{BootTimeout: 20 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "trust key's SHA-256") {
		t.Errorf("a create under another trust key: %v, want the agent's refusal", err)
	}
	waittest.For(t, 20*time.Second, "the refused neuron's objects gone", func() bool {
		pods, err := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	if err := cms.Delete(ctx, cfg.TrustConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.EnsureTrust(ctx, m.Cluster.Core, cfg, priv); err != nil {
		t.Fatal(err)
	}
}

// run runs script in the neuron c reaches and returns its output.
func run(t *testing.T, c *link.Client, script string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: script}})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout)
}
