// Package kubesim is the cluster's nodes for kube mode's tests: a
// simulated kubelet (and agent-sandbox's controller, as far as a neuron
// needs it) over any API server, client-go's fake clientset or a real
// kube-apiserver (test/kube), and the scenario every such test runs
// through kube.Manager.
package kubesim

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// Kubelet simulates the cluster's nodes (and, given agent-sandbox's
// client, its controller) in namespace: a pod made is bound to a node
// and the real agent runs for it in this process, on a loopback address
// of its own (its pod IP, 127.x.y.z) and the agent port, checking pod
// tokens against the key the trust ConfigMap holds when the pod starts,
// as a pod that mounts it does; its home is a directory kept per claim,
// as a volume is; a pod deleted (or marked for deletion, which a real
// API server holds for its kubelet) has its agent ended and is gone. A
// pod of a neuron named in fail never starts: its image cannot be
// pulled.
type Kubelet struct {
	t    T
	core kubernetes.Interface
	ag   agents.Interface // nil: no controller
	cfg  kube.Config
	// controller: the Kubelet stands in for agent-sandbox's controller
	// too (Start); else only for the garbage collector (StartBeside).
	controller bool
	root       string // the homes are in it
	fail       map[string]bool
	net        [2]byte // the second and third bytes of the pod IPs, 127.x.y.z

	// ctx ends with the test; wg holds the goroutines that follow
	// watches (follow), waited for at the end.
	ctx context.Context
	wg  sync.WaitGroup

	mu    sync.Mutex
	stops map[string]func()
	homes map[string]string // claim -> its home (with box: its neuron)
	box   *boxes            // InSandboxes
	n     int
	// enforcing: see Enforce; egressOpen: see EnforceIngressOnly.
	enforcing, egressOpen bool
}

// Enforce makes the Kubelet stand in for a network plugin that enforces
// the neurons' NetworkPolicies, as far as the network probe can see: the
// probe's denied port does not answer. Otherwise its pods share the
// host's loopback, open, as if no policy were there.
func (k *Kubelet) Enforce(on bool) {
	k.mu.Lock()
	k.enforcing, k.egressOpen = on, false
	k.mu.Unlock()
}

// EnforceIngressOnly makes the Kubelet stand in for a network plugin
// that enforces the policies' ingress rules and not their egress: the
// probe's denied port does not answer, but its pod reaches the control's.
func (k *Kubelet) EnforceIngressOnly() {
	k.mu.Lock()
	k.enforcing, k.egressOpen = true, true
	k.mu.Unlock()
}

