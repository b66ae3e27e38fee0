package kube_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// warmReady waits until the namespace's warm pool has n ready Sandboxes:
// a minute, and more for a large pool (3 minutes for 50).
func warmReady(t testing.TB, ext extclient.Interface, cfg kube.Config, n int32) {
	t.Helper()
	waittest.For(t, time.Minute+time.Duration(n)*2400*time.Millisecond, "the warm pool to have its neurons ready", func() bool {
		p, err := ext.ExtensionsV1beta1().SandboxWarmPools(cfg.Namespace).Get(context.Background(), kube.WarmPoolName, metav1.GetOptions{})
		return err == nil && p.Status.ReadyReplicas >= n
	})
}

// Warm pools beside agent-sandbox's own controllers (the Sandbox's and
// its extensions'): a create is a SandboxClaim that adopts a warm Sandbox
// of the pool, which keeps the pool's name; every operation finds the
// neuron through its claim; its labels, stop and start on the kept home,
// deadlines (a wipe at one is the claim's), and wipe work as they do for
// a neuron made cold; the pool's own Sandboxes are no neuron's. The
// attacks a shared pool invites: two creates at once get two Sandboxes,
// each seeing only its own files, and a neuron wiped and made again under
// its id gets a fresh home, none of the wiped one's.
func TestWarmPool(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, Quiet: true})
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", WarmPool: 2}.Defaults()
	cluster.Prepare(t, kubernetes.NewForConfigOrDie(rc), cfg)
	warmPool(t, rc, rc, rc, cfg)
}

