package kube

import (
	"crypto/ed25519"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

var testSecrets = []sandbox.Secret{{Name: "API_KEY", Value: "sk-live-1234", Hosts: []string{"api.example.com"}}}

// A neuron's secrets are sealed for it with the hosts' shared key: a
// replica with the same key opens them; another key, another neuron's
// id, or names changed in the clear part are refused; and the value is
// nowhere in the pod in clear.
func TestSecretsSealed(t *testing.T) {
	key, _ := podtoken.NewKey()
	other, _ := podtoken.NewKey()
	ns, err := makeSecrets(key, "nsys-cortex", "web-1", testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Env) != 1 || !strings.HasPrefix(ns.Env[0], "API_KEY=cortex-placeholder-") {
		t.Errorf("the neuron's environment: %q", ns.Env)
	}
	n := Neuron{ID: "web-1", Egress: []string{"api.example.com:443"}, Secrets: ns}
	pod, _, err := Fallback(testConfig, n)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := json.Marshal(pod)
	if strings.Contains(string(whole), "sk-live-1234") {
		t.Fatal("the value is in the pod in clear")
	}
	ps, ok, err := podSecretsOf(pod)
	if !ok || err != nil || len(ps.Secrets) != 1 || ps.Secrets[0].Name != "API_KEY" {
		t.Fatalf("the annotation: %+v %v %v", ps, ok, err)
	}
	got, err := openSecrets(key, "nsys-cortex", "web-1", ps)
	if err != nil {
		t.Fatal(err)
	}
	placeholder := strings.TrimPrefix(ns.Env[0], "API_KEY=")
	if len(got.Secrets) != 1 || got.Secrets[0].Value != "sk-live-1234" || got.Secrets[0].Placeholder != placeholder || got.CACert != ns.CACert {
		t.Errorf("opened: %+v", got.Secrets)
	}
	if _, err := openSecrets(other, "nsys-cortex", "web-1", ps); err == nil {
		t.Error("another key opened them")
	}
	if _, err := openSecrets(key, "nsys-cortex", "web-2", ps); err == nil {
		t.Error("they opened for another neuron")
	}
	if _, err := openSecrets(key, "elsewhere", "web-1", ps); err == nil {
		t.Error("they opened in another namespace")
	}
	renamed := ps
	renamed.Secrets = []sandbox.SecretPolicy{{Name: "API_KEY", Hosts: []string{"evil.example.com"}}}
	if _, err := openSecrets(key, "nsys-cortex", "web-1", renamed); err == nil {
		t.Error("they opened with their hosts changed in clear")
	}
	flipped := ps
	flipped.Sealed = slices.Clone(ps.Sealed)
	flipped.Sealed[len(flipped.Sealed)-1] ^= 1
	if _, err := openSecrets(key, "nsys-cortex", "web-1", flipped); err == nil {
		t.Error("a changed sealing opened")
	}
	if _, err := openSecrets(key, "nsys-cortex", "web-1", podSecrets{}); err == nil {
		t.Error("an empty sealing opened")
	}
}

// The host connects to a pod with secrets only when they are sealed for
// it, with this host's key, and the pod has egress and the agent's
// authority directory; it hands the proxy what it opened.
func TestCheckPodSecrets(t *testing.T) {
	key, _ := podtoken.NewKey()
	other, _ := podtoken.NewKey()
	m := &Manager{Cluster: &Cluster{Config: testConfig}, Key: key}
	n := Neuron{ID: "web-1", Egress: []string{"api.example.com:443"}, TrustKeySHA256: podtoken.Fingerprint(key.Public().(ed25519.PublicKey))}
	var err error
	if n.Secrets, err = makeSecrets(key, testConfig.Defaults().Namespace, "web-1", testSecrets); err != nil {
		t.Fatal(err)
	}
	good, _, _ := Fallback(testConfig, n)
	if err := Hardened(testConfig, good.Spec, n.TrustKeySHA256); err != nil {
		t.Errorf("a pod with secrets is not hardened: %v", err)
	}
	sec, err := m.checkPod("web-1", good, "")
	if err != nil || sec == nil || sec.Secrets[0].Value != "sk-live-1234" {
		t.Fatalf("the pod with its secrets: %+v %v", sec, err)
	}
	// Sealed by another key (another installation's, or an old one).
	n2 := n
	if n2.Secrets, err = makeSecrets(other, testConfig.Defaults().Namespace, "web-1", testSecrets); err != nil {
		t.Fatal(err)
	}
	otherKey, _, _ := Fallback(testConfig, n2)
	// Another neuron's sealing, copied onto this pod.
	n3 := n
	if n3.Secrets, err = makeSecrets(key, testConfig.Defaults().Namespace, "web-2", testSecrets); err != nil {
		t.Fatal(err)
	}
	copied, _, _ := Fallback(testConfig, n3)
	copied.Labels, copied.Spec.Containers[0].Args = good.Labels, good.Spec.Containers[0].Args
	// Secrets without egress; without the agent's directory.
	noEgress := good.DeepCopy()
	delete(noEgress.Annotations, AnnotationEgress)
	noEgress.Spec.Containers[0].Args = slices.DeleteFunc(noEgress.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--egress=") })
	noDir := good.DeepCopy()
	noDir.Spec.Containers[0].Args = slices.DeleteFunc(noDir.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--egress-ca=") })
	garbled := good.DeepCopy()
	garbled.Annotations[AnnotationSecrets] = "{"
	// An earlier start's seal (a value since rotated) put back on the
	// pod of a later start: the placeholders and authority are not its.
	later := n
	rotated := []sandbox.Secret{{Name: "API_KEY", Value: "sk-rotated", Hosts: []string{"api.example.com"}}}
	if later.Secrets, err = makeSecrets(key, testConfig.Defaults().Namespace, "web-1", rotated); err != nil {
		t.Fatal(err)
	}
	replayed, _, _ := Fallback(testConfig, later)
	if _, err := m.checkPod("web-1", replayed, ""); err != nil {
		t.Fatalf("the later start's own pod: %v", err)
	}
	replayed.Annotations[AnnotationSecrets] = good.Annotations[AnnotationSecrets]
	for name, bad := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"another key":        {otherKey, "not sealed for it"},
		"another neuron's":   {copied, "not sealed for it"},
		"without egress":     {noEgress, "without network egress"},
		"without the CA dir": {noDir, "without network egress or its agent's authority"},
		"garbled":            {garbled, AnnotationSecrets},
		"an earlier start's": {replayed, "sealed for another start"},
	} {
		if _, err := m.checkPod("web-1", bad.pod, ""); !errdefs.Of(err).Is(errdefs.Permission) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A neuron's secrets are its create's: started again without them, its
// pod keeps neither their annotation, their placeholders nor their
// authority; with them again, new placeholders.
func TestSecretsAcrossRestarts(t *testing.T) {
	key, _ := podtoken.NewKey()
	core, ag := fake.NewClientset(), agentsfake.NewSimpleClientset()
	c := &Cluster{Core: core, Agents: ag, Config: testConfig}
	sbs := ag.AgentsV1beta1().Sandboxes("nsys-cortex")
	seen := map[string]bool{}
	for i, with := range []bool{true, false, true, false} {
		if i > 0 {
			if err := c.Stop(ctx, "web-1"); err != nil {
				t.Fatal(err)
			}
		}
		n := Neuron{ID: "web-1", Egress: []string{"api.example.com:443"}}
		if with {
			var err error
			if n.Secrets, err = makeSecrets(key, testConfig.Defaults().Namespace, "web-1", testSecrets); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		sb, err := sbs.Get(ctx, "n-web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ann, ct := sb.Spec.PodTemplate.ObjectMeta.Annotations, sb.Spec.PodTemplate.Spec.Containers[0]
		_, has := ann[AnnotationSecrets]
		placeholder := ""
		for _, e := range ct.Env {
			if e.Name == "API_KEY" {
				placeholder = e.Value
			}
		}
		dir := slices.Contains(ct.Args, "--egress-ca="+boot.EgressCADir)
		if has != with || dir != with || (placeholder != "") != with {
			t.Errorf("run %d with secrets %v: annotation %v, authority directory %v, placeholder %q", i, with, has, dir, placeholder)
		}
		if placeholder != "" {
			if seen[placeholder] {
				t.Errorf("run %d: the placeholder of an earlier run", i)
			}
			seen[placeholder] = true
		}
	}
}