// T is what a Kubelet needs of its owner: a test's testing.T, or
// test/kube/devcluster's stand-in for one. Its cleanups end the pods'
// agents.
type T interface {
	Cleanup(func())
	Error(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	TempDir() string
}

// Start starts a Kubelet for the neurons of cfg's namespace until the
// test ends.
func Start(t T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config, fail ...string) *Kubelet {
	return start(t, core, ag, cfg, true, fail)
}

// StartBeside is Start beside agent-sandbox's own controller: the
// Kubelet runs the pods and stands in for the garbage collector only (a
// Sandbox deleted in the foreground goes once its pod has); the
// controller makes and removes the pods and claims.
func StartBeside(t T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config, fail ...string) *Kubelet {
	return start(t, core, ag, cfg, false, fail)
}

func start(t T, core kubernetes.Interface, ag agents.Interface, cfg kube.Config, controller bool, fail []string) *Kubelet {
	cfg = cfg.Defaults()
	namespace := cfg.Namespace
	// The homes' directory, made before the cleanup below is registered:
	// removed after it has ended the agents that write there.
	k := &Kubelet{t: t, core: core, ag: ag, cfg: cfg, controller: controller, root: t.TempDir(), fail: map[string]bool{}, stops: map[string]func(){}, homes: map[string]string{}}
	// Pod IPs of their own for this kubelet: tests in other processes
	// run kubelets of their own beside it.
	k.net = [2]byte{byte(1 + rand.IntN(254)), byte(rand.IntN(256))}
	for _, id := range fail {
		k.fail[id] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.ctx = ctx
	t.Cleanup(func() {
		cancel()
		k.wg.Wait()
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, stop := range k.stops {
			stop()
		}
		if k.box != nil {
			for claim := range k.homes {
				k.wipeBox(claim)
			}
		}
	})
	k.follow(core.CoreV1().Pods(namespace).Watch, func(ev watch.Event) {
		pod, isPod := ev.Object.(*corev1.Pod)
		switch {
		case !isPod:
		case ev.Type == watch.Deleted:
			k.stop(pod.Name)
		case pod.DeletionTimestamp != nil:
			k.stop(pod.Name)
			zero := int64(0)
			core.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		case ev.Type == watch.Added && !k.runs(pod.Name) && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded:
			// (Added again, by a watch begun anew, it runs already, or
			// has ended.)
			k.run(ctx, pod)
		}
	})
	// The cluster's pvc-protection: a claim marked for deletion goes once
	// no pod uses it.
	k.follow(core.CoreV1().PersistentVolumeClaims(namespace).Watch, func(ev watch.Event) {
		pvc, isPVC := ev.Object.(*corev1.PersistentVolumeClaim)
		switch {
		case !isPVC:
		case ev.Type == watch.Deleted:
			// Its volume goes with it: a claim made again under the
			// name is a new, empty home.
			k.mu.Lock()
			_, had := k.homes[pvc.Name]
			delete(k.homes, pvc.Name)
			box := k.box
			k.mu.Unlock()
			if box != nil && had {
				k.wipeBox(pvc.Name)
			}
		case pvc.DeletionTimestamp != nil && len(pvc.Finalizers) > 0:
			k.release(ctx, pvc)
		}
	})
	if ag != nil {
		k.follow(ag.AgentsV1beta1().Sandboxes(namespace).Watch, func(ev watch.Event) {
			if sb, isSB := ev.Object.(*sbv1.Sandbox); isSB {
				k.reconcile(ctx, sb, ev.Type)
			}
		})
	}
	return k
}

// follow runs f for each event of the watches open makes, until the
// test ends. The first is open when follow returns. The API server ends
// a watch when it likes (a consumer it finds too slow, a timeout), and a
// kubelet that stopped there would leave pods running and deleted
// objects unreleased: the next watch goes on from the last version seen,
// or, that one too old, from the objects as they are (each ADDED again;
// what was deleted in between is not seen, and its agent runs on until
// the test ends: a gap the API server's watch cache, minutes long, makes
// unlikely in a test).
func (k *Kubelet) follow(open func(context.Context, metav1.ListOptions) (watch.Interface, error), f func(watch.Event)) {
	w, err := open(k.ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		version := ""
		for {
			began := time.Now()
			version = k.drain(w, version, f)
			for {
				if time.Since(began) < time.Second {
					// One that ended at once (or would not open): a pause
					// before the next, not a busy loop.
					select {
					case <-k.ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
				if k.ctx.Err() != nil {
					return
				}
				if w, err = open(k.ctx, metav1.ListOptions{ResourceVersion: version}); err == nil {
					break
				}
				if expired(err) {
					version = ""
				}
				began = time.Time{}
			}
		}
	}()
}

// drain hands f the events of w until it ends, and returns the version
// to go on from: the last one seen, or "" when the server says that
// version is gone.
func (k *Kubelet) drain(w watch.Interface, version string, f func(watch.Event)) string {
	defer w.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return version
		case ev, ok := <-w.ResultChan():
			if !ok {
				return version
			}
			if ev.Type == watch.Error {
				if expired(apierrors.FromObject(ev.Object)) {
					return ""
				}
				return version
			}
			if o, isObj := ev.Object.(metav1.Object); isObj && o.GetResourceVersion() != "" {
				version = o.GetResourceVersion()
			}
			f(ev)
		}
	}
}

// expired says whether err is the API server's answer to a watch from a
// version it no longer has.
func expired(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

// runs says whether this kubelet runs pod name's agent.
func (k *Kubelet) runs(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.stops[name]
	return ok
}

// release lets a claim marked for deletion go once no pod mounts it,
// waiting for the pods that do.
func (k *Kubelet) release(ctx context.Context, pvc *corev1.PersistentVolumeClaim) {
	for ctx.Err() == nil {
		pods, err := k.core.CoreV1().Pods(pvc.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		used := false
		for _, p := range pods.Items {
			for _, v := range p.Spec.Volumes {
				used = used || v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name
			}
		}
		if !used {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond): // a poll of the pods, as the controller's resync
		}
	}
	cur, err := k.core.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil || cur.UID != pvc.UID {
		return
	}
	cur.Finalizers = nil
	k.core.CoreV1().PersistentVolumeClaims(pvc.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
}

// reconcile is agent-sandbox's controller, as far as a neuron needs it:
// a running Sandbox has its pod; a suspended or deleted one has none.
func (k *Kubelet) reconcile(ctx context.Context, sb *sbv1.Sandbox, et watch.EventType) {
	pods := k.core.CoreV1().Pods(sb.Namespace)
	if !k.controller {
		// The garbage collector: a Sandbox deleted in the foreground
		// takes its pod with it, then goes; one deleted in the background
		// (its controller's, at a shutdown time with policy Delete) goes
		// at once, and what it owned after it.
		if et != watch.Deleted && sb.DeletionTimestamp != nil && len(sb.Finalizers) > 0 {
			pods.Delete(ctx, sb.Name, metav1.DeleteOptions{})
			k.collect(ctx, sb)
		}
		if et == watch.Deleted {
			k.orphans(ctx, sb)
		}
		return
	}
	if et == watch.Deleted || sb.DeletionTimestamp != nil || sb.Spec.OperatingMode == sbv1.SandboxOperatingModeSuspended {
		pods.Delete(ctx, sb.Name, metav1.DeleteOptions{})
		if et != watch.Deleted && sb.DeletionTimestamp != nil && len(sb.Finalizers) > 0 {
			k.collect(ctx, sb)
		}
		return
	}
	// The claims of the Sandbox's templates, "<template>-<sandbox>",
	// owned by it, as the controller makes them (kept while it lives).
	for _, ct := range sb.Spec.VolumeClaimTemplates {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: ct.Name + "-" + sb.Name, Namespace: sb.Namespace, Labels: ct.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sbv1.GroupVersion.String(), Kind: "Sandbox", Name: sb.Name, UID: sb.UID}}},
			Spec: *ct.Spec.DeepCopy()}
		k.core.CoreV1().PersistentVolumeClaims(sb.Namespace).Create(ctx, pvc, metav1.CreateOptions{}) // an existing claim stays
	}
	// Controlled by its Sandbox, as the controller makes it.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: sb.Namespace, Labels: sb.Spec.PodTemplate.ObjectMeta.Labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sb, sbv1.GroupVersion.WithKind("Sandbox"))}},
		Spec: *sb.Spec.PodTemplate.Spec.DeepCopy()}
	// The controller makes the claims of the Sandbox's templates; the pod
	// mounts them by the name it gives them.
	for i, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil && v.Name == "home" {
			pod.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home-" + sb.Name}}
		}
	}
	pods.Create(ctx, pod, metav1.CreateOptions{}) // an existing pod stays
}

