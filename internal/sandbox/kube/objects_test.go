package kube

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	withProxy := testConfig
	withProxy.EgressProxy = map[string]string{"app.kubernetes.io/name": "nsys-cortex-egress"}
	golden(t, "networkpolicies.yaml", NetworkPolicies(withProxy))
}

// The policies deny everything but the host's connections in on the
// agent port, and, with a proxy, connections out to it and to DNS.
func TestNetworkPolicies(t *testing.T) {
	ps := NetworkPolicies(testConfig)
	if len(ps) != 2 || len(ps[0].Spec.Ingress)+len(ps[0].Spec.Egress) != 0 || len(ps[0].Spec.PolicyTypes) != 2 {
		t.Fatalf("without a proxy: %+v", ps)
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
			t.Errorf("%s lets out %+v without a proxy", p.Name, p.Spec.Egress)
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
