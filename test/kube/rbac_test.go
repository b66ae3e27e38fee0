package kube_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The Manager's scenario with its hosts as the deployed host is: the
// ServiceAccount deploy/kubernetes makes, held by an API server that
// authorizes with RBAC to the Role deploy/kubernetes grants it, nothing
// more. A verb the code calls and the Role lacks fails here (a wipe's
// watch of Sandboxes did, before the Role had it).
func TestDeployedRole(t *testing.T) {
	for _, path := range []string{"sandbox", "pods"} {
		t.Run(path, func(t *testing.T) { deployedRole(t, path == "sandbox") })
	}
}

// TestDeployedRoleWarmPool: the deployed Role grants what warm pools
// take (the claims, the pool and its template), and the deployed
// admission policy lets the hosts and agent-sandbox's controller do
// all they do: TestWarmPool's scenario with the host's Manager as the
// deployed identity, agent-sandbox's controllers as the ServiceAccount
// the policy names, under the policy. Then, as anyone else the
// namespace's RBAC lets write those objects, each write the policy is
// there to stop is refused (forgeries).
func TestDeployedRoleWarmPool(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, RBAC: true, Quiet: true})
	admin := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: deployNeurons, HostNamespace: deployHosts, WarmPool: 2}.Defaults()
	cluster.Prepare(t, admin, cfg)
	sa := applyRBAC(t, admin, cfg, nil)
	hostCfg := as(rc, cfg.HostNamespace, sa)
	ctrlCfg := controllerIdentity(t, admin, rc)
	applyAdmission(t, admin)
	tenant := tenantIdentity(t, admin, rc, cfg.Namespace)
	awaitGrant(t, kubernetes.NewForConfigOrDie(hostCfg), cfg.Namespace)
	awaitPolicy(t, kubernetes.NewForConfigOrDie(tenant), cfg.Namespace)
	m := warmPool(t, collectorIdentity(t, admin, rc), ctrlCfg, hostCfg, cfg)
	forgeries(t, rc, tenant, m, "cold", "w1")
}