// CollectClaims stands in for the cluster's garbage collector for
// agent-sandbox's SandboxClaims too (beside its controller, StartBeside):
// a claim deleted takes the Sandbox it holds with it (and that Sandbox
// its pod and home), until the test ends.
func (k *Kubelet) CollectClaims(ext extclient.Interface) {
	ctx := k.ctx
	k.follow(ext.ExtensionsV1beta1().SandboxClaims(k.cfg.Namespace).Watch, func(ev watch.Event) {
		c, isClaim := ev.Object.(*extv1.SandboxClaim)
		if !isClaim || ev.Type != watch.Deleted {
			return
		}
		sbs, err := k.ag.AgentsV1beta1().Sandboxes(c.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, sb := range sbs.Items {
			if ref := metav1.GetControllerOf(&sb); ref != nil && ref.UID == c.UID {
				k.ag.AgentsV1beta1().Sandboxes(c.Namespace).Delete(ctx, sb.Name, metav1.DeleteOptions{})
			}
		}
	})
}

// orphans deletes the pods and claims deleted Sandbox sb owned, as the
// cluster's garbage collector does.
func (k *Kubelet) orphans(ctx context.Context, sb *sbv1.Sandbox) {
	owned := func(refs []metav1.OwnerReference) bool {
		return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == sb.UID })
	}
	if pods, err := k.core.CoreV1().Pods(sb.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if owned(p.OwnerReferences) {
				k.core.CoreV1().Pods(sb.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
			}
		}
	}
	if claims, err := k.core.CoreV1().PersistentVolumeClaims(sb.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range claims.Items {
			if owned(c.OwnerReferences) {
				k.core.CoreV1().PersistentVolumeClaims(sb.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
			}
		}
	}
}

