package kube_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

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
// open (kubesim's loopback, as a plugin that ignores NetworkPolicy) gets
// every create refused, by this host and by another that reads the
// recorded verdict, until kube.allow_open_network says otherwise; one
// that stands in for an enforcing plugin runs neurons. The probe's pod
// never stays, and a host that cannot reach pods learns nothing.
func TestNetworkProbe(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	for _, enforcing := range []bool{false, true} {
		name := "open"
		if enforcing {
			name = "enforcing"
		}
		t.Run(name, func(t *testing.T) {
			cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", Namespace: "probe-" + name}.Defaults()
			cluster.Prepare(t, core, cfg)
			priv, _ := podtoken.NewKey()
			if err := kube.EnsureTrust(ctx, core, cfg, priv); err != nil {
				t.Fatal(err)
			}
			kl := kubesim.Start(t, core, nil, cfg)
			kl.Enforce(enforcing)
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
