package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// TestDeployKustomized: deploy/kubernetes as kustomize builds it (its
// library, of which kubectl bundles a version for apply -k), as shipped and with its two
// namespaces renamed the way its kustomization says to. Each build must
// put every namespaced object in the namespace it belongs to and name
// the other namespace wherever it must, and a real API server must take
// all of it (its validation compiles the admission policy's CEL). Then
// the policy, bound under those names, must refuse a tenant's Sandbox
// in the neurons' namespace and let the hosts' ServiceAccount, from the
// hosts' namespace, make one; and hold in the hosts' namespace too.
//
// "swapped" gives the neurons the hosts' old name and the hosts the
// neurons': every object moves, and a replacement that picked its
// targets by namespace would move one twice (the kustomization's rule).
// "renamed" gives both new names: a name left behind in any object
// would show.
func TestDeployKustomized(t *testing.T) {
	for _, c := range []struct{ name, neurons, hosts string }{
		{"shipped", deployNeurons, deployHosts},
		{"swapped", deployHosts, deployNeurons},
		{"renamed", "team-neurons", "team-hosts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := kustomized(t, c.neurons, c.hosts)
			checkPlaced(t, objs, c.neurons, c.hosts)
			if c.name == "renamed" {
				// The other cases' names are each other's: only here
				// does a name left behind show in the output itself.
				for _, o := range objs {
					leftBehind(t, o)
				}
			}
			applyKustomized(t, objs, c.neurons, c.hosts)
		})
	}
}

// leftBehind fails t for each value of o that names a namespace of the
// base: the hosts' old name anywhere; the neurons', nsys-cortex, which
// is also the hosts' ServiceAccount's and the app's name, as any value
// but a name or those labels.
func leftBehind(t *testing.T, o runtime.Object) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(path, key string, v any)
	walk = func(path, key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(path+"."+k, k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), key, e)
			}
		case string:
			names := key == "name" || key == "serviceAccountName" || key == "app.kubernetes.io/name" || key == "app.kubernetes.io/managed-by"
			if strings.Contains(v, deployHosts) || v == deployNeurons && !names {
				t.Errorf("%s: %s is %q, a namespace of the base", objName(o), path, v)
			}
		}
	}
	walk("", "", u)
}

// kustomized builds deploy/kubernetes, in memory, with its Namespaces
// named neurons and hosts, changed where the kustomization says to:
// in namespace.yaml and in the sources of its replacements.
func kustomized(t *testing.T, neurons, hosts string) []runtime.Object {
	t.Helper()
	rename := map[string]string{deployNeurons: neurons, deployHosts: hosts}
	const dir = "/deploy"
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/kubernetes: %v %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Base(f) {
		case "namespace.yaml":
			b = renameNamespaces(t, b, rename)
		case "kustomization.yaml":
			b = renameSources(t, b, rename)
		}
		if err := fs.WriteFile(filepath.Join(dir, filepath.Base(f)), b); err != nil {
			t.Fatal(err)
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes (neurons %s, hosts %s): %v", neurons, hosts, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	// Strict, as the API server's field validation is.
	decode := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := decode.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("the build's output: %v\n%s", err, doc)
		}
		objs = append(objs, obj)
	}
}

// renameNamespaces renames the Namespaces of namespace.yaml.
func renameNamespaces(t *testing.T, b []byte, rename map[string]string) []byte {
	t.Helper()
	var out [][]byte
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var ns corev1.Namespace
		if err := yaml.UnmarshalStrict(doc, &ns); err != nil {
			t.Fatalf("namespace.yaml: %v", err)
		}
		to, ok := rename[ns.Name]
		if !ok {
			t.Fatalf("namespace.yaml: a Namespace %q", ns.Name)
		}
		ns.Name = to
		doc, err := yaml.Marshal(&ns)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, doc)
	}
	if len(out) != len(rename) {
		t.Fatalf("namespace.yaml: %d Namespaces, want %d", len(out), len(rename))
	}
	return bytes.Join(out, []byte("---\n"))
}