// collect is the cluster's garbage collector for a Sandbox deleted in
// the foreground: once its pod is gone, its finalizers are cleared and
// it goes.
func (k *Kubelet) collect(ctx context.Context, sb *sbv1.Sandbox) {
	deadline := time.Now().Add(10 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if _, err := k.core.CoreV1().Pods(sb.Namespace).Get(ctx, sb.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond): // a poll, as the collector's resync
		}
	}
	sbs := k.ag.AgentsV1beta1().Sandboxes(sb.Namespace)
	cur, err := sbs.Get(ctx, sb.Name, metav1.GetOptions{})
	if err != nil || cur.UID != sb.UID {
		return
	}
	cur.Finalizers = nil
	sbs.Update(ctx, cur, metav1.UpdateOptions{})
}

// run binds pod to a node and starts its agent, or, for a neuron in
// fail, says its image cannot be pulled.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod) {
	pods := k.core.CoreV1().Pods(pod.Namespace)
	if claim := k.unbound(ctx, pod); claim != "" {
		// What the scheduler says of a pod whose claim waits for a
		// volume no provisioner makes: it stays unscheduled.
		pod = pod.DeepCopy()
		pod.Status.Phase = corev1.PodPending
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."}}
		pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return
	}
	if pod.Spec.NodeName == "" {
		// A real API server takes a node only through the binding; the
		// fake clientset records the binding and changes nothing.
		pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}, metav1.CreateOptions{})
		if got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
			pod = got
		}
		if pod.Spec.NodeName == "" {
			pod = pod.DeepCopy()
			pod.Spec.NodeName = "node-1"
			if got, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err == nil {
				pod = got
			}
		}
	}
	pod = pod.DeepCopy()
	if pod.UID == "" {
		k.mu.Lock()
		k.n++
		pod.UID = types.UID(fmt.Sprintf("uid-%s-%d", pod.Name, k.n)) // the fake clientset gives none
		k.mu.Unlock()
		if got, err := pods.Update(ctx, pod, metav1.UpdateOptions{}); err == nil {
			pod = got.DeepCopy()
		}
	}
	if pod.Labels[kube.LabelProbe] != "" {
		k.runProbe(ctx, pod)
		return
	}
	id := pod.Labels[kube.LabelID]
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	if k.fail[id] {
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.AgentContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "pull access denied"}}}}
		pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return
	}
	claim := ""
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	k.mu.Lock()
	box := k.box
	home := k.homes[claim]
	if box != nil {
		home = "(its neuron)"
		k.homes[claim] = home
	}
	if home == "" {
		var err error
		if home, err = os.MkdirTemp(k.root, "home-"); err != nil {
			k.mu.Unlock()
			k.t.Error(err)
			return
		}
		k.homes[claim] = home
	}
	k.mu.Unlock()
	trust, err := k.trustPEM(ctx)
	var pub ed25519.PublicKey
	if err == nil {
		pub, err = podtoken.ParsePublic(trust)
	}
	if err != nil {
		if ctx.Err() == nil { // else the test is ending, and its pods with it
			k.t.Errorf("pod %s: %v", pod.Name, err)
		}
		return
	}
	// The agent's -trust-key-sha256: another key than the pod was made
	// for, and the agent exits at once.
	for _, a := range pod.Spec.Containers[0].Args {
		if pin, ok := strings.CutPrefix(a, "--trust-key-sha256="); ok {
			if err := podtoken.CheckFingerprint(pub, pin); err != nil {
				pod.Status.Phase = corev1.PodFailed
				pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.AgentContainer, Image: pod.Spec.Containers[0].Image,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "cortex-agent: " + err.Error()}}}}
				pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return
			}
		}
	}
	ip, addr, err := k.podAddress()
	if err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
		return
	}
	if box != nil {
		listens, err := k.runBoxed(ctx, pod, claim, ip, addr, trust)
		if err != nil && ctx.Err() == nil {
			k.t.Errorf("pod %s: %v", pod.Name, err)
		}
		if listens {
			k.running(ctx, pod, ip)
		}
		return
	}
	self := podtoken.Identity{Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID)}
	// The container's environment: the pod's variables, HOME and the
	// working directory mapped to this home, PATH the host's.
	// A pod's loopback is its own 127.x.y.z here: the egress listener
	// (--egress) and the proxy variables that name it move there.
	// The egress authority's directory (secrets) is one of the pod's
	// own here, and so are the variables that name it.
	egressAt, caDir, caPEM := "", "", ""
	if slices.Contains(pod.Spec.Containers[0].Args, "--egress-ca="+boot.EgressCADir) {
		if caDir, err = os.MkdirTemp(k.root, "egress-ca-"); err != nil {
			k.t.Error(err)
			return
		}
	}
	env := append([]string{"PATH=" + os.Getenv("PATH")}, containerEnv(pod.Spec.Containers[0], ip, home, caDir)...)
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == boot.EnvEgressCA {
			caPEM = e.Value
		}
	}
	// The agent runs as its container's arguments say: its neuron is
	// its --id ("" in a warm pod of the pool).
	agentID, workdir := "", ""
	for _, a := range pod.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--id="); ok {
			agentID = v
		}
		if v, ok := strings.CutPrefix(a, "--workdir=/home/agent"); ok {
			workdir = home + v
		}
		if v, ok := strings.CutPrefix(a, "--egress="); ok {
			egressAt = loopbackOf(v, ip)
		}
	}
	a, err := agent.New(agent.Config{ID: agentID, Root: home, Workdir: workdir, Listen: addr, Egress: egressAt, EgressCADir: caDir, EgressCAPEM: []byte(caPEM), Version: "test", Logger: log.New(io.Discard, "", 0), Env: env,
		TokenCheck: func(tok string) error { _, err := podtoken.Verify(pub, tok, self, time.Now()); return err }})
	if err != nil {
		k.t.Error(err)
		return
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(actx) }()
	k.mu.Lock()
	k.stops[pod.Name] = func() { cancel(); <-done }
	k.mu.Unlock()
	k.running(ctx, pod, ip)
}

