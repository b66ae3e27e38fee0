package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// TestDoctorHostGrants: doctor, as the deployed host, names whoever the
// RoleBindings of the hosts' namespace let reach the hosts' Secrets,
// pods or identity, each way: a Role of the namespace to a user, a
// ClusterRole as "edit" to a ServiceAccount of another namespace, a Role
// to a group; and lets by what reaches none of it (a ClusterRole as
// "view") and the hosts' own binding. Without the Role's rules for it, doctor says it did not look.
func TestDoctorHostGrants(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{RBAC: true, Quiet: true})
	admin := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: deployNeurons, HostNamespace: deployHosts}.Defaults()
	cluster.Prepare(t, admin, cfg)
	sa := applyRBAC(t, admin, cfg, nil)
	hostCfg := as(rc, cfg.HostNamespace, sa)
	awaitGrant(t, kubernetes.NewForConfigOrDie(hostCfg), cfg.Namespace)
	itemName := "grants in the hosts' namespace " + cfg.HostNamespace
	doctor := func(rc *rest.Config) (sandbox.Check, sandbox.CheckItem) {
		t.Helper()
		t.Setenv("NSYS_CORTEX_KUBE_IMAGE", cfg.Image)
		t.Setenv("NSYS_CORTEX_KUBE_NAMESPACE", cfg.Namespace)
		t.Setenv("NSYS_CORTEX_KUBE_HOST_NAMESPACE", cfg.HostNamespace)
		t.Setenv("NSYS_CORTEX_KUBE_ALLOW_OPEN_NETWORK", "true")
		t.Setenv("NSYS_CORTEX_KUBE_KUBECONFIG", writeKubeconfig(t, rc))
		c := kube.SelfCheck(ctx, sandbox.Env{Layout: layout.Layout{Home: t.TempDir()}})
		for _, it := range c.Items {
			if it.Name == itemName {
				return c, it
			}
		}
		t.Fatalf("doctor has no item %q: %+v", itemName, c.Items)
		return c, sandbox.CheckItem{}
	}
	if _, it := doctor(hostCfg); !it.OK || !strings.Contains(it.Detail, "grants anyone but the hosts' ServiceAccount") {
		t.Fatalf("doctor on the base's grants alone: %+v", it)
	}
	// Run by someone else (a person, with the quick start's kubeconfig),
	// the hosts' own binding is no finding either.
	if _, it := doctor(rc); !it.OK {
		t.Fatalf("doctor as the administrator on the base's grants alone: %+v", it)
	}

	rbac := admin.RbacV1()
	if _, err := rbac.Roles(cfg.HostNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// ClusterRoles as a cluster's "view" and "edit" grant (this API
	// server runs no controller to aggregate the built-in ones), and one
	// that may bind any.
	for _, cr := range []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "test-view"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/log", "configmaps", "services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "test-edit"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/exec", "secrets", "serviceaccounts/token"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
			{APIGroups: []string{"apps", "batch"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "test-binder"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"create"}},
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, Verbs: []string{"bind"}},
		}},
	} {
		if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(name string, ref rbacv1.RoleRef, sub rbacv1.Subject) {
		t.Helper()
		if _, err := rbac.RoleBindings(cfg.HostNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: []rbacv1.Subject{sub},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unbind := func(name string) {
		t.Helper()
		if err := rbac.RoleBindings(cfg.HostNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// flags waits until doctor, as the host, names each of want in its
	// item (the authorizer's cache takes a moment to see a binding), and
	// returns it; that item must then fail doctor, first of all.
	flags := func(want ...string) sandbox.CheckItem {
		t.Helper()
		var c sandbox.Check
		var it sandbox.CheckItem
		if !waittest.Until(20*time.Second, func() bool {
			c, it = doctor(hostCfg)
			return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(it.Detail, w) })
		}) {
			t.Fatalf("doctor does not name %q: %+v", want, it)
		}
		if it.OK || c.OK || c.Summary != it.Detail {
			t.Errorf("doctor names %v but passes, or says something else first: %+v (summary %q)", want, it, c.Summary)
		}
		return it
	}
	passes := func(what string) {
		t.Helper()
		waittest.For(t, 20*time.Second, "doctor to pass "+what, func() bool {
			_, it := doctor(hostCfg)
			return it.OK && strings.Contains(it.Detail, "grants anyone but the hosts' ServiceAccount")
		})
	}

	// Grants limited to names: the signing key's Secret alone, and the
	// hosts' ServiceAccount's tokens, to a ServiceAccount of another
	// namespace that has the hosts' ServiceAccount's name.
	if _, err := rbac.Roles(cfg.HostNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "narrow"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"nsys-cortex-signing-key"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{sa}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind("narrow", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "narrow"},
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "ci"})
	flags("ServiceAccount ci/"+sa+", bound by RoleBinding narrow to Role narrow, may get secrets/nsys-cortex-signing-key",
		"list secrets/nsys-cortex-signing-key", "watch secrets/nsys-cortex-signing-key", // a field selector on the name
		"create serviceaccounts/token/"+sa, "patch pods")
	unbind("narrow")
	passes("once the narrow binding is gone")

	// Other accounts of the namespace, and the group of all of them, are
	// not the hosts': code that is not the hosts' may run as them. A token
	// of "default" is asked about by name.
	if _, err := rbac.Roles(cfg.HostNamespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "default-tokens"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{"default"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind("backup", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secret-reader"},
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "backup"})
	bind("all-accounts", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secret-reader"},
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + cfg.HostNamespace})
	bind("minter", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "default-tokens"},
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "frank"})
	flags("ServiceAccount "+cfg.HostNamespace+"/backup, bound by RoleBinding backup to Role secret-reader, may get secrets",
		"group system:serviceaccounts:"+cfg.HostNamespace+", bound by RoleBinding all-accounts",
		"user frank, bound by RoleBinding minter to Role default-tokens, may create serviceaccounts/token/default")
	for _, b := range []string{"backup", "all-accounts", "minter"} {
		unbind(b)
	}
	passes("once the accounts' bindings are gone")

	// More subjects than doctor asks about fail the item.
	many := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "many"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-view"}}
	for i := range 17 {
		many.Subjects = append(many.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("viewer-%d", i)})
	}
	if _, err := rbac.RoleBindings(cfg.HostNamespace).Create(ctx, many, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	flags("17 subjects, more than the 16 doctor asks about")
	unbind("many")
	passes("once the many are gone")

	// A Role of the namespace, to a user.
	bind("backup", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secret-reader"},
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "backup-operator"})
	it := flags("user backup-operator, bound by RoleBinding backup to Role secret-reader, may get secrets")
	if strings.Contains(it.Detail, "list secrets") || strings.Contains(it.Detail, "ServiceAccount "+cfg.HostNamespace+"/"+sa) {
		t.Errorf("doctor names more than the user may do, or the host itself: %s", it.Detail)
	}
	unbind("backup")
	passes("once the user's binding is gone")

	// The "view" reaches none of it; the "edit", given a ServiceAccount
	// of another namespace (a CI's deployer), all of it.
	bind("viewers", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-view"},
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a"})
	bind("deployers", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-edit"},
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: "ci"})
	it = flags("ServiceAccount ci/deployer, bound by RoleBinding deployers to ClusterRole test-edit, may get secrets",
		"create pods", "create pods/exec", "create serviceaccounts/token", "patch deployments.apps", "create jobs.batch")
	if strings.Contains(it.Detail, "team-a") {
		t.Errorf("doctor names the viewers, whom their role gives none of it: %s", it.Detail)
	}
	unbind("deployers")
	passes("with only the viewers bound")

	// Who may bind any ClusterRole there may grant itself all of it.
	bind("binders", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-binder"},
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ops"})
	flags("user ops, bound by RoleBinding binders to ClusterRole test-binder, may create rolebindings.rbac.authorization.k8s.io",
		"bind clusterroles.rbac.authorization.k8s.io")
	unbind("binders")
	passes("once the binders' binding is gone")

	// A group given a Role of the namespace.
	bind("group-readers", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secret-reader"},
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "auditors"})
	flags("group auditors, bound by RoleBinding group-readers to Role secret-reader, may get secrets")

	// Hosts whose Role lacks the check's rules (an install from before
	// them): doctor says it did not look, and fails on it.
	for _, tc := range []struct {
		ns, drop, want string
	}{
		{"older", "rolebindings", "not checked: this identity may not list RoleBindings in older-hosts"},
		{"halfway", "localsubjectaccessreviews", "not checked: this identity may not ask what user someone may do in halfway-hosts"},
	} {
		cfg2 := cfg
		cfg2.Namespace, cfg2.HostNamespace = tc.ns, tc.ns+"-hosts"
		cluster.Prepare(t, admin, cfg2)
		sa2 := applyRBAC(t, admin, cfg2, func(r *rbacv1.Role) {
			r.Rules = slices.DeleteFunc(r.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, tc.drop) })
		})
		if _, err := rbac.RoleBindings(cfg2.HostNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "someone"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-view"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		host2 := as(rc, cfg2.HostNamespace, sa2)
		awaitGrant(t, kubernetes.NewForConfigOrDie(host2), cfg2.Namespace)
		saved := cfg
		cfg, itemName = cfg2, "grants in the hosts' namespace "+cfg2.HostNamespace
		if c, it := doctor(host2); it.OK || c.OK || !strings.Contains(it.Detail, tc.want) {
			t.Errorf("doctor as a host without the rule for %s: %+v (summary %q)", tc.drop, it, c.Summary)
		}
		cfg, itemName = saved, "grants in the hosts' namespace "+saved.HostNamespace
	}
}