// warmPool runs TestWarmPool's scenario on the cluster rc reaches, whose
// namespace is prepared: the simulated kubelet as rc's identity,
// agent-sandbox's controllers as ctrlRC's, the host's Manager as
// hostRC's. It returns the Manager, its neurons left running.
func warmPool(t *testing.T, rc, ctrlRC, hostRC *rest.Config, cfg kube.Config) *kube.Manager {
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	ext := cluster.Extensions(rc)
	cluster.StartController(t, ctrlRC)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.StartBeside(t, core, ag, cfg) }).CollectClaims(ext)
	m := manager(t, kubernetes.NewForConfigOrDie(hostRC), cluster.Agents(hostRC), cfg)
	m.Cluster.Claims = cluster.Extensions(hostRC)
	ctx := context.Background()
	boot := sandbox.CreateOptions{BootTimeout: 30 * time.Second}
	exec := func(id, script string) (string, int) {
		t.Helper()
		c, err := m.Connect(ctx, id)
		if err != nil {
			t.Fatalf("connect %s: %v", id, err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: script}})
		if err != nil {
			t.Fatalf("exec in %s: %v", id, err)
		}
		return string(res.Stdout), res.ExitCode
	}
	claimed := func(id string) string {
		t.Helper()
		name, claim, err := m.Cluster.Resolve(ctx, id)
		if err != nil || claim == nil {
			t.Fatalf("neuron %s: no claim holds it (%v)", id, err)
		}
		return name
	}

	// The first create makes the pool (its claim may find it empty: a
	// cold start, named as the claim); later ones take warm Sandboxes.
	if _, err := m.Create(ctx, "first", boot); err != nil {
		t.Fatal(err)
	}
	claimed("first")
	warmReady(t, ext, cfg, 2)

	opts := boot
	opts.Labels = labels.Set{"team": "a"}
	st, err := m.Create(ctx, "w1", opts)
	if err != nil {
		t.Fatal(err)
	}
	name := claimed("w1")
	if !strings.HasPrefix(name, kube.WarmPoolName+"-") {
		t.Fatalf("w1 runs in Sandbox %s, not one of the warm pool's", name)
	}
	if st.Labels["team"] != "a" || st.Status != sandbox.StatusRunning {
		t.Fatalf("the create's state: %+v", st)
	}
	if out, code := exec("w1", "echo kept > f; cat f"); out != "kept\n" || code != 0 {
		t.Fatalf("exec in w1: %q, exit %d", out, code)
	}
	if out, _ := exec("w1", `echo "$NSYS_CORTEX_NEURON"`); out != "w1\n" {
		t.Fatalf("NSYS_CORTEX_NEURON in the claimed w1: %q", out)
	}
	if st, err := m.Get(ctx, "w1"); err != nil || st.Labels["team"] != "a" || st.Status != sandbox.StatusRunning {
		t.Fatalf("Get w1: %+v, %v", st, err)
	}
	// The pool's own Sandboxes are no neuron's; it fills again.
	warmReady(t, ext, cfg, 2)
	all, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range all {
		ids = append(ids, st.ID)
		if st.ID == "w1" && st.Labels["team"] != "a" {
			t.Errorf("listed w1 without its labels: %v", st.Labels)
		}
	}
	if strings.Join(ids, ",") != "first,w1" && strings.Join(ids, ",") != "w1,first" {
		t.Fatalf("List: %v, want first and w1 (and none of the pool's)", ids)
	}
	if s := m.ClaimStats(); s.Warm < 1 || s.Count < 2 || s.Failed != 0 {
		t.Fatalf("claim stats: %+v", s)
	}

	// Stopped and started again: the same Sandbox, the home kept, its
	// pod now the neuron's own (the agent told its id).
	if err := m.Destroy(ctx, "w1", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Get(ctx, "w1"); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("w1 after destroy: %+v, %v", st, err)
	}
	// Its pod's metadata is its claim's, so no allow-list can go there.
	m.AgentBinary = buildAgent(t) // egress is what this host could give
	withEgress := boot
	withEgress.Network = sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"example.com"}}
	if _, err := m.Create(ctx, "w1", withEgress); !errors.As(err, new(*sandbox.UnenforceableError)) || !strings.Contains(err.Error(), "warm pool") {
		t.Fatalf("the stopped claimed w1 started with egress: %v", err)
	}
	if _, err := m.Create(ctx, "w1", boot); err != nil {
		t.Fatalf("create of the stopped w1: %v", err)
	}
	if again := claimed("w1"); again != name {
		t.Fatalf("w1 started again in Sandbox %s, not its own %s", again, name)
	}
	if out, _ := exec("w1", "cat f"); out != "kept\n" {
		t.Fatalf("w1's home after a stop and a start: %q", out)
	}

	// A wipe at a deadline is the claim's; a stop at one the Sandbox's.
	st, err = m.SetTimeout(ctx, "w1", time.Hour, sandbox.OnTimeoutWipe)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deadline == nil || st.OnTimeout != sandbox.OnTimeoutWipe {
		t.Fatalf("after SetTimeout wipe: deadline %v, %q", st.Deadline, st.OnTimeout)
	}
	listed, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listed {
		if l.ID == "w1" && (l.Deadline == nil || !l.Deadline.Equal(*st.Deadline) || l.OnTimeout != sandbox.OnTimeoutWipe) {
			t.Fatalf("listed w1 with deadline %v (%q), not its claim's %v", l.Deadline, l.OnTimeout, st.Deadline)
		}
	}
	c, _ := ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, kube.ObjectName("w1"), metav1.GetOptions{})
	sb, _ := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if c == nil || c.Spec.Lifecycle == nil || c.Spec.Lifecycle.ShutdownTime == nil || sb == nil || sb.Spec.ShutdownTime != nil {
		t.Fatalf("a wipe deadline: the claim's lifecycle %+v, the Sandbox's shutdown time %v", c.Spec.Lifecycle, sb.Spec.ShutdownTime)
	}
	if st, err = m.SetTimeout(ctx, "w1", time.Hour, sandbox.OnTimeoutStop); err != nil || st.OnTimeout != sandbox.OnTimeoutStop {
		t.Fatalf("SetTimeout stop: %+v, %v", st, err)
	}
	c, _ = ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, kube.ObjectName("w1"), metav1.GetOptions{})
	if c.Spec.Lifecycle != nil && c.Spec.Lifecycle.ShutdownTime != nil {
		t.Fatalf("a stop deadline left the claim's wipe at %v", c.Spec.Lifecycle.ShutdownTime)
	}

	// Wiped: the claim, the Sandbox and its home go; the same id made
	// again has a fresh home.
	if err := m.Destroy(ctx, "w1", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "w1"); !errors.As(err, new(*sandbox.NotFoundError)) {
		t.Fatalf("Get after the wipe: %v", err)
	}
	if _, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the wiped neuron's Sandbox %s: %v", name, err)
	}
	warmReady(t, ext, cfg, 2)
	if _, err := m.Create(ctx, "w1", boot); err != nil {
		t.Fatal(err)
	}
	if claimed("w1") == name {
		t.Fatalf("w1 made again in the wiped neuron's Sandbox %s", name)
	}
	if out, code := exec("w1", "cat f"); code == 0 {
		t.Fatalf("w1 made again after a wipe sees the wiped home's file: %q", out)
	}

	// Two creates at once: two Sandboxes, each with only its own files.
	warmReady(t, ext, cfg, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, id := range []string{"a1", "a2"} {
		wg.Go(func() { _, errs[i] = m.Create(ctx, id, boot) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if claimed("a1") == claimed("a2") {
		t.Fatalf("a1 and a2 share Sandbox %s", claimed("a1"))
	}
	exec("a1", "echo mine > only-a1")
	if out, code := exec("a2", "ls; cat only-a1"); code == 0 {
		t.Fatalf("a2 sees a1's file: %q", out)
	}

	// A wipe at a deadline, made with the create: the claim's controller
	// deletes the claim then, and the neuron and its home go with it.
	wipeSoon := boot
	wipeSoon.Timeout, wipeSoon.OnTimeout = 2*time.Second, sandbox.OnTimeoutWipe
	if _, err := m.Create(ctx, "brief", wipeSoon); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 60*time.Second, "the claim's deadline to wipe the neuron", func() bool {
		_, err := m.Get(ctx, "brief")
		return errors.As(err, new(*sandbox.NotFoundError))
	})

	// An environment of its own: a warm neuron all the same, its agent
	// handed the environment and its id once claimed. Limits of its own:
	// cold, with no claim.
	warmReady(t, ext, cfg, 2)
	withEnv := boot
	withEnv.Env = []string{"MY_VAR=1"}
	if _, err := m.Create(ctx, "envy", withEnv); err != nil {
		t.Fatal(err)
	}
	if n := claimed("envy"); !strings.HasPrefix(n, kube.WarmPoolName+"-") {
		t.Fatalf("a create with an environment runs in Sandbox %s, not one of the warm pool's", n)
	}
	if out, _ := exec("envy", `echo "$MY_VAR $NSYS_CORTEX_NEURON"`); out != "1 envy\n" {
		t.Fatalf("the warm neuron's environment: %q", out)
	}
	withLimits := boot
	withLimits.Limits = sandbox.Limits{MemoryBytes: 256 << 20}
	if _, err := m.Create(ctx, "cold", withLimits); err != nil {
		t.Fatal(err)
	}
	if name, claim, err := m.Cluster.Resolve(ctx, "cold"); err != nil || claim != nil || name != kube.ObjectName("cold") {
		t.Fatalf("a create with limits: Sandbox %s, claim %v, %v", name, claim, err)
	}
	return m
}

// warmEnv is a cluster with agent-sandbox's controllers, kubesim beside
// them, and a host's Manager with a warm pool of size.
func warmEnv(t *testing.T, size int32) (*kube.Manager, kube.Config, kubernetes.Interface, agents.Interface, extclient.Interface) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, Quiet: true})
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", WarmPool: size}.Defaults()
	core := kubernetes.NewForConfigOrDie(rc)
	cluster.Prepare(t, core, cfg)
	ag, ext := cluster.Agents(rc), cluster.Extensions(rc)
	cluster.StartController(t, rc)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.StartBeside(t, core, ag, cfg) }).CollectClaims(ext)
	m := manager(t, core, ag, cfg)
	m.Cluster.Claims = ext
	return m, cfg, core, ag, ext
}