// running reports pod running and ready on ip.
func (k *Kubelet) running(ctx context.Context, pod *corev1.Pod, ip string) {
	pods := k.core.CoreV1().Pods(pod.Namespace)
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.AgentContainer, Image: pod.Spec.Containers[0].Image, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	_, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	switch {
	case err == nil, ctx.Err() != nil:
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Deleted (a stop) or changed (marked for deletion) since it was
		// read: the agent goes with the pod's deletion, as a kubelet's
		// container does.
	default:
		k.t.Errorf("the status of pod %s: %v", pod.Name, err)
	}
}

// NeverBinds is a storage class whose claims no volume ever binds, on a
// Kubelet: the pods that mount one are never scheduled.
const NeverBinds = "never-binds"

// unbound is the claim of pod's that is of class NeverBinds, or "".
func (k *Kubelet) unbound(ctx context.Context, pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		c, err := k.core.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err == nil && c.Spec.StorageClassName != nil && *c.Spec.StorageClassName == NeverBinds {
			return c.Name
		}
	}
	return ""
}

// trustPEM is the trust ConfigMap's key file, as a pod that mounts it
// sees it.
func (k *Kubelet) trustPEM(ctx context.Context) (string, error) {
	cm, err := k.core.CoreV1().ConfigMaps(k.cfg.Namespace).Get(ctx, k.cfg.TrustConfigMap, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("the trust ConfigMap: %w", err)
	}
	return cm.Data[kube.TrustKey], nil
}

// containerEnv is ct's environment as this kubelet runs its agent: the
// pod's loopback is its IP, /home/agent is home ("": the agent's own)
// and the egress authority's directory caDir ("": the pod's).
func containerEnv(ct corev1.Container, ip, home, caDir string) []string {
	var env []string
	for _, e := range ct.Env {
		v := e.Value
		if home != "" && strings.HasPrefix(v, "/home/agent") {
			v = home + strings.TrimPrefix(v, "/home/agent")
		}
		if caDir != "" && strings.HasPrefix(v, boot.EgressCADir+"/") {
			v = caDir + strings.TrimPrefix(v, boot.EgressCADir)
		}
		env = append(env, e.Name+"="+loopbackOf(v, ip))
	}
	return env
}

// loopbackOf is v with the pod's loopback, 127.0.0.1, as this kubelet's
// pods have it: their own IP.
func loopbackOf(v, ip string) string { return strings.ReplaceAll(v, "127.0.0.1:", ip+":") }