// renameSources renames the Namespaces the kustomization's replacements
// take their values from.
func renameSources(t *testing.T, b []byte, rename map[string]string) []byte {
	t.Helper()
	var kust map[string]any
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	reps, _ := kust["replacements"].([]any)
	for _, r := range reps {
		src, _ := r.(map[string]any)["source"].(map[string]any)
		if src["kind"] != "Namespace" {
			continue
		}
		name, _ := src["name"].(string)
		to, ok := rename[name]
		if !ok {
			t.Fatalf("kustomization.yaml: a replacement from Namespace %q", name)
		}
		src["name"], seen[name] = to, true
	}
	if len(seen) != len(rename) {
		t.Fatalf("kustomization.yaml: replacements from %v, want one from each of %v", seen, rename)
	}
	b, err := yaml.Marshal(kust)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func objName(o runtime.Object) string {
	m, err := metaOf(o)
	if err != nil {
		return fmt.Sprintf("%T", o)
	}
	return fmt.Sprintf("%T %s/%s", o, m.GetNamespace(), m.GetName())
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

// checkPlaced holds the build to where each object belongs, and to the
// names it must carry of the other namespace.
func checkPlaced(t *testing.T, objs []runtime.Object, neurons, hosts string) {
	t.Helper()
	// Every namespaced object of the base, by kind and name: an object
	// added to the base and missing here fails, so that its namespace
	// is thought about.
	where := map[string]string{
		"*v1.ServiceAccount nsys-cortex":        hosts,
		"*v1.Role nsys-cortex":                  neurons,
		"*v1.RoleBinding nsys-cortex":           neurons,
		"*v1.Role nsys-cortex-host":             hosts,
		"*v1.RoleBinding nsys-cortex-host":      hosts,
		"*v1.Secret nsys-cortex-api-keys":       hosts,
		"*v1.Deployment nsys-cortex":            hosts,
		"*v1.Service nsys-cortex":               hosts,
		"*v1.NetworkPolicy neurons-deny-all":    neurons,
		"*v1.NetworkPolicy neurons-from-cortex": neurons,
		// Cluster-wide.
		"*v1.ValidatingAdmissionPolicy nsys-cortex-neurons":        "",
		"*v1.ValidatingAdmissionPolicyBinding nsys-cortex-neurons": "",
	}
	seen := map[string]bool{}
	var namespaces []string
	for _, o := range objs {
		m, err := metaOf(o)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%T %s", o, m.GetName())
		switch o := o.(type) {
		case *corev1.Namespace:
			namespaces = append(namespaces, o.Name)
			continue
		case *admissionv1.ValidatingAdmissionPolicy:
			want := "'" + hosts + "'"
			if i := slices.IndexFunc(o.Spec.Variables, func(v admissionv1.Variable) bool { return v.Name == "hosts" }); i < 0 || o.Spec.Variables[i].Expression != want {
				t.Errorf("the admission policy's hosts variable: %+v, want %s", o.Spec.Variables, want)
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			sel := o.Spec.MatchResources.NamespaceSelector
			if sel == nil || len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 1 || !slices.Equal(sel.MatchExpressions[0].Values, []string{neurons, hosts}) {
				t.Errorf("the admission policy's binding acts in %+v, want the namespaces %s and %s", sel, neurons, hosts)
			}
		case *rbacv1.RoleBinding:
			for _, s := range o.Subjects {
				if s.Namespace != hosts {
					t.Errorf("RoleBinding %s binds %s of namespace %q, want %q", o.Name, s.Name, s.Namespace, hosts)
				}
			}
		case *appsv1.Deployment:
			var env []corev1.EnvVar
			for _, c := range o.Spec.Template.Spec.Containers {
				if c.Name == "serve" {
					env = c.Env
				}
			}
			if i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "NSYS_CORTEX_KUBE_NAMESPACE" }); i < 0 || env[i].Value != neurons {
				t.Errorf("the hosts' NSYS_CORTEX_KUBE_NAMESPACE: %+v, want %s", env, neurons)
			}
		case *networkingv1.NetworkPolicy:
			peers := 0
			for _, in := range o.Spec.Ingress {
				for _, p := range in.From {
					if peers++; p.NamespaceSelector == nil || p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != hosts {
						t.Errorf("NetworkPolicy %s takes connections from namespaces %+v, want %s's alone", o.Name, p.NamespaceSelector, hosts)
					}
				}
			}
			// An ingress rule with no peer takes connections from
			// everywhere.
			if o.Name == "neurons-from-cortex" && (peers == 0 || len(o.Spec.Ingress) != 1) {
				t.Errorf("NetworkPolicy %s: ingress %+v, want one rule, from the hosts", o.Name, o.Spec.Ingress)
			}
		}
		want, ok := where[key]
		switch {
		case !ok:
			t.Errorf("%s: not an object this test places (add it to the table)", objName(o))
		case m.GetNamespace() != want:
			t.Errorf("%s is in namespace %q, want %q", key, m.GetNamespace(), want)
		}
		seen[key] = true
	}
	for key := range where {
		if !seen[key] {
			t.Errorf("the build has no %s", key)
		}
	}
	if slices.Sort(namespaces); !slices.Equal(namespaces, slices.Sorted(slices.Values([]string{neurons, hosts}))) {
		t.Errorf("the build makes the Namespaces %v, want %s and %s", namespaces, neurons, hosts)
	}
}

// applyKustomized creates the build's objects on a real API server, as
// its administrator, and tries the admission policy under its names.
func applyKustomized(t *testing.T, objs []runtime.Object, neurons, hosts string) {
	t.Helper()
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, RBAC: true, Quiet: true})
	admin := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	// The Namespaces first: everything else is made in them.
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, func(a, b runtime.Object) int {
		_, na := a.(*corev1.Namespace)
		_, nb := b.(*corev1.Namespace)
		switch {
		case na && !nb:
			return -1
		case nb && !na:
			return 1
		}
		return 0
	})
	co := metav1.CreateOptions{FieldValidation: "Strict"}
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			// With the ServiceAccount a cluster's controller would make
			// in it (pods are refused without one).
			if _, err = admin.CoreV1().Namespaces().Create(ctx, o, co); err == nil {
				_, err = admin.CoreV1().ServiceAccounts(o.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, co)
			}
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, co)
		case *corev1.Secret:
			_, err = admin.CoreV1().Secrets(o.Namespace).Create(ctx, o, co)
		case *corev1.Service:
			_, err = admin.CoreV1().Services(o.Namespace).Create(ctx, o, co)
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, co)
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, co)
		case *appsv1.Deployment:
			_, err = admin.AppsV1().Deployments(o.Namespace).Create(ctx, o, co)
		case *networkingv1.NetworkPolicy:
			_, err = admin.NetworkingV1().NetworkPolicies(o.Namespace).Create(ctx, o, co)
		case *admissionv1.ValidatingAdmissionPolicy:
			// Its expressions are compiled here: one that does not
			// compile is refused.
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, co)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, co)
		default:
			t.Fatalf("the build has a %T this test does not apply", obj)
		}
		if err != nil {
			t.Fatalf("applying %s: %v", objName(obj), err)
		}
	}

	// The policy acts in the neurons' namespace: a tenant there, whom
	// RBAC lets write Sandboxes, may not make one; the hosts' identity,
	// bound by the build's RoleBinding from the hosts' namespace, may.
	tenant := tenantIdentity(t, admin, rc, neurons)
	awaitPolicy(t, kubernetes.NewForConfigOrDie(tenant), neurons)
	host := as(rc, hosts, "nsys-cortex")
	awaitGrant(t, kubernetes.NewForConfigOrDie(host), neurons)
	sb := &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "n-kustomized", Namespace: neurons},
		Spec: sbv1.SandboxSpec{SandboxBlueprint: sbv1.SandboxBlueprint{PodTemplate: sbv1.PodTemplate{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/nsys-cortex-neuron:1"}}}}}}}
	if _, err := cluster.Agents(tenant).AgentsV1beta1().Sandboxes(neurons).Create(ctx, sb, metav1.CreateOptions{DryRun: dryRun}); !byPolicy(err) {
		t.Errorf("a tenant of %s making a Sandbox: %v, want it refused by %s", neurons, err, admissionPolicy)
	}
	if _, err := cluster.Agents(host).AgentsV1beta1().Sandboxes(neurons).Create(ctx, sb, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("the hosts' ServiceAccount of %s making a Sandbox in %s: %v", hosts, neurons, err)
	}
	// The hosts' own Role, in theirs: the API keys' Secret is theirs to
	// read.
	const keys = "nsys-cortex-api-keys"
	hc := kubernetes.NewForConfigOrDie(host)
	waittest.For(t, 10*time.Second, "the hosts' Role in "+hosts+" to take effect", func() bool {
		_, err := hc.CoreV1().Secrets(hosts).Get(ctx, keys, metav1.GetOptions{})
		return err == nil
	})
	// The policy in the hosts' namespace, and its hosts variable: a
	// tenant there may make Secrets named as Cortex's (operators make
	// theirs) but no pod that mounts one; in the neurons' namespace a
	// tenant may make no such Secret.
	inHosts := kubernetes.NewForConfigOrDie(tenantIdentity(t, admin, rc, hosts))
	awaitPolicy(t, inHosts, hosts)
	pod := forgedPod(hosts, "mounts-keys", nil, nil)
	pod.Spec.Volumes = []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: keys}}}}
	if _, err := inHosts.CoreV1().Pods(hosts).Create(ctx, pod, metav1.CreateOptions{DryRun: dryRun}); !byPolicy(err) {
		t.Errorf("a tenant of %s making a pod that mounts %s: %v, want it refused by %s", hosts, keys, err, admissionPolicy)
	}
	named := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "nsys-cortex-operator"}}
	if _, err := inHosts.CoreV1().Secrets(hosts).Create(ctx, named, metav1.CreateOptions{DryRun: dryRun}); err != nil {
		t.Errorf("a tenant of %s making Secret %s there: %v", hosts, named.Name, err)
	}
	if _, err := kubernetes.NewForConfigOrDie(tenant).CoreV1().Secrets(neurons).Create(ctx, named, metav1.CreateOptions{DryRun: dryRun}); !byPolicy(err) {
		t.Errorf("a tenant of %s making Secret %s there: %v, want it refused by %s", neurons, named.Name, err, admissionPolicy)
	}
	// The same by a generated name: the policy reads the name made.
	generated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "nsys-cortex-"}}
	if _, err := kubernetes.NewForConfigOrDie(tenant).CoreV1().Secrets(neurons).Create(ctx, generated, metav1.CreateOptions{DryRun: dryRun}); !byPolicy(err) {
		t.Errorf("a tenant of %s making a Secret named nsys-cortex-<random> there: %v, want it refused by %s", neurons, err, admissionPolicy)
	}
	trusted := kubernetes.NewForConfigOrDie(controllerIdentity(t, admin, rc))
	awaitGrant(t, trusted, neurons)
	podSecurity(t, trusted, objs, neurons, hosts)
}