// A claim that names another neuron's Sandbox, as agent-sandbox names a
// candidate on a claim before it adopts it (and takes the name back when
// another claim has it): the host takes a Sandbox as a neuron's only once
// the claim is its controller, so neuron b is never linked to neuron a's
// pod, never reads a's files, and never relabels a (the adversarial
// review's first finding; without the ownership check b read a's file).
func TestWarmPoolForeignName(t *testing.T) {
	foreignSandbox(t, false, func(ctx context.Context, ext extclient.Interface, ag agents.Interface, cfg kube.Config, claim *extv1.SandboxClaim, nameA string) error {
		b := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, extv1.AssignedSandboxNameAnnotation, nameA)
		_, err := ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Patch(ctx, claim.Name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	})
}

// Neuron a's Sandbox labelled with b's claim's uid, the label a claiming
// create watches Sandboxes by: the label narrows the watch, and only the
// claim as the Sandbox's controller makes it b's: b is never linked to
// a's pod, and is made on the Sandbox the pool gives it (a wait that
// took the labelled one would fail: a's pod does not name b).
func TestWarmPoolForeignLabel(t *testing.T) {
	foreignSandbox(t, true, func(ctx context.Context, ext extclient.Interface, ag agents.Interface, cfg kube.Config, claim *extv1.SandboxClaim, nameA string) error {
		b := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, extv1.SandboxIDLabel, claim.UID)
		_, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Patch(ctx, nameA, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	})
}