// podAddress finds a pod IP of this kubelet's whose agent port is free,
// and returns it and the agent's address.
func (k *Kubelet) podAddress() (string, string, error) {
	for range 64 {
		k.mu.Lock()
		k.n++
		n := k.n
		k.mu.Unlock()
		ip := fmt.Sprintf("127.%d.%d.%d", k.net[0], (int(k.net[1])+n/254)%256, 1+n%254) // 65,000 pods and more
		addr := net.JoinHostPort(ip, strconv.Itoa(int(k.cfg.AgentPort)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: by a pod of another kubelet's, or an agent on its way out
		}
		ln.Close()
		return ip, addr, nil
	}
	return "", "", errors.New("no free pod address")
}

// Kill ends the agent of pod name, as its process's death would (its
// connections close), and reports the pod Failed with the container's
// exit code, as a kubelet does.
func (k *Kubelet) Kill(ctx context.Context, namespace, name string, code int32) error {
	k.stop(name)
	return k.terminated(ctx, namespace, name, code, "")
}

// terminated reports pod name Failed, its agent's container ended with
// code (and message: its log's last lines).
func (k *Kubelet) terminated(ctx context.Context, namespace, name string, code int32, message string) error {
	return k.failPod(ctx, namespace, name, "Error", func(pod *corev1.Pod) {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: kube.AgentContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: message, FinishedAt: metav1.Now()}}}}
	})
}

// Lose reports pod name Failed, its node lost, while its agent runs on
// and its connections stay open: a host learns of it only from the
// cluster (or from its channel's keepalive, when the network is gone
// too).
func (k *Kubelet) Lose(ctx context.Context, namespace, name string) error {
	return k.failPod(ctx, namespace, name, "NodeLost", func(pod *corev1.Pod) {
		pod.Status.Message = "the node " + pod.Spec.NodeName + " which was running the pod is unresponsive"
	})
}

// failPod writes pod name's status Failed, with reason and what edit adds.
func (k *Kubelet) failPod(ctx context.Context, namespace, name, reason string, edit func(*corev1.Pod)) error {
	pods := k.core.CoreV1().Pods(namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod = pod.DeepCopy()
	pod.Status.Phase, pod.Status.Reason = corev1.PodFailed, reason
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	edit(pod)
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// runProbe runs a pod of the network probe (kube.ProbePod, or its
// control, kube.ControlPod): its containers' listeners, greeting as
// cortex-agent probe-listen does, each on the pod's IP. With Enforce, the
// probe pod's listener on the port the policies deny is not reached, as
// under a plugin that enforces them (the control's is: no policy selects
// it).
func (k *Kubelet) runProbe(ctx context.Context, pod *corev1.Pod) {
	ip, _, err := k.podAddress()
	if err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
		return
	}
	k.mu.Lock()
	enforcing, egressOpen := k.enforcing, k.egressOpen
	k.mu.Unlock()
	// What the pod reaches when the probe asks it to dial (its egress).
	var d net.Dialer
	dial := d.DialContext
	if enforcing && !egressOpen && pod.Labels[kube.LabelRole] == "neuron" {
		dial = func(ctx context.Context, _, addr string) (net.Conn, error) {
			<-ctx.Done() // dropped, as an enforcing plugin drops it
			return nil, fmt.Errorf("dial tcp %s: i/o timeout", addr)
		}
	}
	var lns []net.Listener
	for i, c := range pod.Spec.Containers {
		if enforcing && i > 0 && pod.Labels[kube.LabelRole] == "neuron" {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(c.Ports[0].ContainerPort))))
		if err != nil {
			k.t.Errorf("pod %s: %v", pod.Name, err)
			return
		}
		lns = append(lns, ln)
	}
	var wg sync.WaitGroup
	for _, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			protocol.GreetProbes(ln, dial) // until stopped
		}()
	}
	k.mu.Lock()
	k.stops[pod.Name] = func() {
		for _, ln := range lns {
			ln.Close()
		}
		wg.Wait()
	}
	k.mu.Unlock()
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	if _, err := k.core.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		k.t.Errorf("the status of pod %s: %v", pod.Name, err)
	}
}

func (k *Kubelet) stop(name string) {
	k.mu.Lock()
	stop := k.stops[name]
	delete(k.stops, name)
	k.mu.Unlock()
	if stop != nil {
		stop()
	}
}
