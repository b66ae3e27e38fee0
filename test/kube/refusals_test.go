package kube_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// What the issue lists under "Bad input and failure", on the real API
// server (TestRefusals in internal/sandbox/kube drives the same through
// the fake clientset): a namespace quota exceeded, RBAC forbidding a verb,
// a home claim that never binds, and the API server unreachable. Each
// create fails within its boot timeout with an error of the right class
// that names the cause and what to do, and leaves no pod, Sandbox or
// claim behind. (An image that cannot be pulled: kubesim's scenario, in
// TestManager.)
func TestRefusals(t *testing.T) {
	t.Run("pods", func(t *testing.T) {
		rc := cluster.Start(t, cluster.Options{Quiet: true})
		admin := kubernetes.NewForConfigOrDie(rc)
		cfg := prepared(t, admin, nil, "quota")
		quota(t, admin, cfg.Namespace, corev1.ResourcePods)
		kubesim.Start(t, admin, nil, cfg) // lets deleted claims go, as the cluster's controllers do
		m := manager(t, admin, nil, cfg)
		refused(t, m, admin, nil, cfg, errdefs.Capacity, "exceeded quota", "raise the quota")
	})
	t.Run("sandbox", func(t *testing.T) {
		rc := cluster.Start(t, cluster.Options{Sandboxes: true, RBAC: true, Quiet: true})
		admin, ag := kubernetes.NewForConfigOrDie(rc), cluster.Agents(rc)

		cfg := prepared(t, admin, ag, "quota")
		quota(t, admin, cfg.Namespace, "count/sandboxes.agents.x-k8s.io")
		kubesim.Start(t, admin, ag, cfg)
		refused(t, manager(t, admin, ag, cfg), admin, ag, cfg, errdefs.Capacity, "exceeded quota", "raise the quota")

		cfg = prepared(t, admin, ag, "rbac")
		sa := applyRBAC(t, admin, cfg, func(r *rbacv1.Role) {
			for i := range r.Rules {
				r.Rules[i].Verbs = slices.DeleteFunc(r.Rules[i].Verbs, func(v string) bool { return v == "create" && slices.Contains(r.Rules[i].Resources, "sandboxes") })
			}
		})
		kubesim.Start(t, admin, ag, cfg)
		host := as(rc, cfg.Defaults().HostNamespace, sa)
		awaitGrant(t, kubernetes.NewForConfigOrDie(host), cfg.Namespace)
		refused(t, manager(t, kubernetes.NewForConfigOrDie(host), cluster.Agents(host), cfg), admin, ag, cfg,
			errdefs.Permission, "forbids create on sandboxes.agents.x-k8s.io", "deploy/kubernetes/rbac.yaml")

		cfg = prepared(t, admin, ag, "unbound")
		cfg.StorageClass = kubesim.NeverBinds
		kubesim.Start(t, admin, ag, cfg)
		refused(t, manager(t, admin, ag, cfg), admin, ag, cfg, errdefs.Timeout, "claim home-n-refused, has no volume yet", "storage class never-binds")
	})
	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing answers there now
		rc := &rest.Config{Host: "http://" + addr, Timeout: 5 * time.Second}
		cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
		priv, _ := podtoken.NewKey()
		m := &kube.Manager{Cluster: &kube.Cluster{Core: kubernetes.NewForConfigOrDie(rc), Agents: cluster.Agents(rc), Config: cfg}, Key: priv}
		defer m.Close()
		_, err = m.Create(context.Background(), "refused", sandbox.CreateOptions{BootTimeout: 5 * time.Second})
		if !errdefs.Of(err).Is(errdefs.Unavailable) || !strings.Contains(err.Error(), "cannot be reached") || !strings.Contains(err.Error(), "kube.kubeconfig") {
			t.Errorf("a create with the API server unreachable: %v (class %v), want UNAVAILABLE saying it cannot be reached", err, errdefs.Of(err))
		}
	})
}

// prepared makes namespace ns with the trust ConfigMap of a new key, and
// returns the configuration of kube mode there.
func prepared(t *testing.T, admin kubernetes.Interface, ag agents.Interface, ns string) kube.Config {
	t.Helper()
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: ns}.Defaults()
	cluster.Prepare(t, admin, cfg)
	return cfg
}

// manager is a host on core and ag, with a key of its own in the trust
// ConfigMap (which core must be allowed to make).
func manager(t *testing.T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config) *kube.Manager {
	t.Helper()
	priv, _ := podtoken.NewKey()
	if err := kube.EnsureTrust(context.Background(), kubernetes.Interface(core), cfg, priv); err != nil {
		t.Fatal(err)
	}
	cl := &kube.Cluster{Core: core, Config: cfg}
	if ag != nil {
		cl.Agents = ag
	}
	m := &kube.Manager{Cluster: cl, Key: priv}
	t.Cleanup(func() { m.Close() })
	return m
}

// quota gives namespace ns a ResourceQuota of none of resource, with
// the status the quota controller (not run here) would write.
func quota(t *testing.T, admin kubernetes.Interface, ns string, res corev1.ResourceName) {
	t.Helper()
	ctx := context.Background()
	hard := corev1.ResourceList{res: resource.MustParse("0")}
	q, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "none"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{res: resource.MustParse("0")}}
	if _, err := admin.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// refused creates neuron "refused" through m and checks that it fails
// as class, its words holding says, and that nothing of it is left.
func refused(t *testing.T, m *kube.Manager, admin kubernetes.Interface, ag agents.Interface, cfg kube.Config, class errdefs.Class, says ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := m.Create(ctx, "refused", sandbox.CreateOptions{BootTimeout: 3 * time.Second})
	if err == nil || !errdefs.Of(err).Is(class) {
		t.Fatalf("namespace %s: %v (class %v), want %v", cfg.Namespace, err, errdefs.Of(err), class)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("namespace %s: %v, want it to say %q", cfg.Namespace, err, s)
		}
	}
	t.Logf("namespace %s: %v", cfg.Namespace, err)
	waittest.For(t, 20*time.Second, "nothing left in namespace "+cfg.Namespace, func() bool {
		pods, err := admin.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 0 {
			return false
		}
		claims, err := admin.CoreV1().PersistentVolumeClaims(cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(claims.Items) != 0 {
			return false
		}
		if ag == nil {
			return true
		}
		sbs, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(sbs.Items) == 0
	})
}
