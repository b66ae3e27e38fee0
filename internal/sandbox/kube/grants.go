package kube

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// hostRisk is one thing a grant in the hosts' namespace must give no one
// but the hosts: each reaches the signing key every agent trusts (and
// the API keys), the hosts' pods or traffic, or the hosts' own identity.
// named says which names a grant limited to names (resourceNames) would
// list, asked about one by one: a review with no name matches no rule
// that lists names.
type hostRisk struct {
	verb, group, resource, subresource string
	named                              nameKind
}

// nameKind picks the names a hostRisk is asked about besides none.
type nameKind int

const (
	anyName        nameKind = iota
	secretNames             // the base's Secrets, and kube.api_keys'
	podNames                // this host's own pod, when doctor runs in one
	accountNames            // the hosts' ServiceAccount, default, and those bound here
	workloadNames           // the base's Deployment, and those accounts' names
	bindingNames            // the RoleBindings here
	clusterRoleRef          // cluster-admin, admin, edit, and the ClusterRoles bound here
	roleRef                 // the Roles bound here
)

// hostAccount is the hosts' ServiceAccount in deploy/kubernetes: not
// asked about (nor is doctor's own identity, when it is a ServiceAccount
// of the hosts' namespace: a host's, renamed).
const hostAccount = "nsys-cortex"

func (r hostRisk) String() string {
	res := r.resource
	if r.subresource != "" {
		res += "/" + r.subresource
	}
	if r.group != "" {
		res += "." + r.group
	}
	return r.verb + " " + res
}

// hostRisks: reading or writing the Secrets (a Secret written there can
// be API keys a host trusts); making a pod, or a workload whose pods a
// controller makes (the cluster's, or agent-sandbox's: any of which may
// mount them, or run as any ServiceAccount of the namespace), or changing
// one (a running pod's image can be changed; a debug container shares
// its pod's volumes); reaching into a host's pod; taking a token of, or
// acting as, a ServiceAccount of the namespace; pointing the hosts'
// Service elsewhere (its clients send their tokens); granting oneself
// any of that, or taking the hosts' grants away.
var hostRisks = func() []hostRisk {
	var r []hostRisk
	add := func(group, resource, subresource string, named nameKind, verbs ...string) {
		for _, v := range verbs {
			k := named
			if v == "create" && subresource == "" {
				k = anyName // what is not made yet has no name to grant
			}
			r = append(r, hostRisk{verb: v, group: group, resource: resource, subresource: subresource, named: k})
		}
	}
	// list and watch too: a grant limited to names answers a list or a
	// watch with a field selector on that name.
	add("", "secrets", "", secretNames, "get", "list", "watch", "create", "update", "patch", "delete")
	add("", "pods", "", podNames, "create", "update", "patch")
	for _, sub := range []string{"exec", "attach", "portforward", "proxy"} {
		add("", "pods", sub, podNames, "create", "get")
	}
	add("", "pods", "ephemeralcontainers", podNames, "update", "patch")
	add("", "replicationcontrollers", "", anyName, "create", "update", "patch")
	add("", "serviceaccounts", "token", accountNames, "create")
	add("", "serviceaccounts", "", accountNames, "impersonate")
	add("", "services", "", anyName, "update", "patch")
	add("", "services", "proxy", anyName, "create", "get")
	add("", "endpoints", "", anyName, "create", "update", "patch")
	add("discovery.k8s.io", "endpointslices", "", anyName, "create", "update", "patch")
	for _, w := range []string{"deployments", "replicasets", "statefulsets", "daemonsets"} {
		add("apps", w, "", workloadNames, "create", "update", "patch")
	}
	add("batch", "jobs", "", anyName, "create", "update", "patch")
	add("batch", "cronjobs", "", anyName, "create", "update", "patch")
	add("agents.x-k8s.io", "sandboxes", "", anyName, "create", "update", "patch")
	for _, w := range []string{"sandboxclaims", "sandboxtemplates", "sandboxwarmpools"} {
		add("extensions.agents.x-k8s.io", w, "", anyName, "create", "update", "patch")
	}
	add(rbacv1.GroupName, "rolebindings", "", bindingNames, "create", "update", "patch", "delete")
	add(rbacv1.GroupName, "roles", "", roleRef, "bind", "escalate", "update", "patch", "delete")
	add(rbacv1.GroupName, "clusterroles", "", clusterRoleRef, "bind", "escalate", "update", "patch")
	return r
}()

