package kube_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The network probe against a real API server: a kubelet whose pods are
// open (kubesim's loopback, as a plugin that ignores NetworkPolicy), or
// one that enforces ingress and lets a neuron pod out (around its host's
// egress proxy), gets every create refused, by this host and by another that reads the
// recorded verdict, until kube.allow_open_network says otherwise; one
// that stands in for an enforcing plugin runs neurons. The probe's pod
// never stays, and a host that cannot reach pods learns nothing.
func TestNetworkProbe(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	for _, name := range []string{"open", "ingress-only", "enforcing"} {
		enforcing := name == "enforcing"
		t.Run(name, func(t *testing.T) {
			cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", Namespace: "probe-" + name}.Defaults()
			cluster.Prepare(t, core, cfg)
			priv, _ := podtoken.NewKey()
			if err := kube.EnsureTrust(ctx, core, cfg, priv); err != nil {
				t.Fatal(err)
			}
			kl := kubesim.Start(t, core, nil, cfg)
			kl.Enforce(enforcing)
			if name == "ingress-only" {
				kl.EnforceIngressOnly()
			}
			host := func(cfg kube.Config) *kube.Manager {
				m := &kube.Manager{Cluster: &kube.Cluster{Core: core, Config: cfg}, Key: priv}
				t.Cleanup(func() { m.Close() })
				return m
			}
			create := func(m *kube.Manager, id string) error {
				_, err := m.Create(ctx, id, sandbox.CreateOptions{BootTimeout: 20 * time.Second})
				return err
			}
			err := create(host(cfg), "n1")
			cm, gerr := core.CoreV1().ConfigMaps(cfg.Namespace).Get(ctx, kube.ProbeConfigMap, metav1.GetOptions{})
			if gerr != nil {
				t.Fatalf("no verdict recorded: %v", gerr)
			}
			if want := map[bool]string{false: "false", true: "true"}[enforcing]; cm.Data["enforced"] != want {
				t.Fatalf("recorded %v, want enforced=%s", cm.Data, want)
			}
			if name == "ingress-only" && !strings.Contains(cm.Data["detail"], "egress is not enforced") {
				t.Fatalf("a plugin that enforces ingress alone: %v", cm.Data)
			}
			if enforcing && !strings.Contains(cm.Data["detail"], "did not reach the control") {
				t.Fatalf("an enforcing plugin's verdict says nothing of egress: %v", cm.Data)
			}
			waittest.For(t, 10*time.Second, "the probe's pod gone", func() bool {
				list, err := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelProbe})
				return err == nil && len(list.Items) == 0
			})
			if enforcing {
				if err != nil {
					t.Fatalf("a create where NetworkPolicy is enforced: %v", err)
				}
				return
			}
			var u *sandbox.UnenforceableError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), "NOT enforced") || !strings.Contains(err.Error(), "kube.allow_open_network") {
				t.Fatalf("a create where NetworkPolicy is not enforced: %v", err)
			}
			if _, err := core.CoreV1().Pods(cfg.Namespace).Get(ctx, kube.ObjectName("n1"), metav1.GetOptions{}); err == nil {
				t.Fatal("the refused create made a pod")
			}
			// Another host reads the verdict.
			if err := create(host(cfg), "n2"); !errors.As(err, &u) {
				t.Fatalf("another host's create: %v", err)
			}
			// doctor says so, and why creates are refused.
			t.Setenv("NSYS_CORTEX_KUBE_IMAGE", cfg.Image)
			t.Setenv("NSYS_CORTEX_KUBE_NAMESPACE", cfg.Namespace)
			t.Setenv("NSYS_CORTEX_KUBE_KUBECONFIG", writeKubeconfig(t, rc))
			c := kube.SelfCheck(ctx, sandbox.Env{Layout: layout.Layout{Home: t.TempDir()}})
			i := slices.IndexFunc(c.Items, func(it sandbox.CheckItem) bool { return strings.HasPrefix(it.Name, "NetworkPolicy enforced") })
			if i < 0 || c.Items[i].OK || c.OK || !strings.Contains(c.Summary, "NOT enforced") || !strings.Contains(c.Summary, "creates are refused") {
				t.Fatalf("doctor on an open network: %+v", c)
			}
			open := cfg
			open.OpenNetwork = true
			if err := create(host(open), "n3"); err != nil {
				t.Fatalf("a create with kube.allow_open_network: %v", err)
			}
		})
	}
	// What the adversarial review of the probe found, each its own case.
	t.Run("review", func(t *testing.T) {
		cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", Namespace: "probe-review"}.Defaults()
		cluster.Prepare(t, core, cfg)
		priv, _ := podtoken.NewKey()
		if err := kube.EnsureTrust(ctx, core, cfg, priv); err != nil {
			t.Fatal(err)
		}
		kl := kubesim.Start(t, core, nil, cfg)
		kl.Enforce(true)
		cl := &kube.Cluster{Core: core, Config: cfg}
		podIP := func(role string) string {
			list, err := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelProbe + "=" + role})
			if err != nil || len(list.Items) != 1 {
				return ""
			}
			return list.Items[0].Status.PodIP
		}
		denied := func(addr string) bool {
			return addr == net.JoinHostPort(podIP("network"), strconv.Itoa(int(cfg.AgentPort+1)))
		}
		plain := &net.Dialer{}
		// A connection made to the denied port, that then says nothing (a
		// listener starved of CPU): not enforced, though the dial "failed".
		silent := func(ctx context.Context, addr string) (net.Conn, error) {
			if denied(addr) {
				a, b := net.Pipe()
				t.Cleanup(func() { b.Close() })
				return a, nil
			}
			return plain.DialContext(ctx, "tcp", addr)
		}
		if v, err := cl.ProbeNetwork(ctx, silent); err != nil || v.Enforced {
			t.Fatalf("a denied port that took the connection and said nothing: %+v %v", v, err)
		}
		// The control (no policy selects it) not reached on that port: a
		// path closed to it, not the policies: nothing is learnt.
		firewalled := func(ctx context.Context, addr string) (net.Conn, error) {
			if addr == net.JoinHostPort(podIP("control"), strconv.Itoa(int(cfg.AgentPort+1))) {
				return nil, errors.New("dropped by a firewall")
			}
			return plain.DialContext(ctx, "tcp", addr)
		}
		if v, err := cl.ProbeNetwork(ctx, firewalled); !errors.Is(err, kube.ErrCannotProbe) {
			t.Fatalf("a probe whose control was not reached: %+v %v", v, err)
		}
		cms := core.CoreV1().ConfigMaps(cfg.Namespace)
		setVerdict := func(enforced string, checked time.Time) {
			t.Helper()
			cm, err := cms.Get(ctx, kube.ProbeConfigMap, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm.Data = map[string]string{"enforced": enforced, "checked": checked.UTC().Format(time.RFC3339), "detail": "written by the test"}
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		create := func(id string) error {
			m := &kube.Manager{Cluster: &kube.Cluster{Core: core, Config: cfg}, Key: priv}
			defer m.Close()
			_, err := m.Create(ctx, id, sandbox.CreateOptions{BootTimeout: 20 * time.Second})
			return err
		}
		// A verdict dated in the future is none: the probe runs (and, with
		// the silent denied port gone, finds the kubelet enforcing).
		kl.Enforce(false)
		setVerdict("true", time.Now().Add(24*365*time.Hour))
		if err := create("f1"); !strings.Contains(fmt.Sprint(err), "NOT enforced") {
			t.Fatalf("a create under a verdict dated next year, on an open network: %v", err)
		}
		// An old verdict, and a probe that cannot run (a quota of no
		// pods): within two days it stands in, past them it is none.
		quota(t, core, cfg.Namespace, corev1.ResourcePods)
		waittest.For(t, 10*time.Second, "the quota in force", func() bool {
			_, err := core.CoreV1().Pods(cfg.Namespace).Create(ctx, kube.ControlPod(cfg, "quota-check"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil
		})
		setVerdict("true", time.Now().Add(-72*time.Hour))
		if err := create("s1"); !strings.Contains(fmt.Sprint(err), "not known") {
			t.Fatalf("a create under a three-day-old verdict, the probe refused by a quota: %v", err)
		}
		setVerdict("false", time.Now().Add(-30*time.Hour))
		if err := create("s2"); !strings.Contains(fmt.Sprint(err), "NOT enforced") {
			t.Fatalf("a create under a 30-hour-old verdict of not enforced, the probe refused by a quota: %v", err)
		}
	})
	// A create waits for a probe within its own context, and Close ends
	// the probe in flight: here no kubelet runs the probe's pods.
	t.Run("waits", func(t *testing.T) {
		cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", Namespace: "probe-waits"}.Defaults()
		cluster.Prepare(t, core, cfg)
		priv, _ := podtoken.NewKey()
		m := &kube.Manager{Cluster: &kube.Cluster{Core: core, Config: cfg}, Key: priv}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		t0 := time.Now()
		if _, err := m.Create(cctx, "w1", sandbox.CreateOptions{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a create with 1 s, behind a probe that cannot finish: %v", err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("the create took %s with 1 s to go", d)
		}
		m.Close()
		waittest.For(t, 20*time.Second, "the stuck probe's pods removed", func() bool {
			list, err := core.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelProbe})
			return err == nil && len(list.Items) == 0
		})
	})
	t.Run("unreachable", func(t *testing.T) {
		cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", Namespace: "probe-unreachable"}.Defaults()
		cluster.Prepare(t, core, cfg)
		kubesim.Start(t, core, nil, cfg)
		cl := &kube.Cluster{Core: core, Config: cfg}
		nowhere := func(context.Context, string) (net.Conn, error) { return nil, errors.New("no route to the pod network") }
		if v, err := cl.ProbeNetwork(ctx, nowhere); !errors.Is(err, kube.ErrCannotProbe) {
			t.Fatalf("a probe that reaches no pod: %+v %v", v, err)
		}
		if _, ok, err := cl.NetworkVerdict(ctx); ok || err != nil {
			t.Fatalf("a probe that learnt nothing recorded a verdict (%v)", err)
		}
	})
}