// A Sandbox made by someone who may make Sandboxes (not claims), naming
// the new claim as its controller and labelled with its uid, the moment
// the claim is made: the claim never names it, so the host does not take
// it, does not label it as the neuron's, and makes the neuron on the
// Sandbox the pool gives it (the review's finding on the Sandbox watch:
// it took the forged one, labelled it and gave its pod the neuron's
// environment).
func TestWarmPoolForgedOwner(t *testing.T) {
	m, cfg, _, ag, ext := warmEnv(t, 1)
	ctx := context.Background()
	if _, err := m.Create(ctx, "first", sandbox.CreateOptions{BootTimeout: 30 * time.Second}); err != nil { // makes the pool
		t.Fatal(err)
	}
	warmReady(t, ext, cfg, 1)
	forged := onClaimMade(t, ext, cfg, "v", func(c *extv1.SandboxClaim) error {
		sb := &sbv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: cfg.Namespace,
			Labels:          map[string]string{extv1.SandboxIDLabel: string(c.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxClaim", Name: c.Name, UID: c.UID, Controller: ptr.To(true)}}},
			Spec: sbv1.SandboxSpec{SandboxBlueprint: kube.Template(cfg, podtoken.Fingerprint(m.Key.Public().(ed25519.PublicKey))).Spec.SandboxBlueprint}}
		_, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Create(ctx, sb, metav1.CreateOptions{})
		return err
	})
	_, cerr := m.Create(ctx, "v", sandbox.CreateOptions{BootTimeout: 30 * time.Second, Env: []string{"SECRET=s3cr3t"}})
	if err := <-forged; err != nil {
		t.Fatalf("forging a Sandbox of v's claim: %v", err)
	}
	if cerr != nil {
		t.Fatalf("neuron v: %v", cerr)
	}
	if name, _, err := m.Cluster.Resolve(ctx, "v"); err != nil || name == "forged" {
		t.Fatalf("neuron v resolves to %q (%v)", name, err)
	}
	got, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, "forged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := got.Labels[kube.LabelID]; id != "" {
		t.Fatalf("the forged Sandbox was labelled as neuron %q's", id)
	}
}

// onClaimMade runs f on neuron id's claim the moment it is made (its
// ADDED event), on a watch opened before onClaimMade returns; f's answer
// comes on the channel, once.
func onClaimMade(t *testing.T, ext extclient.Interface, cfg kube.Config, id string, f func(*extv1.SandboxClaim) error) <-chan error {
	t.Helper()
	w, err := ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", kube.ObjectName(id)).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	answer := make(chan error, 1)
	go func() {
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*extv1.SandboxClaim); ok && ev.Type == watch.Added {
				answer <- f(c)
				return
			}
		}
	}()
	return answer
}

// foreignSandbox makes neuron a, writes a file in it, and creates neuron
// b while inject points b's claim, the moment it is made, at a's Sandbox
// (nameA); b must not be linked to a's pod, read a's file or relabel a,
// and, where made says so, must be made.
func foreignSandbox(t *testing.T, made bool, inject func(ctx context.Context, ext extclient.Interface, ag agents.Interface, cfg kube.Config, claim *extv1.SandboxClaim, nameA string) error) {
	m, cfg, _, ag, ext := warmEnv(t, 1)
	ctx := context.Background()
	boot := sandbox.CreateOptions{BootTimeout: 30 * time.Second, Labels: labels.Set{"tenant": "alice"}}
	if _, err := m.Create(ctx, "a", boot); err != nil {
		t.Fatal(err)
	}
	nameA, _, err := m.Cluster.Resolve(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "echo alice-secret > secret"}}); err != nil {
		t.Fatal(err)
	}
	warmReady(t, ext, cfg, 1)
	injected := onClaimMade(t, ext, cfg, "b", func(claim *extv1.SandboxClaim) error {
		return inject(ctx, ext, ag, cfg, claim, nameA)
	})
	bOpts := boot
	bOpts.Labels = labels.Set{"tenant": "mallory"}
	_, cerr := m.Create(ctx, "b", bOpts)
	if err := <-injected; err != nil {
		t.Fatalf("pointing b's claim at a's Sandbox: %v", err)
	}
	if made && cerr != nil {
		t.Fatalf("neuron b: %v", cerr)
	}
	if cerr == nil {
		if nameB, _, _ := m.Cluster.Resolve(ctx, "b"); nameB == nameA {
			t.Fatalf("neuron b resolves to a's Sandbox %s", nameA)
		}
		c, err := m.Connect(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: "cat secret"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "alice") {
			t.Fatalf("neuron b reads a's file: %q", res.Stdout)
		}
	}
	if st, err := m.Get(ctx, "a"); err != nil || st.Labels["tenant"] != "alice" {
		t.Fatalf("neuron a after b's create (%v): %+v, %v", cerr, st, err)
	}
}