// maxSubjects bounds the subjects doctor asks about (each takes a review
// per hostRisk and name, about 150); more fail the item.
// A hosts' namespace kept to the hosts has none.
const maxSubjects = 16

// grantsWait bounds the check: its reviews, not the other items'.
const grantsWait = 30 * time.Second

// hostGrantsItem looks at whom the RoleBindings of the hosts' namespace
// grant anything, and asks the API server (LocalSubjectAccessReview,
// through a client of rc's at the API server's pace, not a host's:
// about 150 reviews a subject) whether any of them may do what hostRisks
// lists there. Not asked about: the hosts' ServiceAccount (hostsOwn).
// Grants that are no RoleBinding of the namespace (ClusterRoleBindings, a
// cloud's IAM, the nodes' kubelets) are not visible to a host that holds
// no cluster-wide grant; the detail says so. The item fails when it
// cannot look.
func hostGrantsItem(ctx context.Context, cl *Cluster, rc *rest.Config, namespace string) sandbox.CheckItem {
	it := sandbox.CheckItem{Name: "grants in the hosts' namespace " + namespace}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grantsWait)
	defer cancel()
	const unseen = "grants other than RoleBindings (ClusterRoleBindings, a cloud's IAM, the nodes' kubelets) are not visible here: kubectl get clusterrolebindings -o wide"
	byHand := fmt.Sprintf("or check who may read its Secrets by hand: kubectl -n %s get rolebindings -o wide", namespace)
	bindings, err := cl.Core.RbacV1().RoleBindings(namespace).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		it.Detail = fmt.Sprintf("not checked: the cluster does not serve RBAC's RoleBindings (it authorizes some other way): check who may read the Secrets of %s with its own tools", namespace)
		return it
	case apierrors.IsForbidden(err):
		it.Detail = fmt.Sprintf("not checked: this identity may not list RoleBindings in %s: grant it (deploy/kubernetes/rbac.yaml), %s", namespace, byHand)
		return it
	case err != nil:
		it.Detail = explain(err, "list", "rolebindings.rbac.authorization.k8s.io", namespace).Error()
		return it
	}
	self := ""
	if r, err := cl.Core.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		self = r.Status.UserInfo.Username
	}
	names := riskNames(bindings.Items, namespace)
	type subject struct {
		user       string
		groups     []string
		name, from string
	}
	var subjects []subject
	seen := map[string]bool{}
	own := 0
	for _, b := range bindings.Items {
		for _, sub := range b.Subjects {
			user, groups, name := subjectIdentity(sub, b.Namespace)
			switch {
			case hostsOwn(sub, user, namespace, self):
				own++
				continue
			case seen[name]:
				continue
			}
			seen[name] = true
			subjects = append(subjects, subject{user, groups, name, fmt.Sprintf("bound by RoleBinding %s to %s %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name)})
		}
	}
	var found []string
	if len(subjects) > maxSubjects {
		found = append(found, fmt.Sprintf("%d subjects, more than the %d doctor asks about (kubectl -n %s get rolebindings -o wide)", len(subjects), maxSubjects, namespace))
		subjects = subjects[:maxSubjects]
	}
	var reviews kubernetes.Interface = cl.Core
	if len(subjects) > 0 {
		rrc := rest.CopyConfig(rc)
		rrc.QPS, rrc.Burst, rrc.RateLimiter = 1000, 1000, nil
		if c, err := kubernetes.NewForConfig(rrc); err == nil {
			reviews = c
		}
	}
	results := make([][]string, len(subjects))
	errs := make([]error, len(subjects))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, s := range subjects {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = allowedRisks(ctx, reviews, namespace, s.user, s.groups, names)
		})
	}
	wg.Wait()
	for i, s := range subjects {
		switch err := errs[i]; {
		case apierrors.IsForbidden(err):
			it.Detail = fmt.Sprintf("not checked: this identity may not ask what %s may do in %s (create localsubjectaccessreviews there: deploy/kubernetes/rbac.yaml grants it), %s", s.name, namespace, byHand)
			return it
		case err != nil:
			it.Detail = fmt.Sprintf("asking what %s (%s) may do in %s: %v", s.name, s.from, namespace, err)
			return it
		case len(results[i]) > 0:
			found = append(found, fmt.Sprintf("%s, %s, may %s", s.name, s.from, strings.Join(results[i], ", ")))
		}
	}
	if len(found) > 0 {
		it.Detail = fmt.Sprintf("%s: whoever may do any of that reaches the signing key every agent trusts, the API keys, or the hosts themselves (keep the hosts' namespace to the hosts: docs/kube.md); %s",
			strings.Join(found, "; "), unseen)
		return it
	}
	it.OK, it.Detail = true, fmt.Sprintf("no RoleBinding of %s (%d) grants anyone but the hosts' ServiceAccount (%d bindings) its Secrets, pods, Service or identity; %s",
		namespace, len(bindings.Items), own, unseen)
	return it
}