func deployedRole(t *testing.T, sandboxes bool) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: sandboxes, RBAC: true, Quiet: true})
	admin := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: deployNeurons, HostNamespace: deployHosts}
	cluster.Prepare(t, admin, cfg)
	// On the pods path, the Role as an operator without
	// kube.chat_sessions applies it: without the rule for the sessions'
	// Secrets, which reaches every Secret of the namespace.
	var edit func(*rbacv1.Role)
	if !sandboxes {
		edit = func(r *rbacv1.Role) {
			r.Rules = slices.DeleteFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
				return slices.Contains(rule.Resources, "secrets") && len(rule.ResourceNames) == 0
			})
		}
	}
	sa := applyRBAC(t, admin, cfg, edit)
	hostCfg := as(rc, cfg.HostNamespace, sa)
	host := kubernetes.NewForConfigOrDie(hostCfg)
	awaitGrant(t, host, cfg.Namespace)
	// The identity is held to the Role: what it does not grant is refused.
	if _, err := host.CoreV1().Services(cfg.Namespace).List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("the host's identity may list Services: the server does not authorize with RBAC")
	}
	// doctor with kube.chat_sessions: allowed by the whole Role, refused
	// by the one without the sessions' rule, saying what to grant.
	t.Setenv("NSYS_CORTEX_KUBE_IMAGE", cfg.Image)
	t.Setenv("NSYS_CORTEX_KUBE_NAMESPACE", cfg.Namespace)
	t.Setenv("NSYS_CORTEX_KUBE_HOST_NAMESPACE", cfg.HostNamespace)
	t.Setenv("NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK", "true")
	t.Setenv("NSYS_CORTEX_KUBE_CHAT_SESSIONS", "true")
	t.Setenv("NSYS_CORTEX_KUBE_KUBECONFIG", writeKubeconfig(t, hostCfg))
	doctor := kube.SelfCheck(context.Background(), sandbox.Env{Layout: layout.Layout{Home: t.TempDir()}})
	var chats *sandbox.CheckItem
	for i, it := range doctor.Items {
		if strings.HasPrefix(it.Name, "chat sessions (kube.chat_sessions)") {
			chats = &doctor.Items[i]
		}
	}
	t.Setenv("NSYS_CORTEX_KUBE_CHAT_SESSIONS", "")
	switch {
	case chats == nil:
		t.Fatalf("doctor with kube.chat_sessions has no item for them: %+v", doctor.Items)
	case sandboxes && (!chats.OK || !strings.Contains(chats.Detail, "0 sessions kept")):
		t.Errorf("doctor on chat sessions with the whole Role: %+v", *chats)
	case !sandboxes && (chats.OK || !strings.Contains(chats.Detail, "forbids list on secrets") || doctor.OK):
		t.Errorf("doctor on chat sessions without their rule: %+v (summary %q)", *chats, doctor.Summary)
	}
	if sandboxes {
		// Chat sessions (kube.chat_sessions), as two replicas keep them.
		chatSessions(t, host, metadata.NewForConfigOrDie(hostCfg), cfg.HostNamespace)
	} else {
		// Without that rule no Secret but the API keys' is the host's.
		other := &kube.SecretKeys{Core: host, Namespace: cfg.HostNamespace, Name: "nsys-cortex-api"}
		if _, _, err := other.Load(); err == nil || !strings.Contains(err.Error(), "forbids get on secrets") {
			t.Errorf("the host reading another Secret: %v, want it forbidden", err)
		}
	}
	hosts, ag := kubesim.Hosts{Core: host}, agents.Interface(nil)
	if sandboxes {
		hosts.Agents, ag = cluster.Agents(hostCfg), cluster.Agents(rc)
	}
	kubesim.RunManagerAs(t, admin, ag, hosts, cfg)
	// The network probe, twice (the second rewrites the verdict): its pod
	// made, watched and removed, its ConfigMap made and updated.
	probe := &kube.Cluster{Core: host, Config: cfg}
	for range 2 {
		if v, err := probe.ProbeNetwork(context.Background(), nil); err != nil || v.Enforced {
			t.Fatalf("the network probe as the deployed host: %+v %v", v, err)
		}
	}
	if !sandboxes {
		return
	}

	// kube.port_forward needs what the Role does not grant (it is for a
	// person's identity, outside the cluster): doctor says so.
	forwarding := func(rc *rest.Config) sandbox.CheckItem {
		t.Setenv("NSYS_CORTEX_KUBE_IMAGE", cfg.Image)
		t.Setenv("NSYS_CORTEX_KUBE_NAMESPACE", cfg.Namespace)
		t.Setenv("NSYS_CORTEX_KUBE_PORT_FORWARD", "true")
		t.Setenv("NSYS_CORTEX_KUBE_KUBECONFIG", writeKubeconfig(t, rc))
		c := kube.SelfCheck(context.Background(), sandbox.Env{Layout: layout.Layout{Home: t.TempDir()}})
		for _, it := range c.Items {
			if it.Name == "port-forward (kube.port_forward)" {
				if !it.OK && !strings.Contains(c.Summary, "pods/portforward") {
					t.Errorf("doctor's summary does not name the refused port-forward: %q", c.Summary)
				}
				return it
			}
		}
		t.Fatalf("doctor with kube.port_forward has no port-forward check: %+v", c.Items)
		return sandbox.CheckItem{}
	}
	if it := forwarding(hostCfg); it.OK || !strings.Contains(it.Detail, "may not create pods/portforward in namespace "+cfg.Namespace) {
		t.Errorf("doctor as the deployed host, with kube.port_forward: %+v", it)
	}
	if it := forwarding(rc); !it.OK {
		t.Errorf("doctor as the administrator, with kube.port_forward: %+v", it)
	}

	// The shared API keys: the base's Secret, read and rewritten by the
	// host; no other Secret.
	docs := deployDocs(t, "api-keys.yaml")
	sec, ok := docs[0].(*corev1.Secret)
	if len(docs) != 1 || !ok {
		t.Fatalf("api-keys.yaml: %d objects, the first a %T", len(docs), docs[0])
	}
	if _, err := admin.CoreV1().Secrets(cfg.HostNamespace).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keys := &kube.SecretKeys{Core: host, Namespace: cfg.HostNamespace, Name: sec.Name}
	if err := keys.Change(func(b []byte) ([]byte, error) { return append(b, "{}"...), nil }); err != nil {
		t.Fatalf("the host writing the shared keys: %v", err)
	}
	if b, _, err := keys.Load(); err != nil || string(b) != "{}" {
		t.Fatalf("the host reading the shared keys: %q %v", b, err)
	}
}

