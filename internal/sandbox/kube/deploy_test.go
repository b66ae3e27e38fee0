package kube

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// deployDir is the kustomize base that installs kube mode.
const deployDir = "../../../deploy/kubernetes"

// deployConfig is the namespaces deploy/kubernetes installs: the
// neurons' and the hosts'.
var deployConfig = Config{Namespace: "nsys-cortex", HostNamespace: "nsys-cortex-hosts"}

// deployObjects decodes every object of every file the kustomization
// lists, as the API server would (an unknown kind or field fails).
func deployObjects(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	var kust struct {
		Namespace    string   `json:"namespace"`
		Resources    []string `json:"resources"`
		Replacements []struct {
			Targets []struct {
				Select     map[string]string `json:"select"`
				FieldPaths []string          `json:"fieldPaths"`
			} `json:"targets"`
		} `json:"replacements"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	if kust.Namespace != "" {
		t.Errorf("the kustomization puts every object in namespace %q: the hosts' and the neurons' are two", kust.Namespace)
	}
	// The replacements that carry the two names pick their targets by
	// kind and name: one picked by its namespace would be moved again by
	// the other's, when a rename gives the hosts the neurons' old name or
	// the other way round.
	for _, r := range kust.Replacements {
		for _, tg := range r.Targets {
			if tg.Select["namespace"] != "" || tg.Select["kind"] == "" || slices.Contains(tg.FieldPaths, "metadata.namespace") && tg.Select["name"] == "" {
				t.Errorf("a replacement picks its targets by %v (fields %v): by kind and name, not by namespace", tg.Select, tg.FieldPaths)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			want = append(want, filepath.Base(f))
		}
	}
	if got := slices.Sorted(slices.Values(kust.Resources)); !slices.Equal(got, want) {
		t.Errorf("the kustomization lists %v; the directory has %v", got, want)
	}
	// Strict: a field the API does not know is an error, as kubectl's
	// server-side validation makes it.
	decode := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
	out := map[string][]runtime.Object{}
	for _, f := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, f))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if onlyComments(doc) {
				continue
			}
			obj, _, err := decode.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[f] = append(out[f], obj)
		}
	}
	return out
}

// onlyComments reports whether a YAML document holds nothing but
// comments and blank lines.
func onlyComments(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// The NetworkPolicies installed are the builder's (go test -update
// writes them).
func TestDeployNetworkPolicies(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString("# Made by kube.NetworkPolicies (go test ./internal/sandbox/kube -run TestDeployNetworkPolicies -update).\n")
	buf.WriteString("# Every connection of a neuron pod is denied but those in from Cortex's pods, of the hosts' namespace, on the agent port.\n")
	for i, np := range NetworkPolicies(deployConfig) {
		b, err := yaml.Marshal(np)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	path := filepath.Join(deployDir, "networkpolicies.yaml")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(have, buf.Bytes()) {
		t.Fatalf("%s is not what kube.NetworkPolicies makes (go test -run %s -update): %v\n%s", path, t.Name(), err, buf.Bytes())
	}
}

// What deploy/kubernetes installs holds to kube mode's rules: permissions
// in the namespace only and exactly the verbs the code calls; the host's
// pods hardened, probed on /healthz, labelled as the policies expect,
// and given the signing key from a Secret.
// apiKeysSecret is the Secret of the shared API keys in deploy/kubernetes.
const apiKeysSecret = "nsys-cortex-api-keys"

func TestDeployManifests(t *testing.T) {
	objs := deployObjects(t)
	neurons, hosts := deployConfig.Namespace, deployConfig.HostNamespace
	roles := map[string]*rbacv1.Role{}
	var dep *appsv1.Deployment
	namespaces := map[string]*corev1.Namespace{}
	var hostSA string
	var policy *admissionv1.ValidatingAdmissionPolicy
	var binding *admissionv1.ValidatingAdmissionPolicyBinding
	for f, list := range objs {
		for _, o := range list {
			// Where each object must be: what the neurons are made of and
			// the rights over it in theirs; the hosts and their Secrets
			// in the hosts'.
			want := hosts
			switch o := o.(type) {
			case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
				t.Errorf("%s: a cluster-wide grant", f)
			case *rbacv1.Role:
				roles[o.Namespace] = o
				want = o.Namespace
			case *rbacv1.RoleBinding:
				for _, sub := range o.Subjects {
					if sub.Kind != rbacv1.ServiceAccountKind || sub.Namespace != hosts || hostSA != "" && sub.Name != hostSA {
						t.Errorf("%s: RoleBinding %s/%s grants %+v, not the hosts' ServiceAccount", f, o.Namespace, o.Name, sub)
					}
					hostSA = sub.Name
				}
				want = o.Namespace
			case *networkingv1.NetworkPolicy:
				want = neurons
			case *appsv1.Deployment:
				dep = o
			case *corev1.Namespace:
				namespaces[o.Name] = o
				continue
			case *admissionv1.ValidatingAdmissionPolicy:
				policy = o
				continue
			case *admissionv1.ValidatingAdmissionPolicyBinding:
				binding = o
				continue
			}
			if m, ok := o.(interface{ GetNamespace() string }); ok && m.GetNamespace() != want {
				t.Errorf("%s: %T %s in namespace %q, want %q", f, o, o.(metav1.Object).GetName(), m.GetNamespace(), want)
			}
		}
	}
	if len(roles) != 2 || roles[neurons] == nil || roles[hosts] == nil || dep == nil || namespaces[neurons] == nil || namespaces[hosts] == nil {
		t.Fatalf("not a Role in each of %s and %s, a Deployment, and both Namespaces in %s", neurons, hosts, deployDir)
	}

	// The admission policy (test/kube's TestDeployedRoleWarmPool runs
	// it): bound, denying, to the two namespaces by their names (the
	// label the API server sets), failing closed, and trusting the
	// RoleBindings' ServiceAccount of the hosts' namespace, named in the
	// policy itself (a namespace's own RBAC may grant relabelling it).
	if policy == nil || binding == nil {
		t.Fatalf("no ValidatingAdmissionPolicy and binding in %s", deployDir)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("the admission policy fails open: %v", policy.Spec.FailurePolicy)
	}
	sel, err := metav1.LabelSelectorAsSelector(binding.Spec.MatchResources.NamespaceSelector)
	if binding.Spec.PolicyName != policy.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		err != nil || sel.Empty() || !sel.Matches(labels.Set{corev1.LabelMetadataName: neurons}) || !sel.Matches(labels.Set{corev1.LabelMetadataName: hosts}) ||
		sel.Matches(labels.Set{corev1.LabelMetadataName: "other"}) {
		t.Errorf("the admission policy's binding %+v does not deny in namespaces %s and %s alone: %v", binding.Spec, neurons, hosts, err)
	}
	vars := map[string]string{}
	for _, v := range policy.Spec.Variables {
		vars[v.Name] = v.Expression
	}
	if hostSA == "" || !strings.Contains(vars["trusted"], "'system:serviceaccount:' + variables.hosts + ':"+hostSA+"'") || vars["hosts"] != "'"+hosts+"'" {
		t.Errorf("the admission policy does not trust the host's ServiceAccount %q of namespace %s: %q, %q", hostSA, hosts, vars["trusted"], vars["hosts"])
	}
	// What each Role grants, in its namespace.
	wantNeurons := map[string][]string{
		"agents.x-k8s.io/sandboxes":                   {"create", "delete", "get", "list", "patch", "watch"},
		"extensions.agents.x-k8s.io/sandboxclaims":    {"create", "delete", "get", "list", "patch", "watch"},
		"extensions.agents.x-k8s.io/sandboxtemplates": {"create", "get", "update"},
		"extensions.agents.x-k8s.io/sandboxwarmpools": {"create", "get", "update"},
		"/pods":                   {"create", "delete", "get", "list", "watch"},
		"/persistentvolumeclaims": {"create", "delete", "get", "list", "watch"},
		"/configmaps":             {"create", "get"},
		// One ConfigMap by name: the network probe's verdict, rewritten.
		"/configmaps/" + ProbeConfigMap: {"update"},
	}
	wantHosts := map[string][]string{
		// One Secret by name: the shared API keys.
		"/secrets/" + apiKeysSecret: {"get", "update"},
		// The chat sessions' Secrets (kube.chat_sessions), which RBAC
		// cannot name before they are made.
		"/secrets": {"create", "delete", "get", "list", "patch"},
		// doctor: who else the RoleBindings there grant what reaches the
		// hosts' Secrets or identity.
		"rbac.authorization.k8s.io/rolebindings":         {"list"},
		"authorization.k8s.io/localsubjectaccessreviews": {"create"},
	}
	checkRole(t, roles[neurons], wantNeurons)
	checkRole(t, roles[hosts], wantHosts)
	checkHost(t, dep)
}

// checkRole checks that role grants exactly want (group/resource[/name]
// to its verbs, sorted).
func checkRole(t *testing.T, role *rbacv1.Role, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if len(r.ResourceNames) > 0 {
					for _, n := range r.ResourceNames {
						got[g+"/"+res+"/"+n] = append(got[g+"/"+res+"/"+n], r.Verbs...)
					}
					continue
				}
				got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
			}
		}
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 && (len(r.Resources) != 1 || r.Resources[0] != "secrets" && r.Resources[0] != "configmaps") {
			t.Errorf("an unexpected rule %+v", r)
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	if len(got) != len(want) {
		t.Errorf("the Role of %s grants %v, want %v", role.Namespace, got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("the Role of %s grants %s %v, want %v", role.Namespace, k, got[k], v)
		}
	}
}

// checkHost checks the hosts' Deployment: its pods hardened, probed,
// labelled as the neurons' NetworkPolicies expect, given the signing key
// from a Secret, and told the two namespaces.
func checkHost(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template
	if pod.Labels[LabelHost] != hostName || pod.Labels[LabelRole] != "" {
		t.Errorf("the host's pods are labelled %v: the neurons' policies take connections from %s=%s without %s", pod.Labels, LabelHost, hostName, LabelRole)
	}
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the host's pod security context: %+v", sc)
	}
	if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
		t.Error("service links are on")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	csc := c.SecurityContext
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || csc.Privileged != nil && *csc.Privileged {
		t.Errorf("the host's container security context: %+v", csc)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
			t.Errorf("the %s probe: %+v (GET /healthz answers without a token)", name, p)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["NSYS_CORTEX_MODE"].Value != Mode || env[EnvImage].Value == "" {
		t.Errorf("the host is not in kube mode: %+v", c.Env)
	}
	if env[EnvNamespace].Value != deployConfig.Namespace {
		t.Errorf("the host's neurons are in %s=%q, want %q", EnvNamespace, env[EnvNamespace].Value, deployConfig.Namespace)
	}
	if f := env[EnvHostNS].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("the host's own namespace is not its pod's: %s=%+v", EnvHostNS, env[EnvHostNS])
	}
	if tok := env["NSYS_CORTEX_API_TOKEN"]; tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil {
		t.Errorf("the API token is not from a Secret: %+v", tok)
	}
	if env[EnvAPIKeys].Value != apiKeysSecret {
		t.Errorf("the host's API keys: %s=%q, want the base's Secret %s", EnvAPIKeys, env[EnvAPIKeys].Value, apiKeysSecret)
	}
	if v, err := strconv.ParseBool(env["NSYS_CORTEX_LOG_CONSOLE"].Value); err != nil || !v {
		t.Errorf("the host's log and audit facts do not go to the cluster's logs: NSYS_CORTEX_LOG_CONSOLE=%q", env["NSYS_CORTEX_LOG_CONSOLE"].Value)
	}
	key := env[EnvSigningKey].Value
	mounted := false
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(key, m.MountPath+"/") && m.ReadOnly {
			for _, v := range pod.Spec.Volumes {
				mounted = mounted || v.Name == m.Name && v.Secret != nil
			}
		}
	}
	if !mounted {
		t.Errorf("the signing key %s is not on a read-only Secret volume", key)
	}
}