// A stop racing a deadline that wipes (another host's destroy, mid-way,
// and SetTimeout): the deadline is put on the claim only once the Sandbox
// is found running, so a stopped neuron, whose home a stop keeps, is not
// wiped at it (the review's second finding: the claim kept the wipe).
func TestWarmPoolStopRacesDeadline(t *testing.T) {
	m, cfg, _, _, ext := warmEnv(t, 1)
	ctx := context.Background()
	if _, err := m.Create(ctx, "s", sandbox.CreateOptions{BootTimeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := m.Cluster.Stop(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	_, err := m.SetTimeout(ctx, "s", time.Minute, sandbox.OnTimeoutWipe)
	if !errors.As(err, new(*sandbox.NotRunningError)) {
		t.Fatalf("SetTimeout of a neuron being stopped: %v", err)
	}
	c, err := ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, kube.ObjectName("s"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.Lifecycle != nil && c.Spec.Lifecycle.ShutdownTime != nil {
		t.Fatalf("the stopped neuron's claim will wipe it at %v", c.Spec.Lifecycle.ShutdownTime)
	}
}

// Two creates of one id at once, one from the pool (no environment) and
// one cold (an environment of its own), from two hosts: one gives way
// (each makes its object, then looks for the other's), and a wipe of the
// id leaves nothing of either (the review's third finding: both were
// made, and the wipe left the cold one's Sandbox and home).
func TestWarmPoolColdRace(t *testing.T) {
	m, cfg, core, ag, ext := warmEnv(t, 2)
	ctx := context.Background()
	boot := sandbox.CreateOptions{BootTimeout: 30 * time.Second}
	if _, err := m.Create(ctx, "first", boot); err != nil {
		t.Fatal(err)
	}
	m2 := &kube.Manager{Cluster: &kube.Cluster{Core: m.Cluster.Core, Agents: m.Cluster.Agents, Claims: ext, Config: cfg}, Key: m.Key}
	t.Cleanup(func() { m2.Close() })
	cold := boot
	cold.Env = []string{"SECRET=bob"}
	for i := range 4 {
		id := fmt.Sprintf("x%d", i)
		warmReady(t, ext, cfg, 2)
		var errWarm, errCold error
		var wg sync.WaitGroup
		wg.Go(func() { _, errWarm = m.Create(ctx, id, boot) })
		wg.Go(func() { _, errCold = m2.Create(ctx, id, cold) })
		wg.Wait()
		if errWarm == nil && errCold == nil {
			t.Fatalf("%s: both creates of one id succeeded", id)
		}
		if errWarm != nil && errCold != nil {
			t.Logf("%s: both gave way (%v; %v)", id, errWarm, errCold)
		}
		if err := m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}); err != nil && !errors.As(err, new(*sandbox.NotFoundError)) {
			t.Fatal(err)
		}
		waittest.For(t, 30*time.Second, "nothing of "+id+" to be left", func() bool {
			_, e1 := ext.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, kube.ObjectName(id), metav1.GetOptions{})
			_, e2 := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, kube.ObjectName(id), metav1.GetOptions{})
			_, e3 := core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, kube.HomeClaimName(id), metav1.GetOptions{})
			return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3)
		})
		all, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range all {
			if st.ID == id {
				t.Fatalf("%s is listed after its wipe: %+v", id, st)
			}
		}
	}
}
