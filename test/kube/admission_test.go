package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The policy's name, which its refusals carry.
const admissionPolicy = "nsys-cortex-neurons"

// applyAdmission installs deploy/kubernetes/admission.yaml as the
// administrator (its binding acts in the namespace nsys-cortex).
func applyAdmission(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range deployDocs(t, "admission.yaml") {
		var err error
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("admission.yaml: unexpected %T", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// deployDocs decodes the objects of deploy/kubernetes/file.
func deployDocs(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []any
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// controllerIdentity is rc as agent-sandbox's controller runs, the
// ServiceAccount its release installs (which the admission policy
// names).
func controllerIdentity(t *testing.T, admin kubernetes.Interface, rc *rest.Config) *rest.Config {
	t.Helper()
	return clusterAdminAs(t, admin, rc, "agent-sandbox-system", "agent-sandbox-controller")
}

// collectorIdentity is rc as the cluster's garbage collector runs (the
// controller manager's ServiceAccount for it), as which kubesim stands in
// for it and for a node: the admission policy lets the cluster's own
// identities, and no other but the hosts and the controller, let go of
// owners and finalizers and write pods' status.
func collectorIdentity(t *testing.T, admin kubernetes.Interface, rc *rest.Config) *rest.Config {
	t.Helper()
	return clusterAdminAs(t, admin, rc, "kube-system", "generic-garbage-collector")
}

// clusterAdminAs is rc as ServiceAccount sa of namespace ns (made, with
// the namespace where it is not there), bound to cluster-admin: what the
// admission policy asks of it is the test, not its Role.
func clusterAdminAs(t *testing.T, admin kubernetes.Interface, rc *rest.Config, ns, sa string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return as(rc, ns, sa)
}

// tenantIdentity is rc as someone the namespace's RBAC lets write what
// neurons and hosts are made of (Sandboxes, their claims, templates and
// pools, pods and their status, claims, ConfigMaps, Secrets, tokens),
// as an operator might grant a team: the identity the admission policy
// is there to stop.
func tenantIdentity(t *testing.T, admin kubernetes.Interface, rc *rest.Config, ns string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	const sa = "tenant"
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	verbs := []string{"get", "list", "create", "update", "patch"}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{sbv1.GroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: verbs},
		{APIGroups: []string{extv1.GroupVersion.Group}, Resources: []string{"sandboxclaims", "sandboxclaims/status", "sandboxtemplates", "sandboxwarmpools"}, Verbs: verbs},
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/ephemeralcontainers", "pods/status", "pods/resize", "persistentvolumeclaims", "configmaps", "secrets", "serviceaccounts/token"}, Verbs: verbs},
	}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return as(rc, ns, sa)
}

// dryRun is what each forgery is made with: the API server authorizes
// and admits it as it would the write, and keeps nothing.
var dryRun = []string{metav1.DryRunAll}

// byPolicy reports whether err is the admission policy's refusal (an
// RBAC refusal names no policy).
func byPolicy(err error) bool {
	return err != nil && strings.Contains(err.Error(), admissionPolicy) && strings.Contains(err.Error(), "may not")
}

// awaitPolicy waits until the API server enforces the admission policy
// just applied (it loads policies through an informer) and tenant's
// Role: a pod that agent-sandbox would adopt is refused to tenant by
// the policy.
func awaitPolicy(t *testing.T, tenant kubernetes.Interface, ns string) {
	t.Helper()
	pod := forgedPod(ns, "await-policy", map[string]string{sbv1.SandboxAdoptableLabel: "true"}, nil)
	waittest.For(t, 30*time.Second, "the admission policy to take effect", func() bool {
		_, err := tenant.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: dryRun})
		return byPolicy(err)
	})
}

// forgedPod is a pod that Pod Security's "restricted" profile admits
// (namespace.yaml sets it), so that what refuses a forgery is the policy.
func forgedPod(ns, name string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owners},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/mallory:1", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
}