// podSecurity: Pod Security's "restricted" profile, which namespace.yaml
// sets on both namespaces, admits every pod Cortex makes (a neuron's, as
// a Sandbox's template or a pod of its own; the network probe's two; the
// hosts' Deployment's), and refuses one that is not restricted. Asked
// of the API server as an identity the admission policy trusts (admin),
// so that Pod Security is what answers.
func podSecurity(t *testing.T, admin kubernetes.Interface, objs []runtime.Object, neurons, hosts string) {
	t.Helper()
	ctx := context.Background()
	cfg := kube.Config{Namespace: neurons, HostNamespace: hosts, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	n := kube.Neuron{ID: "restricted", Env: []string{"A=b"}, Limits: sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 1}}
	own, _, err := kube.Fallback(cfg, n)
	if err != nil {
		t.Fatal(err)
	}
	egress := n
	egress.Egress = []string{"example.com"}
	withEgress, _, err := kube.Fallback(cfg, egress)
	if err != nil {
		t.Fatal(err)
	}
	template := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "as-template"}, Spec: kube.PodSpec(cfg, n, "home-restricted")}
	pods := map[string]*corev1.Pod{
		"a neuron's pod": own, "a neuron's pod with egress": withEgress, "a Sandbox's pod": template,
		"the network probe's pod": kube.ProbePod(cfg, "probe"), "the network probe's control": kube.ControlPod(cfg, "control"),
	}
	for what, p := range pods {
		p.Namespace = neurons
		if _, err := admin.CoreV1().Pods(neurons).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("%s in %s, under Pod Security: %v", what, neurons, err)
		}
	}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			p := &corev1.Pod{ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(), Spec: *d.Spec.Template.Spec.DeepCopy()}
			p.Name, p.Namespace = "host", hosts
			if _, err := admin.CoreV1().Pods(hosts).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun}); err != nil {
				t.Errorf("the hosts' pod in %s, under Pod Security: %v", hosts, err)
			}
		}
	}
	for _, ns := range []string{neurons, hosts} {
		p := forgedPod(ns, "on-the-node", nil, nil)
		p.Spec.HostPID = true
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("a pod in the node's process namespace in %s: %v, want Pod Security's refusal", ns, err)
		}
	}
}