// hostsOwn says whether subject sub of a RoleBinding, user as
// subjectIdentity names it, is the hosts' ServiceAccount in namespace:
// the base's name, or doctor's own identity (self) when that is a
// ServiceAccount there. Any other account there, and the group of all of
// them, are asked about: code that is not the hosts' may run as them.
func hostsOwn(sub rbacv1.Subject, user, namespace, self string) bool {
	return sub.Kind == rbacv1.ServiceAccountKind && strings.HasPrefix(user, "system:serviceaccount:"+namespace+":") &&
		(sub.Name == hostAccount || user == self)
}

// riskNames are the names each nameKind asks about.
func riskNames(bindings []rbacv1.RoleBinding, namespace string) map[nameKind][]string {
	n := map[nameKind][]string{
		secretNames:    {"nsys-cortex-signing-key", "nsys-cortex-api", "nsys-cortex-api-keys"},
		accountNames:   {hostAccount, "default"},
		workloadNames:  {hostAccount},
		clusterRoleRef: {"cluster-admin", "admin", "edit"},
	}
	if v := os.Getenv(EnvAPIKeys); v != "" {
		n[secretNames] = append(n[secretNames], v)
	}
	// In a host's pod, the pod's name (a grant on it lasts until the next
	// rollout, but lasts).
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if h, err := os.Hostname(); err == nil && h != "" {
			n[podNames] = append(n[podNames], h)
		}
	}
	for _, b := range bindings {
		n[bindingNames] = append(n[bindingNames], b.Name)
		switch b.RoleRef.Kind {
		case "Role":
			n[roleRef] = append(n[roleRef], b.RoleRef.Name)
		case "ClusterRole":
			n[clusterRoleRef] = append(n[clusterRoleRef], b.RoleRef.Name)
		}
		for _, sub := range b.Subjects {
			if sub.Kind == rbacv1.ServiceAccountKind && (sub.Namespace == "" || sub.Namespace == namespace) {
				n[accountNames] = append(n[accountNames], sub.Name)
				n[workloadNames] = append(n[workloadNames], sub.Name)
			}
		}
	}
	for k, v := range n {
		slices.Sort(v)
		n[k] = slices.Compact(v)
	}
	return n
}

// subjectIdentity is who subject sub of a RoleBinding in namespace ns is,
// as an access review asks it, and its name as a person reads it.
func subjectIdentity(sub rbacv1.Subject, ns string) (user string, groups []string, name string) {
	switch sub.Kind {
	case rbacv1.ServiceAccountKind:
		if sub.Namespace != "" {
			ns = sub.Namespace
		}
		return "system:serviceaccount:" + ns + ":" + sub.Name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			"ServiceAccount " + ns + "/" + sub.Name
	case rbacv1.GroupKind:
		return "", []string{sub.Name}, "group " + sub.Name
	}
	return sub.Name, []string{"system:authenticated"}, "user " + sub.Name
}

// allowedRisks asks, for each of hostRisks, whether user (in groups) may
// do it in namespace, of any object or of one of its names, and returns
// those allowed ("get secrets", or "get secrets/NAME" for a grant
// limited to names).
func allowedRisks(ctx context.Context, reviews kubernetes.Interface, namespace, user string, groups []string, names map[nameKind][]string) ([]string, error) {
	var allowed []string
	for _, r := range hostRisks {
		for _, name := range append([]string{""}, names[r.named]...) {
			rev, err := reviews.AuthorizationV1().LocalSubjectAccessReviews(namespace).Create(ctx, &authzv1.LocalSubjectAccessReview{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace},
				Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: slices.Clone(groups), ResourceAttributes: &authzv1.ResourceAttributes{
					Namespace: namespace, Verb: r.verb, Group: r.group, Resource: r.resource, Subresource: r.subresource, Name: name}},
			}, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			if rev.Status.Allowed {
				s := r.String()
				if name != "" {
					s += "/" + name
				}
				allowed = append(allowed, s)
				break
			}
		}
	}
	return allowed, nil
}