// forgeries tries, as tenant, every write the admission policy forbids
// on the neurons m made (cold is one made without a claim, w1 one that
// a claim holds): each must be refused by the policy (RBAC lets tenant
// make it), and a pod, a claim, a Secret and ConfigMaps that are no
// neuron's or host's must still be allowed. Where the hosts have a
// namespace of their own, their token and Secrets there must be
// forbidden to tenant, and a grant there (as adminRC makes one) must
// make no pod with their key or as them; adminRC then makes a
// ServiceAccount of the hosts' name in the neurons', as a host of one
// namespace has, for the rules on it.
func forgeries(t *testing.T, adminRC, tenantRC *rest.Config, m *kube.Manager, cold, w1 string) {
	t.Helper()
	ctx := context.Background()
	ns := m.Cluster.Config.Namespace
	core := kubernetes.NewForConfigOrDie(tenantRC)
	ag, ext := cluster.Agents(tenantRC), cluster.Extensions(tenantRC)
	refused := func(what string, err error) {
		t.Helper()
		if !byPolicy(err) {
			t.Errorf("%s, as another identity: %v; want the admission policy's refusal", what, err)
		}
	}

	if hosts := m.Cluster.Config.Defaults().HostNamespace; hosts != ns {
		// The hosts' ServiceAccount and Secrets are in their namespace,
		// where this identity is granted nothing.
		_, err := core.CoreV1().ServiceAccounts(hosts).CreateToken(ctx, "nsys-cortex", &authv1.TokenRequest{}, metav1.CreateOptions{DryRun: dryRun})
		if !apierrors.IsForbidden(err) {
			t.Errorf("minting the hosts' token in their namespace %s, as another identity: %v; want it forbidden", hosts, err)
		}
		if _, err := core.CoreV1().Secrets(hosts).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing the hosts' Secrets in their namespace %s, as another identity: %v; want it forbidden", hosts, err)
		}
		// The policy acts in the hosts' namespace too, as a second layer:
		// a grant of pods there makes none that mounts the hosts' signing
		// key or runs as them.
		admin := kubernetes.NewForConfigOrDie(adminRC)
		left := kubernetes.NewForConfigOrDie(tenantIdentity(t, admin, adminRC, hosts))
		awaitPolicy(t, left, hosts) // and the grant: RBAC reads through a cache
		withKey, asHost := forgedPod(hosts, "with-key", nil, nil), forgedPod(hosts, "as-host", nil, nil)
		withKey.Spec.Volumes = []corev1.Volume{{Name: "k", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nsys-cortex-signing-key"}}}}
		asHost.Spec.ServiceAccountName = "nsys-cortex"
		for what, p := range map[string]*corev1.Pod{"the signing key": withKey, "the hosts' ServiceAccount": asHost} {
			_, err := left.CoreV1().Pods(hosts).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
			refused("making a pod in the hosts' namespace with "+what, err)
		}
		// A ServiceAccount of the hosts' name here, as a host of one
		// namespace has (kube.host_namespace unset): the policy's rules
		// for it are tried on it below.
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nsys-cortex"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	// A pod that is none of the forgeries below: allowed.
	if _, err := core.CoreV1().Pods(ns).Create(ctx, forgedPod(ns, "plain", map[string]string{"app": "mine"}, nil), metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Fatalf("a pod that names no neuron, as another identity: %v", err)
	}
	sbCold, err := ag.AgentsV1beta1().Sandboxes(ns).Get(ctx, kube.ObjectName(cold), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := core.CoreV1().Pods(ns).Get(ctx, kube.ObjectName(cold), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const nameHash = "agents.x-k8s.io/sandbox-name-hash"
	if pod.Labels[nameHash] == "" || pod.Labels[kube.LabelID] != cold {
		t.Fatalf("neuron %s's pod is labelled %v", cold, pod.Labels)
	}
	owner := []metav1.OwnerReference{{APIVersion: sbv1.GroupVersion.String(), Kind: "Sandbox", Name: sbCold.Name, UID: sbCold.UID, Controller: ptr.To(true)}}
	foreignOwner := []metav1.OwnerReference{owner[0]}
	foreignOwner[0].APIVersion = "x.example/v1"
	podWith := func(name string, f func(*corev1.Pod)) *corev1.Pod {
		p := forgedPod(ns, name, nil, nil)
		f(p)
		return p
	}
	volume := func(v corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: kube.ObjectName("next"), VolumeSource: v}}
		}
	}
	oneGi := corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}
	for what, p := range map[string]*corev1.Pod{
		// Pods agent-sandbox would adopt, or that name a neuron or a
		// Sandbox.
		"a pod any Sandbox may adopt":         forgedPod(ns, "forged", map[string]string{sbv1.SandboxAdoptableLabel: "true"}, nil),
		"a pod with a Sandbox's name hash":    forgedPod(ns, "forged", map[string]string{nameHash: pod.Labels[nameHash]}, nil),
		"a pod that names a neuron":           forgedPod(ns, "forged", map[string]string{kube.LabelID: cold}, nil),
		"a pod in the role of a neuron's":     forgedPod(ns, "forged", map[string]string{kube.LabelRole: "neuron"}, nil),
		"a pod with a label of agent-sandbox": forgedPod(ns, "forged", map[string]string{"agents.x-k8s.io/anything": "x"}, nil),
		"a pod a Sandbox owns":                forgedPod(ns, "forged", nil, owner),
		// The review's second round: a Sandbox's uid under another group
		// (agent-sandbox's controller compares uids), an annotation the
		// host read as the neuron's, and names the host looks pods up by.
		"a pod a Sandbox of another group owns":       forgedPod(ns, "forged", nil, foreignOwner),
		"a pod annotated as a neuron's":               podWith("forged", func(p *corev1.Pod) { p.Annotations = map[string]string{kube.LabelID: cold} }),
		"a pod named " + kube.ObjectName("stopped"):   forgedPod(ns, kube.ObjectName("stopped"), nil, nil),
		"a pod named " + kube.WarmPoolName + "-abcde": forgedPod(ns, kube.WarmPoolName+"-abcde", nil, nil),
		// Pods that would act as a host (its ServiceAccount, its label,
		// which the neurons' policies let in, its Secrets) or reach a
		// neuron's home; the third review's: Secrets in the environment,
		// and an ephemeral volume, whose claim the cluster's controller
		// would make as <pod>-<volume>, here home-n-next.
		"a pod as the hosts' ServiceAccount": podWith("as-host", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "nsys-cortex" }),
		"a pod labelled as a host":           forgedPod(ns, "like-host", map[string]string{"app.kubernetes.io/name": "nsys-cortex"}, nil),
		"a pod with the hosts' signing key":  podWith("with-key", volume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nsys-cortex-signing-key"}})),
		"a pod with a neuron's home": podWith("with-home", volume(corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-" + kube.ObjectName(cold)}})),
		"a pod with the hosts' signing key in its environment": podWith("with-env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "nsys-cortex-signing-key"}, Key: "signing.key"}}}}
		}),
		"a pod with the API token's Secret in its environment": podWith("with-env-from", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nsys-cortex-api"}}}}
		}),
		"a pod with an ephemeral volume (a claim of any name)": podWith("home", volume(corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: oneGi}}})),
	} {
		_, err := core.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
		refused("making "+what, err)
	}
	// The same pods made by the cluster's controllers for a workload
	// someone may make here (a StatefulSet n-squat's pod n-squat-0 takes
	// neuron squat-0's name; a Deployment's pod mounts a home): refused
	// too, while a workload's pod that looks like nothing of Cortex's,
	// and the hosts' own Deployment's pods in the hosts' namespace, are
	// made.
	sts := kubernetes.NewForConfigOrDie(as(adminRC, "kube-system", "statefulset-controller"))
	rs := kubernetes.NewForConfigOrDie(as(adminRC, "kube-system", "replicaset-controller"))
	for what, p := range map[string]*corev1.Pod{
		"a StatefulSet's pod named " + kube.ObjectName("squat-0"): forgedPod(ns, kube.ObjectName("squat-0"), map[string]string{"app": "squat"}, nil),
		"a Deployment's pod with a neuron's home": podWith("web-5d4f-x", volume(corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-" + kube.ObjectName(cold)}})),
		"a Deployment's pod as the hosts' ServiceAccount": podWith("web-5d4f-y", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "nsys-cortex" }),
	} {
		_, err := sts.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
		refused("the cluster's controller making "+what, err)
	}
	if _, err := sts.CoreV1().Pods(ns).Create(ctx, forgedPod(ns, "web-0", map[string]string{"app": "web"}, nil), metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("the cluster's controller making a StatefulSet's pod web-0, which looks like nothing of Cortex's: %v", err)
	}
	// A StatefulSet's claim templates: a claim under a neuron's home's
	// name (claim template home of StatefulSet n-squat), and one copied
	// from a home.
	home := "home-" + kube.ObjectName(cold)
	for what, c := range map[string]*corev1.PersistentVolumeClaim{
		"a claim named home-" + kube.ObjectName("squat-0"): {ObjectMeta: metav1.ObjectMeta{Name: "home-" + kube.ObjectName("squat-0"), Namespace: ns}, Spec: *oneGi.DeepCopy()},
		"a claim copied from " + home: {ObjectMeta: metav1.ObjectMeta{Name: "data-x-0", Namespace: ns}, Spec: func() corev1.PersistentVolumeClaimSpec {
			sp := *oneGi.DeepCopy()
			sp.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: home}
			return sp
		}()},
	} {
		_, err := sts.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{DryRun: dryRun})
		refused("the cluster's controller making "+what, err)
	}
	// Adoption: a ReplicaSet's controller taking a neuron's pod, a
	// StatefulSet's giving its home an owner; the pod's status, and the
	// volume binder's note on the home, are still the cluster's to write.
	adopt := `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"squat","uid":"0b5c2f1e-1111-4222-8333-444455556666","controller":true}]}}`
	_, err = rs.CoreV1().Pods(ns).Patch(ctx, kube.ObjectName(cold), types.MergePatchType, []byte(adopt), metav1.PatchOptions{DryRun: dryRun})
	refused("the cluster's controller adopting neuron "+cold+"'s pod", err)
	_, err = rs.CoreV1().Pods(ns).Patch(ctx, kube.ObjectName(cold), types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"squat"}}}`), metav1.PatchOptions{DryRun: dryRun})
	refused("the cluster's controller relabelling neuron "+cold+"'s pod", err)
	// A neuron's Sandbox's status written, or its home's owner renamed
	// (the garbage collector would take the home for an orphan), as the
	// garbage collector's identity, which may write anything. (pods/resize,
	// which the policy holds as it holds pods, cannot be tried here: the
	// API server refuses it for a pod on a node without support for it,
	// before admission.)
	gc := as(adminRC, "kube-system", "generic-garbage-collector")
	_, err = cluster.Agents(gc).AgentsV1beta1().Sandboxes(ns).Patch(ctx, kube.ObjectName(cold), types.MergePatchType,
		[]byte(`{"status":{"podIPs":["10.9.9.9"]}}`), metav1.PatchOptions{DryRun: dryRun}, "status")
	refused("the cluster's garbage collector writing neuron "+cold+"'s Sandbox's status", err)
	if c, err := kubernetes.NewForConfigOrDie(gc).CoreV1().PersistentVolumeClaims(ns).Get(ctx, home, metav1.GetOptions{}); err != nil || len(c.OwnerReferences) == 0 {
		t.Errorf("neuron %s's home, read as the garbage collector: %v (owners %v)", cold, err, c)
	} else {
		c.OwnerReferences[0].Name += "-gone"
		_, err := kubernetes.NewForConfigOrDie(gc).CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{DryRun: dryRun})
		refused("the cluster's garbage collector renaming the owner of neuron "+cold+"'s home", err)
	}
	nodes := kubernetes.NewForConfigOrDie(as(adminRC, "kube-system", "node-controller"))
	if _, err := nodes.CoreV1().Pods(ns).Patch(ctx, kube.ObjectName(cold), types.MergePatchType, []byte(`{"status":{"message":"node unreachable"}}`),
		metav1.PatchOptions{DryRun: dryRun}, "status"); err != nil {
		t.Errorf("the cluster's node controller writing neuron %s's pod's status: %v", cold, err)
	}
	binder := kubernetes.NewForConfigOrDie(as(adminRC, "kube-system", "persistent-volume-binder"))
	if c, err := binder.CoreV1().PersistentVolumeClaims(ns).Get(ctx, home, metav1.GetOptions{}); err != nil {
		t.Errorf("the volume binder reading neuron %s's home: %v", cold, err)
	} else {
		owned := c.DeepCopy()
		owned.OwnerReferences = append(owned.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "n-squat", UID: "0b5c2f1e-1111-4222-8333-444455556667"})
		_, err := binder.CoreV1().PersistentVolumeClaims(ns).Update(ctx, owned, metav1.UpdateOptions{DryRun: dryRun})
		refused("the cluster's controller giving neuron "+cold+"'s home an owner", err)
		metav1.SetMetaDataAnnotation(&c.ObjectMeta, "pv.kubernetes.io/bind-completed", "yes")
		if _, err := binder.CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("the volume binder noting neuron %s's home bound: %v", cold, err)
		}
	}
	if hosts := m.Cluster.Config.Defaults().HostNamespace; hosts != ns {
		p := forgedPod(hosts, "nsys-cortex-7c9d-z", map[string]string{"app.kubernetes.io/name": "nsys-cortex"}, nil)
		p.Spec.ServiceAccountName = "nsys-cortex"
		p.Spec.Volumes = []corev1.Volume{{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nsys-cortex-signing-key"}}}}
		if _, err := rs.CoreV1().Pods(hosts).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("the cluster's controller making a pod of the hosts' Deployment in %s: %v", hosts, err)
		}
		// A neuron's marks are refused there too (where an operator keeps
		// hosts and neurons in one namespace, that is the neurons').
		_, err := sts.CoreV1().Pods(hosts).Create(ctx, forgedPod(hosts, kube.ObjectName("squat-0"), nil, nil), metav1.CreateOptions{DryRun: dryRun})
		refused("the cluster's controller making a pod named "+kube.ObjectName("squat-0")+" in the hosts' namespace", err)
	}
	// The hosts' token, minted; the trust key and the network's verdict.
	_, err = core.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nsys-cortex", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{DryRun: dryRun})
	refused("minting a token of the hosts' ServiceAccount", err)
	_, err = core.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "host-token", Namespace: ns,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "nsys-cortex"}}, Type: corev1.SecretTypeServiceAccountToken}, metav1.CreateOptions{DryRun: dryRun})
	refused("making a token Secret of the hosts' ServiceAccount", err)
	if _, err := core.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}}, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Fatalf("a Secret of one's own, as another identity: %v", err)
	}
	if m.Cluster.Config.Defaults().HostNamespace != ns {
		// The hosts' Secrets' names, planted where the neurons are (a
		// command given kube.namespace alone would read keys there).
		_, err = core.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "nsys-cortex-api-keys", Namespace: ns}}, metav1.CreateOptions{DryRun: dryRun})
		refused("making a Secret of the hosts' name in the neurons' namespace", err)
	}
	// (The trust ConfigMap is immutable: it can only be made again.)
	for _, name := range []string{m.Cluster.Config.Defaults().TrustConfigMap, kube.ProbeConfigMap} {
		_, err = core.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: ns}}, metav1.CreateOptions{DryRun: dryRun})
		if err != nil {
			t.Fatalf("a ConfigMap of one's own, as another identity: %v", err)
		}
		_, err = core.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{DryRun: dryRun})
		refused("making ConfigMap "+name, err)
	}

	// Homes: one made ahead under a neuron's name, or one agent-sandbox
	// would adopt; a neuron's, taken from its Sandbox.
	pvc := func(name string, labels map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: *oneGi.DeepCopy()}
	}
	if _, err := core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc("data", nil), metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Fatalf("a claim that is no neuron's home, as another identity: %v", err)
	}
	_, err = core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc("home-"+kube.ObjectName("next"), nil), metav1.CreateOptions{DryRun: dryRun})
	refused("making a neuron's home ahead of it", err)
	_, err = core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc("mine", map[string]string{sbv1.SandboxAdoptableLabel: "true"}), metav1.CreateOptions{DryRun: dryRun})
	refused("making a claim any Sandbox may adopt", err)
	clone := pvc("clone", nil)
	clone.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "home-" + kube.ObjectName(cold)}
	_, err = core.CoreV1().PersistentVolumeClaims(ns).Create(ctx, clone, metav1.CreateOptions{DryRun: dryRun})
	refused("cloning a neuron's home", err)
	_, err = core.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "home-"+kube.ObjectName(cold), types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{DryRun: dryRun})
	refused("taking a neuron's home from its Sandbox", err)

	// The neuron's running pod: its image, its labels, its annotations.
	swapped := pod.DeepCopy()
	swapped.Spec.Containers[0].Image = "registry.example/mallory:1"
	_, err = core.CoreV1().Pods(ns).Update(ctx, swapped, metav1.UpdateOptions{DryRun: dryRun})
	refused("changing a neuron pod's image", err)
	moved := pod.DeepCopy()
	moved.Status.PodIP, moved.Status.PodIPs = "127.66.6.6", []corev1.PodIP{{IP: "127.66.6.6"}}
	_, err = core.CoreV1().Pods(ns).UpdateStatus(ctx, moved, metav1.UpdateOptions{DryRun: dryRun})
	refused("moving a neuron pod's address through its status (the host dials it)", err)
	relabelled := pod.DeepCopy()
	relabelled.Labels[kube.LabelID] = "other"
	_, err = core.CoreV1().Pods(ns).UpdateStatus(ctx, relabelled, metav1.UpdateOptions{DryRun: dryRun})
	refused("relabelling a neuron's pod through its status", err)
	debug := pod.DeepCopy()
	debug.Spec.EphemeralContainers = append(debug.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "peek", Image: "registry.example/mallory:1", VolumeMounts: pod.Spec.Containers[0].VolumeMounts}})
	_, err = core.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod.Name, debug, metav1.UpdateOptions{DryRun: dryRun})
	refused("adding a container to a neuron's pod", err)
	for what, patch := range map[string]string{
		"taking a neuron pod's id label away": fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, kube.LabelID),
		"annotating a neuron's pod":           `{"metadata":{"annotations":{"neuron.nsys-cortex/id":"other"}}}`,
	} {
		_, err := core.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
		refused(what, err)
	}

	// Sandboxes: the review's forgery (a Sandbox named as a claim, the
	// claim its controller, which agent-sandbox's claim controller would
	// give the claim), any other, and changes to a neuron's.
	claim, err := ext.ExtensionsV1beta1().SandboxClaims(ns).Get(ctx, kube.ObjectName(w1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns,
		Labels:          map[string]string{extv1.SandboxIDLabel: string(claim.UID)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true)}}},
		Spec: sbCold.Spec}
	_, err = ag.AgentsV1beta1().Sandboxes(ns).Create(ctx, forged, metav1.CreateOptions{DryRun: dryRun})
	refused("making a Sandbox a claim owns", err)
	forged.OwnerReferences, forged.Labels, forged.Name = nil, map[string]string{kube.LabelID: "x"}, kube.ObjectName("x")
	_, err = ag.AgentsV1beta1().Sandboxes(ns).Create(ctx, forged, metav1.CreateOptions{DryRun: dryRun})
	refused("making a Sandbox", err)
	for what, patch := range map[string]string{
		"changing a neuron's Sandbox's image":    `{"spec":{"podTemplate":{"spec":{"containers":[{"name":"agent","image":"registry.example/mallory:1"}]}}}}`,
		"labelling a Sandbox with a claim's uid": fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, extv1.SandboxIDLabel, claim.UID),
		"adding a finalizer to a Sandbox":        `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"giving a Sandbox an owner":              fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":"SandboxClaim","name":%q,"uid":%q,"controller":true}]}}`, extv1.GroupVersion, claim.Name, claim.UID),
	} {
		_, err := ag.AgentsV1beta1().Sandboxes(ns).Patch(ctx, sbCold.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dryRun})
		refused(what, err)
	}

	// A claimed neuron's Sandbox let go by its claim, which a wipe would
	// then leave running (the review's second round): only the garbage
	// collector lets go of owners.
	held, err := ag.AgentsV1beta1().Sandboxes(ns).Get(ctx, kube.Adopted(claim), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.OwnerReferences = nil
	_, err = ag.AgentsV1beta1().Sandboxes(ns).Update(ctx, held, metav1.UpdateOptions{DryRun: dryRun})
	refused("taking a claimed Sandbox from its claim", err)

	claimed := claim.DeepCopy()
	claimed.Status.SandboxStatus.Name = "bogus"
	_, err = ext.ExtensionsV1beta1().SandboxClaims(ns).UpdateStatus(ctx, claimed, metav1.UpdateOptions{DryRun: dryRun})
	refused("pointing a claim's status elsewhere", err)

	// Claims, the template and the warm pool.
	_, err = ext.ExtensionsV1beta1().SandboxClaims(ns).Create(ctx, &extv1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: kube.ObjectName("y"), Namespace: ns},
		Spec: claim.Spec}, metav1.CreateOptions{DryRun: dryRun})
	refused("making a claim", err)
	_, err = ext.ExtensionsV1beta1().SandboxTemplates(ns).Patch(ctx, kube.TemplateName, types.MergePatchType,
		[]byte(`{"spec":{"podTemplate":{"spec":{"containers":[{"name":"agent","image":"registry.example/mallory:1"}]}}}}`), metav1.PatchOptions{DryRun: dryRun})
	refused("changing the warm pool's template", err)
	_, err = ext.ExtensionsV1beta1().SandboxWarmPools(ns).Patch(ctx, kube.WarmPoolName, types.MergePatchType, []byte(`{"spec":{"replicas":50}}`), metav1.PatchOptions{DryRun: dryRun})
	refused("resizing the warm pool", err)
}