// awaitGrant waits until the API server's RBAC has taken the Role just
// applied (its authorizer reads through a cache): a verb it grants,
// listing pods in namespace ns, is no longer refused to host.
func awaitGrant(t *testing.T, host kubernetes.Interface, ns string) {
	t.Helper()
	waittest.For(t, 10*time.Second, "the Role to take effect", func() bool {
		_, err := host.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{Limit: 1})
		return err == nil
	})
}

// as is rc impersonating ServiceAccount sa of namespace ns.
func as(rc *rest.Config, ns, sa string) *rest.Config {
	c := rest.CopyConfig(rc)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return c
}

// The namespaces deploy/kubernetes makes: the neurons' and the hosts'.
const deployNeurons, deployHosts = "nsys-cortex", "nsys-cortex-hosts"

// applyRBAC creates, as the administrator, the ServiceAccount, Roles (as
// edit changes them, when not nil) and RoleBindings of deploy/kubernetes,
// in cfg's namespaces where the files name the deployed ones, and returns
// the ServiceAccount's name.
func applyRBAC(t *testing.T, admin kubernetes.Interface, cfg kube.Config, edit func(*rbacv1.Role)) string {
	t.Helper()
	ctx := context.Background()
	cfg = cfg.Defaults()
	in := func(deployed string) string {
		switch deployed {
		case deployNeurons:
			return cfg.Namespace
		case deployHosts:
			return cfg.HostNamespace
		}
		t.Fatalf("rbac.yaml: an object in namespace %q", deployed)
		return ""
	}
	var sa string
	for _, obj := range deployDocs(t, "rbac.yaml") {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace, sa = in(o.Namespace), o.Name
			_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = in(o.Namespace)
			if edit != nil {
				edit(o)
			}
			_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = in(o.Namespace)
			for i := range o.Subjects {
				o.Subjects[i].Namespace = in(o.Subjects[i].Namespace)
			}
			_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("rbac.yaml: unexpected %T", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sa == "" {
		t.Fatal("rbac.yaml holds no ServiceAccount")
	}
	return sa
}

// chatSessions drives the chat sessions' store through core as two
// replicas would, one reading the Secrets' metadata alone (meta), as
// serve does, the other whole: made, held, saved, listed, read and
// removed, each write held to the version it read (preconditions the
// fake clientset does not check).
func chatSessions(t *testing.T, core kubernetes.Interface, meta metadata.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	a, b := kube.NewSecretSessions(core, ns), kube.NewSecretSessions(core, ns)
	a.Meta = meta
	file := []byte("{}\n")
	if _, err := a.Save(ctx, "rbac-s1", file, []byte(`{"id":"rbac-s1"}`), 0); err != nil {
		t.Fatalf("a session saved: %v", err)
	}
	if _, err := a.Hold(ctx, "rbac-s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "rbac-s1"); !errdefs.Of(err).Is(errdefs.Busy) {
		t.Fatalf("removed while the other replica holds it: %v", err)
	}
	if g, err := a.Save(ctx, "rbac-s1", append(file, file...), []byte(`{"id":"rbac-s1"}`), 1); err != nil || g != 2 {
		t.Fatalf("saved by its holder: %d %v", g, err)
	}
	if l, err := b.List(ctx); err != nil || len(l) != 1 {
		t.Fatalf("listed: %v %v", l, err)
	}
	if got, g, err := b.Load(ctx, "rbac-s1"); err != nil || g != 2 || len(got) != 2*len(file) {
		t.Fatalf("read through the other: %q %d %v", got, g, err)
	}
	if err := b.Delete(ctx, "rbac-s1"); err != nil {
		t.Fatalf("removed: %v", err)
	}
	if _, err := a.Generation(ctx, "rbac-s1"); !errdefs.IsNotFound(err) {
		t.Fatalf("after the removal: %v", err)
	}
}
