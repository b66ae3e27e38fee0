package kube

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

var ctx = context.Background()

// refuse makes the fake API server refuse verb on resource with err.
func refuse(f *k8stesting.Fake, verb, resource string, err error) {
	f.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

// The Sandbox path: create, stop (suspend, home kept), create again
// (running, the same home), wipe (nothing left).
func TestSandboxLifecycle(t *testing.T) {
	core, ag := fake.NewClientset(), agentsfake.NewSimpleClientset()
	c := &Cluster{Core: core, Agents: ag, Config: testConfig}
	n := Neuron{ID: "web-1", Labels: testNeuron.Labels}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	sbs := ag.AgentsV1beta1().Sandboxes("nsys-cortex")
	sb, err := sbs.Get(ctx, "n-web-1", metav1.GetOptions{})
	if err != nil || sb.Spec.OperatingMode != sbv1.SandboxOperatingModeRunning || sb.Labels[LabelID] != "web-1" {
		t.Fatalf("the Sandbox: %+v %v", sb, err)
	}
	if err := c.Create(ctx, n); !errdefs.Of(err).Is(errdefs.Exists) {
		t.Errorf("a second create of a running neuron: %v", err)
	}
	if err := c.Stop(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if sb, _ := sbs.Get(ctx, "n-web-1", metav1.GetOptions{}); sb.Spec.OperatingMode != sbv1.SandboxOperatingModeSuspended || len(sb.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("stopped: %+v", sb.Spec)
	}
	n.Labels = map[string]string{"team": "b"}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	if sb, _ := sbs.Get(ctx, "n-web-1", metav1.GetOptions{}); sb.Spec.OperatingMode != sbv1.SandboxOperatingModeRunning || sb.Labels["team"] != "b" {
		t.Fatalf("created again: %+v %v", sb.Spec.OperatingMode, sb.Labels)
	}
	// The controller's claim for the home, as it would make it.
	core.CoreV1().PersistentVolumeClaims("nsys-cortex").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: HomeClaimName("web-1"), Namespace: "nsys-cortex"}}, metav1.CreateOptions{})
	if err := c.Wipe(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs.Get(ctx, "n-web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Sandbox after a wipe: %v", err)
	}
	if l, _ := core.CoreV1().PersistentVolumeClaims("nsys-cortex").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("claims after a wipe: %v", l.Items)
	}
	if err := c.Stop(ctx, "web-1"); !errdefs.Of(err).Is(errdefs.NotFound) {
		t.Errorf("stop of a wiped neuron: %v", err)
	}
}

// Each refusal of the API server is an error that names it and says what
// to do, and a create that fails leaves nothing behind.
func TestRefusals(t *testing.T) {
	gr := schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}
	for _, c := range []struct {
		name     string
		fallback bool
		verb     string
		resource string
		err      error
		class    errdefs.Class
		says     string
	}{
		{"RBAC forbids creating Sandboxes", false, "create", "sandboxes", apierrors.NewForbidden(gr, "n-a", nil), errdefs.Permission, "forbids create on sandboxes.agents.x-k8s.io"},
		{"the CRDs are missing", false, "create", "sandboxes", apierrors.NewNotFound(gr, ""), errdefs.Unsupported, "CRDs are not installed"},
		{"a quota exceeded (Sandbox)", false, "create", "sandboxes", apierrors.NewForbidden(gr, "n-a", errString("exceeded quota: q, requested: pods=1")), errdefs.Capacity, "quota"},
		{"a name taken", false, "create", "sandboxes", apierrors.NewAlreadyExists(gr, "n-a"), errdefs.Exists, "n-a"},
		{"the API server unreachable", false, "get", "sandboxes", errString("dial tcp 10.0.0.1:6443: connect: connection refused"), errdefs.Unavailable, "cannot be reached"},
		{"a quota exceeded (pod): the claim goes too", true, "create", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "n-a", errString("exceeded quota: q")), errdefs.Capacity, "quota"},
		{"no such RuntimeClass: the claim goes too", true, "create", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "n-a", errString(`pod rejected: RuntimeClass "gvisor" not found`)), errdefs.Invalid, "no such RuntimeClass"},
		{"Pod Security refuses the pod", true, "create", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "n-a", errString(`violates PodSecurity "restricted:latest": seLinuxOptions`)), errdefs.Permission, "Pod Security admission"},
		{"RBAC forbids claims", true, "create", "persistentvolumeclaims", apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "home-n-a", nil), errdefs.Permission, "persistentvolumeclaims"},
	} {
		core, ag := fake.NewClientset(), agentsfake.NewSimpleClientset()
		cl := &Cluster{Core: core, Agents: ag, Config: testConfig}
		f := &ag.Fake
		if c.fallback {
			cl.Agents, f = nil, &core.Fake
		}
		refuse(f, c.verb, c.resource, c.err)
		err := cl.Create(ctx, Neuron{ID: "a"})
		if err == nil || !errdefs.Of(err).Is(c.class) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v (class %v), want %v saying %q", c.name, err, errdefs.Of(err), c.class, c.says)
		}
		if l, _ := core.CoreV1().PersistentVolumeClaims("nsys-cortex").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
			t.Errorf("%s: a claim is left: %v", c.name, l.Items[0].Name)
		}
		if l, _ := core.CoreV1().Pods("nsys-cortex").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
			t.Errorf("%s: a pod is left", c.name)
		}
		if l, _ := ag.AgentsV1beta1().Sandboxes("nsys-cortex").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
			t.Errorf("%s: a Sandbox is left", c.name)
		}
	}
}

