package kube

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares obj as YAML with testdata/name (go test -update
// rewrites it).
func golden(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from what the builder makes now (go test -run %s -update rewrites it):\n%s", path, t.Name(), got)
	}
}

var testConfig = Config{Image: "registry.example/nsys-cortex-neuron:1", RuntimeClass: "gvisor", StorageClass: "fast"}

var testNeuron = Neuron{
	ID:       "web-1",
	Labels:   labels.Set{"team": "a", "neuron.nsys-cortex/id": "forged", "app.kubernetes.io/managed-by": "someone", "app.kubernetes.io/name": "nsys-cortex"},
	Env:      []string{"LANG=C.UTF-8", "FOO=bar"},
	Limits:   sandbox.Limits{CPUs: 1.5, MemoryBytes: 512 << 20, DiskBytes: 4 << 30},
	Deadline: ptrTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)), Timeout: 90 * time.Minute,
	// A pin: a SHA-256 in hex, as podtoken.Fingerprint writes one.
	TrustKeySHA256: "8b1a8b3b0ca29e01db3a2a2bbb5d9c1b0e3d6f6a6b11b6e9e2a5e19e5d6a2c4f",
}

func ptrTime(t time.Time) *time.Time { return &t }

// The builders' objects, field by field, against golden files that a
// reviewer reads as the manifests the cluster gets.
func TestObjectsGolden(t *testing.T) {
	sb, err := Sandbox(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sandbox.yaml", sb)
	pod, pvc, err := Fallback(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "fallback-pod.yaml", pod)
	golden(t, "fallback-pvc.yaml", pvc)
	minimal, err := Sandbox(Config{Image: "img"}, Neuron{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sandbox-minimal.yaml", minimal)
	golden(t, "networkpolicies.yaml", NetworkPolicies(testConfig))
	egressN := testNeuron
	egressN.Egress = []string{"api.example.com:443", "*.pypi.org"}
	sbE, err := Sandbox(testConfig, egressN)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sandbox-egress.yaml", sbE)
	podE, _, err := Fallback(testConfig, egressN)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "fallback-pod-egress.yaml", podE)
	// Secrets: what makeSecrets made, fixed here (its placeholders, its
	// authority and its sealing are new at every create).
	egressN.Secrets = &neuronSecrets{Env: []string{"API_KEY=cortex-placeholder-00112233445566778899aabbccddeeff"},
		CACert:     "-----BEGIN CERTIFICATE-----\n(the authority)\n-----END CERTIFICATE-----\n",
		Annotation: `{"secrets":[{"name":"API_KEY","hosts":["api.example.com"]}],"sealed":"c2VhbGVk"}`}
	sbS, err := Sandbox(testConfig, egressN)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sandbox-secrets.yaml", sbS)
	golden(t, "warm-template.yaml", Template(testConfig, testNeuron.TrustKeySHA256))
	golden(t, "warm-pool.yaml", WarmPool(testConfig, 50))
	claim, err := Claim(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "warm-claim.yaml", claim)
}

// The warm pool's template is a neuron's pod with nothing of a neuron's
// own (no id, environment or limits: a claim cannot give one those
// without a cold start), the trust key pinned, agent-sandbox's own
// NetworkPolicy and DNS left out; a claim carries the neuron's id to
// the pod as an annotation and asks for nothing that forces a cold start.
func TestWarmObjects(t *testing.T) {
	tm := Template(testConfig, "abc")
	c := tm.Spec.PodTemplate.Spec.Containers[0]
	if !slices.Contains(c.Args, "--id=") || !slices.Contains(c.Args, "--trust-key-sha256=abc") || len(c.Resources.Limits) != 0 {
		t.Errorf("the template's agent: args %v, limits %v", c.Args, c.Resources.Limits)
	}
	for _, e := range c.Env {
		if e.Name != "HOME" {
			t.Errorf("the template's pod has variable %s", e.Name)
		}
	}
	if tm.Spec.NetworkPolicyManagement != "Unmanaged" || tm.Spec.PodTemplate.ObjectMeta.Labels[LabelRole] != "neuron" || tm.Spec.PodTemplate.ObjectMeta.Labels[LabelID] != "" {
		t.Errorf("the template: policy %q, pod labels %v", tm.Spec.NetworkPolicyManagement, tm.Spec.PodTemplate.ObjectMeta.Labels)
	}
	cl, err := Claim(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Name != ObjectName(testNeuron.ID) || cl.Spec.AdditionalPodMetadata.Annotations[LabelID] != testNeuron.ID ||
		len(cl.Spec.AdditionalPodMetadata.Labels) != 0 || len(cl.Spec.Env) != 0 || len(cl.Spec.VolumeClaimTemplates) != 0 || cl.Spec.WarmPoolRef.Name != WarmPoolName {
		t.Errorf("the claim: %+v", cl)
	}
	if _, err := Claim(testConfig, Neuron{ID: "Not_A_Label"}); err == nil {
		t.Error("a claim for an id that is no DNS label")
	}
}

// The policies deny everything but the host's connections in on the
// agent port, and, with a proxy, connections out to it and to DNS.
func TestNetworkPolicies(t *testing.T) {
	ps := NetworkPolicies(testConfig)
	if len(ps) != 2 || len(ps[0].Spec.Ingress)+len(ps[0].Spec.Egress) != 0 || len(ps[0].Spec.PolicyTypes) != 2 {
		t.Fatalf("%+v", ps)
	}
	for _, p := range ps {
		if p.Spec.PodSelector.MatchLabels[LabelRole] != "neuron" {
			t.Errorf("%s selects %v", p.Name, p.Spec.PodSelector)
		}
		for _, r := range p.Spec.Ingress {
			for _, from := range r.From {
				if from.IPBlock != nil || from.PodSelector == nil || from.PodSelector.MatchLabels[LabelHost] != hostName || len(from.PodSelector.MatchExpressions) != 1 {
					t.Errorf("%s lets in %+v", p.Name, from)
				}
			}
		}
		if len(p.Spec.Egress) != 0 {
			t.Errorf("%s lets out %+v", p.Name, p.Spec.Egress)
		}
	}
}

// A neuron with egress: its agent listens on the pod's loopback, its
// programs' proxy variables name that listener, its pod carries the
// allow-list the host's proxy enforces (and the deadline beside it); a
// neuron without has none of these. podEgress reads the annotation back
// and refuses one that is not a list of rules.
func TestEgressObjects(t *testing.T) {
	n := testNeuron
	n.Egress = []string{"api.example.com:443"}
	spec := PodSpec(testConfig, n, "home")
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--egress="+EgressListen) {
		t.Errorf("args %q", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["https_proxy"] != "http://"+EgressListen || env["HTTP_PROXY"] != "http://"+EgressListen || !strings.Contains(env["no_proxy"], "127.0.0.1") {
		t.Errorf("env %v", env)
	}
	pod, _, err := Fallback(testConfig, n)
	if err != nil {
		t.Fatal(err)
	}
	if rules, ok, err := podEgress(pod); !ok || err != nil || !slices.Equal(rules, n.Egress) {
		t.Errorf("podEgress: %q %v %v", rules, ok, err)
	}
	if pod.Annotations[AnnotationDeadline] == "" {
		t.Errorf("the deadline's annotation went: %v", pod.Annotations)
	}
	plain := PodSpec(testConfig, testNeuron, "home")
	for _, a := range plain.Containers[0].Args {
		if strings.HasPrefix(a, "--egress") {
			t.Errorf("a neuron without egress: %q", a)
		}
	}
	for _, e := range plain.Containers[0].Env {
		if strings.Contains(strings.ToLower(e.Name), "proxy") {
			t.Errorf("a neuron without egress: %s", e.Name)
		}
	}
	noneP, _, _ := Fallback(testConfig, testNeuron)
	if _, ok, _ := podEgress(noneP); ok {
		t.Errorf("a neuron without egress has an allow-list: %v", noneP.Annotations)
	}
	for _, bad := range []string{`{"a":1}`, `["a b c d"]`, `not json`} {
		pod.Annotations[AnnotationEgress] = bad
		if _, ok, err := podEgress(pod); !ok || err == nil {
			t.Errorf("annotation %q: %v %v", bad, ok, err)
		}
	}
}

// What the golden files hold, said as rules, so that a change of the
// builder that a careless -update would bless still fails here.
func TestPodIsHardened(t *testing.T) {
	for name, spec := range map[string]corev1.PodSpec{
		"sandbox":  mustSandbox(t).Spec.PodTemplate.Spec,
		"fallback": mustFallback(t).Spec,
		"minimal":  PodSpec(Config{Image: "img"}, Neuron{ID: "a"}, "home-n-a"),
		"warm":     Template(testConfig, testNeuron.TrustKeySHA256).Spec.PodTemplate.Spec,
	} {
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != NeuronUID ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod's security context %+v", name, psc)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: a service-account token or service links", name)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC || spec.RestartPolicy != corev1.RestartPolicyNever || len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
			t.Errorf("%s: host namespaces, restarts or other containers", name)
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: the container's security context %+v", name, sc)
		}
		for _, v := range spec.Volumes {
			if v.HostPath != nil || v.Secret != nil {
				t.Errorf("%s: volume %s is a host path or a secret", name, v.Name)
			}
		}
		if name != "minimal" && !slices.Contains(c.Args, "--trust-key-sha256="+testNeuron.TrustKeySHA256) {
			t.Errorf("%s: the agent's trust key is not pinned: %q", name, c.Args)
		}
	}
	if got := mustFallback(t).Spec.Containers[0].Resources.Limits; got.Cpu().MilliValue() != 1500 || got.Memory().Value() != 512<<20 {
		t.Errorf("limits: %v", got)
	}
	if l := mustSandbox(t).Labels; l[LabelID] != "web-1" || l[LabelManaged] != managedBy || l["team"] != "a" || l[LabelHost] != "" {
		t.Errorf("a neuron's labels override the mode's: %v", l)
	}
}

func mustSandbox(t *testing.T) *sbv1.Sandbox {
	sb, err := Sandbox(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func mustFallback(t *testing.T) *corev1.Pod {
	pod, _, err := Fallback(testConfig, testNeuron)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestBadInput(t *testing.T) {
	if _, err := Sandbox(testConfig, Neuron{ID: "../x"}); err == nil {
		t.Error("an id that is no name made a Sandbox")
	}
	if _, _, err := Fallback(testConfig, Neuron{ID: "UPPER"}); err == nil {
		t.Error("an id that is no DNS label made a pod")
	}
	if err := (Config{}).Check(); err == nil {
		t.Error("a config without an image passed")
	}
	if err := (Config{Image: "i", HomeSize: resource.MustParse("1Gi")}).Check(); err != nil {
		t.Error(err)
	}
}

// Hardened takes the pods the builders make and refuses each way a
// Sandbox or the warm pool's SandboxTemplate could be weakened by someone
// with rights in the namespace (what a host checks before it sends a pod
// its tokens).
func TestHardenedRefuses(t *testing.T) {
	pin := testNeuron.TrustKeySHA256
	for name, spec := range map[string]corev1.PodSpec{
		"sandbox": mustSandbox(t).Spec.PodTemplate.Spec, "fallback": mustFallback(t).Spec,
		"warm": Template(testConfig, pin).Spec.PodTemplate.Spec,
	} {
		if err := Hardened(testConfig, spec, pin); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	base := Template(testConfig, pin).Spec.PodTemplate.Spec
	for name, edit := range map[string]func(*corev1.PodSpec){
		"privileged": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Privileged = ptr.To(true) },
		"escalation": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
		"a capability added": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"capabilities kept":     func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.Capabilities.Drop = nil },
		"a writable root":       func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) },
		"the container as root": func(s *corev1.PodSpec) { s.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](0) },
		"the pod as root":       func(s *corev1.PodSpec) { s.SecurityContext.RunAsUser = ptr.To[int64](0) },
		"no seccomp":            func(s *corev1.PodSpec) { s.SecurityContext.SeccompProfile = nil },
		"a token":               func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = ptr.To(true) },
		"the node's network":    func(s *corev1.PodSpec) { s.HostNetwork = true },
		"the node's pids":       func(s *corev1.PodSpec) { s.HostPID = true },
		"an init container":     func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{{Name: "x", Image: "x"}} },
		"a second container":    func(s *corev1.PodSpec) { s.Containers = append(s.Containers, corev1.Container{Name: "x", Image: "x"}) },
		"no runtime class":      func(s *corev1.PodSpec) { s.RuntimeClassName = nil },
		"another runtime class": func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To("runc") },
		"another trust key": func(s *corev1.PodSpec) {
			s.Containers[0].Args = slices.DeleteFunc(slices.Clone(s.Containers[0].Args), func(a string) bool { return strings.HasPrefix(a, "--trust-key-sha256=") })
		},
		"a host path": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"a Secret": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}})
		},
		"a projected token": func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}})
		},
	} {
		s := base.DeepCopy()
		edit(s)
		if err := Hardened(testConfig, *s, pin); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
}