// The fallback path: a claim and a pod; stop keeps the claim, and the
// next create uses it; wipe removes both.
func TestFallbackLifecycle(t *testing.T) {
	core := fake.NewClientset()
	c := &Cluster{Core: core, Config: testConfig}
	if err := c.Create(ctx, Neuron{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	pods, claims := core.CoreV1().Pods("nsys-cortex"), core.CoreV1().PersistentVolumeClaims("nsys-cortex")
	if _, err := claims.Get(ctx, "home-n-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "n-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod after stop: %v", err)
	}
	// Created again on its home; a pod that then cannot be made keeps it.
	refuse(&core.Fake, "create", "pods", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "n-a", nil))
	if err := c.Create(ctx, Neuron{ID: "a"}); !errdefs.Of(err).Is(errdefs.Permission) {
		t.Fatalf("a refused pod: %v", err)
	}
	if _, err := claims.Get(ctx, "home-n-a", metav1.GetOptions{}); err != nil {
		t.Fatalf("a stopped neuron's home after a refused create: %v", err)
	}
	if err := c.Wipe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Get(ctx, "home-n-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the home after a wipe: %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// A home left by a Sandbox deleted without Cortex's wipe (a deadline's,
// policy Delete: the garbage collector and pvc-protection take it after)
// makes a create of the same id BUSY, not a Sandbox whose controller
// would refuse the claim and never make a pod.
func TestCreateOnALeftHome(t *testing.T) {
	core, ag := fake.NewClientset(), agentsfake.NewSimpleClientset()
	c := &Cluster{Core: core, Agents: ag, Config: testConfig}
	if _, err := core.CoreV1().PersistentVolumeClaims("nsys-cortex").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: HomeClaimName("a"), Namespace: "nsys-cortex"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := c.Create(ctx, Neuron{ID: "a"})
	if !errdefs.Of(err).Is(errdefs.Busy) || !strings.Contains(err.Error(), "home-n-a") {
		t.Fatalf("a create on a left home: %v, want BUSY naming the claim", err)
	}
	if l, _ := ag.AgentsV1beta1().Sandboxes("nsys-cortex").List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("a Sandbox was made: %v", l.Items[0].Name)
	}
}

// A neuron's allow-list is its create's: started again without egress,
// its pod has none left from the run before (a merge patch that left the
// annotation out kept it), and with egress again it has the new one.
func TestEgressAcrossRestarts(t *testing.T) {
	core, ag := fake.NewClientset(), agentsfake.NewSimpleClientset()
	c := &Cluster{Core: core, Agents: ag, Config: testConfig}
	sbs := ag.AgentsV1beta1().Sandboxes("nsys-cortex")
	pod := func() (map[string]string, []string) {
		t.Helper()
		sb, err := sbs.Get(ctx, "n-web-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sb.Spec.PodTemplate.ObjectMeta.Annotations, sb.Spec.PodTemplate.Spec.Containers[0].Args
	}
	for i, rules := range [][]string{{"github.com"}, nil, {"*.pypi.org"}, nil} {
		if i > 0 {
			if err := c.Stop(ctx, "web-1"); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Create(ctx, Neuron{ID: "web-1", Egress: rules}); err != nil {
			t.Fatal(err)
		}
		ann, args := pod()
		v, has := ann[AnnotationEgress]
		listens := slices.Contains(args, "--egress="+EgressListen)
		if rules == nil && (has || listens) || rules != nil && (!has || !listens || !strings.Contains(v, rules[0])) {
			t.Errorf("run %d with %q: annotation %q (%v), listener %v", i, rules, v, has, listens)
		}
	}
}

// The host connects to a pod whose egress listener and allow-list agree,
// both there or both not; one without the other is refused.
func TestCheckPodEgress(t *testing.T) {
	key, _ := podtoken.NewKey()
	m := &Manager{Cluster: &Cluster{Config: testConfig}, Key: key}
	n := Neuron{ID: "web-1", TrustKeySHA256: podtoken.Fingerprint(key.Public().(ed25519.PublicKey))}
	plain, _, _ := Fallback(testConfig, n)
	n.Egress = []string{"github.com"}
	withEgress, _, _ := Fallback(testConfig, n)
	for _, ok := range []*corev1.Pod{plain, withEgress} {
		if _, err := m.checkPod("web-1", ok, ""); err != nil {
			t.Errorf("pod %v: %v", ok.Annotations, err)
		}
	}
	noList := withEgress.DeepCopy()
	delete(noList.Annotations, AnnotationEgress)
	noListener := plain.DeepCopy()
	noListener.Annotations = map[string]string{AnnotationEgress: `["github.com"]`}
	for _, bad := range []*corev1.Pod{noList, noListener} {
		if _, err := m.checkPod("web-1", bad, ""); !errdefs.Of(err).Is(errdefs.Permission) || !strings.Contains(err.Error(), "disagree") {
			t.Errorf("pod %v %q: %v", bad.Annotations, bad.Spec.Containers[0].Args, err)
		}
	}
}

// On the fallback path a stopped neuron's home is its claim, kept; a
// claim under that name that kube mode did not make (someone's, made
// ahead of the neuron, perhaps by the cluster's controller for a pod's
// ephemeral volume of that name; the adversarial review of 12-07) is
// not used as the neuron's home, and no pod is made on it.
func TestFallbackRefusesAForeignHome(t *testing.T) {
	for _, c := range []struct {
		what   string
		labels map[string]string
		owners []metav1.OwnerReference
		ok     bool
	}{
		{"kube mode's", map[string]string{LabelID: "a", LabelManaged: managedBy}, nil, true},
		{"unlabelled", nil, nil, false},
		{"another neuron's", map[string]string{LabelID: "b", LabelManaged: managedBy}, nil, false},
		{"labelled, owned by a pod", map[string]string{LabelID: "a", LabelManaged: managedBy}, []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "home", UID: "u"}}, false},
	} {
		core := fake.NewClientset()
		cl := &Cluster{Core: core, Config: testConfig}
		if _, err := core.CoreV1().PersistentVolumeClaims("nsys-cortex").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
			Name: HomeClaimName("a"), Namespace: "nsys-cortex", Labels: c.labels, OwnerReferences: c.owners}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := cl.Create(ctx, Neuron{ID: "a"})
		pods, _ := core.CoreV1().Pods("nsys-cortex").List(ctx, metav1.ListOptions{})
		switch {
		case c.ok && (err != nil || len(pods.Items) != 1):
			t.Errorf("%s: %v, %d pods", c.what, err, len(pods.Items))
		case !c.ok && (!errdefs.Of(err).Is(errdefs.Permission) || !strings.Contains(err.Error(), "home-n-a") || len(pods.Items) != 0):
			t.Errorf("%s: %v, %d pods; want PERMISSION naming the claim, and no pod", c.what, err, len(pods.Items))
		}
	}
}
