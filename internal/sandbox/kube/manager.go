package kube

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Mode is kube mode's name.
const Mode = "kube"

// tokenLife is how long a pod token the manager signs lives: one dial.
const tokenLife = 2 * time.Minute

// deadAfter is how long a link's connection may go unanswered before
// what is pending on it fails NOT_RUNNING (link.Options.DeadAfter): a
// node lost closes nothing. 1.5 s: the loss is seen within 1.95 s while
// a request is unacknowledged, and at the keepalive probe after it (2.05
// s) while idle.
const deadAfter = 1500 * time.Millisecond

// Manager runs neurons as Kubernetes objects (sandbox.Manager): what it
// knows of them is what the cluster holds (their objects, labels and
// state), so another host with the same configuration sees and drives
// the same neurons. It keeps only the links to their agents.
type Manager struct {
	Cluster *Cluster
	// Key signs the pod tokens its links present (the trust ConfigMap
	// holds its public half).
	Key ed25519.PrivateKey
	// Address is where a pod's agent listens (default: the pod's IP and
	// the agent port); a simulated kubelet's tests set their own.
	Address func(pod *corev1.Pod) (string, error)
	// Forward, when set, carries the links to the agents over the API
	// server's port-forward instead of to the pods' IPs (a host outside
	// the cluster: kube.port_forward). Address is not used then.
	Forward *Forwarder
	// Layout is the host's home: a wipe removes what this host keeps of
	// the neuron there (its terminals' writer locks). Empty: nothing.
	Layout layout.Layout
	// Logf, when set, is told what goes wrong beside a request (a
	// neuron's egress tunnel); nil: the standard logger.
	Logf func(format string, args ...any)
	// AgentBinary finds the cortex-agent this host runs a neuron's egress
	// proxy with ("cortex-agent egress-tunnel"); nil: no neuron of this
	// host's gets network egress.
	AgentBinary func() (string, error)
	// EgressUpstreamCA is a PEM file of authorities the proxy checks the
	// servers of a neuron's secrets against, besides the host's roots
	// (egress.upstream_ca); "": the host's roots alone.
	EgressUpstreamCA string
	// tunnel, when set, serves every egress tunnel instead (tests).
	tunnel tunnelServer

	mu    sync.Mutex
	links map[string]podLink
	// watch is the informer over the namespace's neuron pods, started
	// with the first link (see watchPods); stopWatch ends it.
	watch     sync.Once
	stopWatch func()
	watched   func() bool // the informer has listed what there is
	closed    bool        // Close was called: no link is kept after
	// egress counts the egress tunnels held (holdEgress), one per link
	// to a neuron with network egress; Close waits for them.
	egress sync.WaitGroup

	// probeMu guards the network probe's state: the probe in flight (one
	// at a time), and what the last check found (verdict, or verdictErr
	// where there was none) and when, kept for a minute.
	probeMu     sync.Mutex
	probing     *probeRun
	stopProbe   func()
	verdict     NetworkVerdict
	verdictErr  error
	verdictRead time.Time

	// poolMu guards poolMade: the warm pool's objects are as this host's
	// configuration says (ensurePool). claims counts the creates that
	// were claims on it.
	poolMu   sync.Mutex
	poolMade bool
	claims   sandbox.ClaimRecorder
}

// podLink is the link to a neuron's agent and the pod it was made for.
type podLink struct {
	*link.Link
	uid types.UID
}

var (
	_ sandbox.Manager       = (*Manager)(nil)
	_ sandbox.Deadliner     = (*Manager)(nil)
	_ sandbox.ClaimReporter = (*Manager)(nil)
)

// Mode names the isolation.
func (m *Manager) Mode() string { return Mode }

// unenforceable returns an UnenforceableError for what a create asks that this
// mode cannot give (yet, or ever).
func unenforceable(opts sandbox.CreateOptions) error {
	u := func(policy, why string) error {
		return &sandbox.UnenforceableError{Mode: Mode, Policy: policy, Reason: why}
	}
	switch {
	case opts.Network.Mode == sandbox.NetworkFull:
		return u("network full", "a kube neuron reaches nothing directly (the namespace's NetworkPolicies deny it): "+
			"use network egress with an allow-list, which the host's proxy enforces (docs/kube.md)")
	case opts.Ctx != "":
		return u("a /ctx mount", "a pod has no host mount of /ctx")
	case opts.NestedUserns:
		return u("nested user namespaces", "the pod's seccomp profile and dropped capabilities forbid them")
	case opts.Image != "":
		return u("image "+opts.Image, "a kube neuron runs kube.image; build and push another image and set it there")
	case opts.AutoPause > 0:
		return u("auto-pause", "a pod's memory cannot be kept: kube mode does not pause")
	case opts.OnTimeout == sandbox.OnTimeoutPause:
		return u("on-timeout pause", "a pod's memory cannot be kept: kube mode does not pause")
	}
	return nil
}

// noDeleteAtDeadline is why the pods path cannot wipe at a deadline.
const noDeleteAtDeadline = "a plain pod's deadline (activeDeadlineSeconds) ends the pod and keeps its claim; " +
	"agent-sandbox's Sandbox can delete itself and its home at its shutdown time: install it (docs/kube.md)"

// Create makes neuron id's objects (or starts a stopped one on its home),
// waits until its agent is ready, and connects. A create that fails
// leaves nothing it made: a new neuron is wiped, a stopped one stopped
// again.
func (m *Manager) Create(ctx context.Context, id string, opts sandbox.CreateOptions) (*sandbox.State, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := unenforceable(opts); err != nil {
		return nil, err
	}
	if err := sandbox.CheckSecrets(opts); err != nil {
		return nil, err
	}
	if err := m.checkNetwork(ctx); err != nil {
		return nil, err
	}
	if opts.Network.Mode == sandbox.NetworkEgress && m.tunnel == nil {
		if _, err := m.agentBinary(); err != nil {
			return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "network egress", Reason: err.Error()}
		}
	}
	if m.Cluster.Agents == nil && opts.Timeout > 0 && opts.OnTimeout == sandbox.OnTimeoutWipe {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "on-timeout wipe", Reason: noDeleteAtDeadline}
	}
	boot := opts.BootTimeout
	if boot <= 0 {
		boot = 2 * time.Minute // an image pull and a volume attach, on a cluster
	}
	v, err := m.Cluster.read(ctx, id, false, false)
	if err != nil {
		return nil, err
	}
	before := v.Observed
	if before.Phase == Absent && v.claim != nil {
		return nil, errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s is being created (its SandboxClaim is there, with no Sandbox yet): try again", id))
	}
	if before.Phase == Running || before.Phase == Unhealthy {
		st, err := m.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		return nil, &sandbox.AlreadyRunningError{State: st}
	}
	if before.Phase == Dead || before.Phase == Failed {
		// Its agent died (or its pod never started): stopped first, its
		// home kept, then started again as a stopped neuron is.
		if err := m.Cluster.Stop(ctx, id); err != nil {
			return nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, boot)
		err := m.awaitEnded(sctx, id, v.name, false)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("neuron %s was %s (%s); stopping it to start it again: %w", id, before.Phase, before.Reason, err)
		}
		before = Observed{Phase: Stopped}
	}
	n := Neuron{ID: id, Labels: opts.Labels, Env: opts.Env, Limits: opts.Limits,
		TrustKeySHA256: podtoken.Fingerprint(m.Key.Public().(ed25519.PublicKey))}
	if opts.Network.Mode == sandbox.NetworkEgress {
		n.Egress = slices.Clone(opts.Network.Allow)
	}
	if len(opts.Secrets) > 0 {
		// New placeholders and a new authority at every start, as nsbox's.
		if n.Secrets, err = makeSecrets(m.Key, m.Cluster.Config.Defaults().Namespace, id, opts.Secrets); err != nil {
			return nil, fmt.Errorf("neuron %s's secrets: %w", id, err)
		}
	}
	if opts.Timeout > 0 {
		d := time.Now().Add(opts.Timeout)
		n.Deadline, n.Timeout, n.OnTimeout = &d, opts.Timeout, opts.OnTimeout
	}
	var st *sandbox.State
	if before.Phase == Absent && m.warmable(opts) {
		st, err = m.createClaimed(ctx, n, boot)
	} else {
		st, err = m.create(ctx, n, before, boot)
	}
	if err != nil {
		return nil, err
	}
	if n.Deadline != nil {
		// What the cluster keeps: whole seconds; stop, unless a wipe.
		d := WholeSeconds(*n.Deadline)
		st.Deadline, st.Timeout, st.OnTimeout = &d, opts.Timeout, sandbox.OnTimeoutStop
		if n.OnTimeout == sandbox.OnTimeoutWipe {
			st.OnTimeout = sandbox.OnTimeoutWipe
		}
	}
	return st, nil
}

// create makes neuron n's Sandbox (or pod), or starts it again when it
// was stopped (before), and connects; a create that fails is undone.
func (m *Manager) create(ctx context.Context, n Neuron, before Observed, boot time.Duration) (*sandbox.State, error) {
	id := n.ID
	name, err := m.Cluster.create(ctx, n)
	if err != nil {
		return nil, err
	}
	st, err := m.await(ctx, id, name, "", boot)
	if err != nil {
		wipe := before.Phase != Stopped
		undo := m.Cluster.Wipe
		if !wipe {
			undo = m.Cluster.Stop
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		uerr := undo(uctx, id)
		if uerr == nil {
			uerr = m.awaitEnded(uctx, id, name, wipe)
		}
		if uerr != nil {
			err = errors.Join(err, fmt.Errorf("and undoing the create: %w", uerr))
		}
		return nil, err
	}
	return st, nil
}

// await waits until neuron id's pod, name, is running, or cannot run,
// within boot, and connects to its agent. owner, when set, is the uid of
// the Sandbox the neuron's claim holds (see checkPod).
func (m *Manager) await(ctx context.Context, id, name string, owner types.UID, boot time.Duration) (*sandbox.State, error) {
	ctx, cancel := context.WithTimeout(ctx, boot)
	defer cancel()
	cfg := m.Cluster.Config.Defaults()
	pods := m.Cluster.Core.CoreV1().Pods(cfg.Namespace)
	last := Observed{Phase: Scheduling}
	check := func(pod *corev1.Pod) (*sandbox.State, error, bool) {
		if pod.Name != name {
			return nil, nil, false
		}
		last = Observe(nil, pod, true, false)
		switch last.Phase {
		case Running:
			if !ofNeuron(id, pod, m.Cluster.Agents != nil, owner) {
				// Not yet known as the neuron's: connect once it is.
				last.Reason = "its pod does not name the neuron yet"
				return nil, nil, false
			}
			st, err := m.connect(ctx, id, pod, owner)
			return st, err, true
		case Failed, Dead:
			return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s did not start: %s", id, last.Reason)), true
		}
		return nil, nil, false
	}
	// A pod that runs already (a warm one of the pool) needs no watch; a
	// read after the watch is open misses no change before it.
	if pod, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil {
		if st, err, done := check(pod); done {
			return st, err
		}
	}
	var st *sandbox.State
	done, err := follow(ctx, func() (watch.Interface, error) {
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		return w, explainIf(err, "watch", "pods", cfg.Namespace)
	}, func() (bool, error) {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var done bool
		st, err, done = check(pod)
		return done, err
	}, func(ev watch.Event) (bool, error) {
		pod, isPod := ev.Object.(*corev1.Pod)
		if !isPod || ev.Type == watch.Deleted {
			return false, nil
		}
		var done bool
		var err error
		st, err, done = check(pod)
		return done, err
	})
	if done || err != nil {
		return st, err
	}
	msg := fmt.Sprintf("neuron %s was not ready within %v: it is %s (%s)", id, boot, last.Phase, last.Reason)
	if last.Phase == Scheduling {
		msg += m.unboundHome(name)
	}
	return nil, errdefs.New(errdefs.Timeout, msg)
}

// unboundHome says, when the home claim of the neuron whose objects are
// named name is there and not bound to a volume yet (what keeps a pod
// from its node), which claim and storage class, and what to run; else "".
func (m *Manager) unboundHome(name string) string {
	cfg := m.Cluster.Config.Defaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := m.Cluster.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, homeClaimOf(name), metav1.GetOptions{})
	if err != nil || c.Status.Phase != corev1.ClaimPending {
		return ""
	}
	class := "the cluster's default"
	if c.Spec.StorageClassName != nil {
		class = *c.Spec.StorageClassName
	}
	return fmt.Sprintf("; its home, claim %s, has no volume yet: storage class %s (kube.storage_class) has not provided one "+
		"(kubectl -n %s describe pvc %s)", c.Name, class, cfg.Namespace, c.Name)
}

// dialer returns where the link to neuron id's agent in pod dials. Every
// dial but the first (the first and each one after the connection drops)
// reads the pod again, and dials it only as long as it is the pod the link
// was made for and runs: gone, replaced (another uid) or not running, and
// the link dials no one, rather than whatever now answers at its old
// address (the host does not authenticate the agent: a pod token proves
// the host to the pod).
//
// gone is called when that is for good (the pod deleted, replaced, dead
// or stopping): the link's owner ends it then, even when no informer
// event says so (one missed in a relist, or come before the link was
// kept).
func (m *Manager) dialer(id string, pod *corev1.Pod, gone func()) func(context.Context) (string, error) {
	addr := m.Address
	if m.Forward != nil {
		addr = func(p *corev1.Pod) (string, error) { return forwardAddress(p), nil }
	}
	if addr == nil {
		port := m.Cluster.Config.Defaults().AgentPort
		addr = func(p *corev1.Pod) (string, error) {
			ip := net.ParseIP(p.Status.PodIP)
			if ip == nil || ip.IsUnspecified() || ip.IsMulticast() {
				return "", fmt.Errorf("pod %s has no IP an agent can listen on (%.64q)", p.Name, p.Status.PodIP)
			}
			return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
		}
	}
	redial := false
	return func(ctx context.Context) (string, error) {
		p := pod
		if redial {
			cur, err := m.Cluster.Core.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				gone()
			}
			if err != nil {
				return "", fmt.Errorf("neuron %s's pod: %w", id, err)
			}
			if cur.UID != pod.UID {
				gone()
				return "", fmt.Errorf("neuron %s's pod %s was replaced (uid %s, was %s)", id, pod.Name, cur.UID, pod.UID)
			}
			if o := Observe(nil, cur, true, true); o.Phase != Running {
				if o.Phase != Unhealthy && o.Phase != Starting {
					gone()
				}
				return "", fmt.Errorf("neuron %s is %s: %s", id, o.Phase, o.Reason)
			}
			p = cur
		}
		redial = true
		return addr(p)
	}
}

// connect links to the agent of neuron id in pod, signing a token for
// that pod before each dial.
func (m *Manager) connect(ctx context.Context, id string, pod *corev1.Pod, owner types.UID) (*sandbox.State, error) {
	secrets, err := m.checkPod(id, pod, owner)
	if err != nil {
		return nil, err
	}
	self := podtoken.Identity{Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID)}
	var made atomic.Pointer[link.Link]
	var once sync.Once
	gone := func() {
		if l := made.Load(); l != nil {
			// Not on the dialling goroutine: Close waits for it.
			once.Do(func() { go m.unlink(id, podLink{l, pod.UID}) })
		}
	}
	dial := m.dialer(id, pod, gone)
	o := link.Options{
		Neuron: agentID(pod), Software: "nsys-cortex", DeadAfter: deadAfter,
		TokenFunc: func() (string, error) { return podtoken.Sign(m.Key, self, tokenLife, time.Now()) },
	}
	if m.Forward != nil {
		o.DialConn = m.dialForwarded
	}
	l := link.Dial(dial, o)
	if _, err := l.WaitConnected(ctx); err != nil {
		l.Close()
		return nil, errdefs.New(errdefs.Unavailable, fmt.Sprintf("neuron %s's agent at pod %s/%s: %v", id, pod.Namespace, pod.Name, errors.Join(err, l.DialError())))
	}
	made.Store(l)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		l.Close()
		return nil, errdefs.New(errdefs.Unavailable, "the kube manager is closed")
	}
	if m.links == nil {
		m.links = map[string]podLink{}
	}
	old := m.links[id]
	m.links[id] = podLink{l, pod.UID}
	if rules, ok, _ := podEgress(pod); ok { // checked by checkPod
		m.egress.Add(1)
		go m.holdEgress(id, l, rules, secrets)
	}
	m.mu.Unlock()
	if old.Link != nil {
		old.Close() // outside the lock: a close waits for its dialling
	}
	m.watchPods()
	return stateOf(id, pod, nil, Observed{Phase: Running, PodIP: pod.Status.PodIP}), nil
}

// checkPod refuses to link neuron id to pod unless the pod is id's
// (ofNeuron; its agent serves id or, a warm pod of the pool, none) and is
// as kube mode makes every pod (hardened; its agent pinned to this host's
// trust key): a SandboxTemplate or Sandbox someone changed does not get
// this host's tokens.
func (m *Manager) checkPod(id string, pod *corev1.Pod, owner types.UID) (*boot.EgressTunnelSecrets, error) {
	if !ofNeuron(id, pod, m.Cluster.Agents != nil, owner) {
		return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s's pod %s/%s names neuron %q, or its Sandbox does not control it", id, pod.Namespace, pod.Name, podNeuron(pod)))
	}
	if a := agentID(pod); a != "" && a != id {
		return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s's pod %s/%s runs the agent of neuron %q", id, pod.Namespace, pod.Name, a))
	}
	if err := Hardened(m.Cluster.Config, pod.Spec, podtoken.Fingerprint(m.Key.Public().(ed25519.PublicKey))); err != nil {
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s's pod %s/%s is not as kube mode makes its pods, so this host does not connect to it: %v "+
			"(was its Sandbox, or the warm pool's SandboxTemplate, changed? docs/kube.md)", id, pod.Namespace, pod.Name, err))
	}
	_, has, err := podEgress(pod)
	if err != nil {
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s: %v: this host serves no allow-list it cannot read", id, err))
	} else if listens := slices.Contains(pod.Spec.Containers[0].Args, "--egress="+EgressListen); has != listens {
		// Both come from one create: a pod with one and not the other
		// was made, or changed, by something else.
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s's pod %s/%s has an egress listener (%v) and an allow-list (%v) that disagree, "+
			"so this host does not connect to it (docs/kube.md, \"Network egress\")", id, pod.Namespace, pod.Name, listens, has))
	}
	ps, hasSecrets, err := podSecretsOf(pod)
	switch {
	case err != nil:
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s: %v", id, err))
	case !hasSecrets:
		return nil, nil
	case !has || !slices.Contains(pod.Spec.Containers[0].Args, "--egress-ca="+boot.EgressCADir):
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s's pod %s/%s has secrets without network egress or its agent's authority, "+
			"so this host does not connect to it (docs/kube.md, \"Secrets\")", id, pod.Namespace, pod.Name))
	}
	sec, err := openSecrets(m.Key, pod.Namespace, id, ps)
	if err == nil {
		err = sealedForPod(sec, pod)
	}
	if err != nil {
		return nil, errdefs.New(errdefs.Permission, fmt.Sprintf("neuron %s's pod %s/%s: %v, so this host does not connect to it "+
			"(destroy it and create it again with its secrets; docs/kube.md, \"Secrets\")", id, pod.Namespace, pod.Name, err))
	}
	return &sec, nil
}

// ofNeuron says whether pod is neuron id's: where the cluster serves
// Sandboxes (sandboxes), only a pod its Sandbox controls (ofSandbox);
// then its label, or its claim's annotation, names id; or, the
// annotation not there yet, the pod's controller is owner, the Sandbox
// id's claim holds (Resolve checked that chain: the claim n-<id>, its
// Sandbox, the Sandbox's pod).
func ofNeuron(id string, pod *corev1.Pod, sandboxes bool, owner types.UID) bool {
	if sandboxes && !ofSandbox(pod, owner) {
		return false
	}
	switch got := podNeuron(pod); {
	case got == id:
		return true
	case got != "" || owner == "":
		return false
	}
	return true // a pod of the warm pool, whose Sandbox the claim holds
}

// ofSandbox says whether pod is one an agent-sandbox Sandbox named as
// the pod (and, when owner is set, of that uid) controls: the only pods
// the host takes where the cluster serves Sandboxes. A label or
// annotation alone is anyone's who may make a pod, and so is an owner
// reference of another group, which agent-sandbox's controller adopts
// all the same (it compares uids); an owner reference in its group only
// the hosts and that controller may write where deploy/kubernetes's
// admission policy holds (docs/security.md, "kube").
func ofSandbox(pod *corev1.Pod, owner types.UID) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == sbv1.GroupVersion.Group && ref.Kind == "Sandbox" && ref.Name == pod.Name && (owner == "" || ref.UID == owner)
}

// agentID is the neuron id the agent of pod answers as: its --id flag
// ("" in a pod of the warm pool's template, which has none).
func agentID(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name != AgentContainer {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--id="); ok {
				return v
			}
		}
	}
	return ""
}

// podNeuron is the id of the neuron pod runs: its label, or, in a pod of
// the warm pool that a claim adopted, the annotation the claim gave it.
func podNeuron(pod *corev1.Pod) string {
	if id := pod.Labels[LabelID]; id != "" {
		return id
	}
	return pod.Annotations[LabelID]
}

// stateOf is neuron id's state as its pod and Sandbox (either may be nil)
// show it: its labels are the Sandbox's, where it has one (a claimed
// neuron's pod has the pool's), else the pod's.
func stateOf(id string, pod *corev1.Pod, sb *sbv1.Sandbox, o Observed) *sandbox.State {
	st := &sandbox.State{ID: id, Mode: Mode, Status: o.Status(), Workdir: "/home/agent/workspace", Pending: o.Phase == Scheduling || o.Phase == Starting}
	var from map[string]string
	switch {
	case sb != nil:
		st.CreatedAt, from = sb.CreationTimestamp.Time, sb.Labels
	case pod != nil:
		st.CreatedAt, from = pod.CreationTimestamp.Time, pod.Labels
	}
	if pod != nil {
		st.CreatedAt = pod.CreationTimestamp.Time
	}
	if from != nil {
		l := labels.Set{}
		for k, v := range from {
			if !modeLabel(k) {
				l[k] = v
			}
		}
		st.Labels = l
	}
	if o.Deadline != nil {
		d := *o.Deadline
		st.Deadline, st.OnTimeout = &d, o.OnTimeout
	}
	if pod != nil && (o.Phase == Running || o.Phase == Unhealthy) {
		st.Policy = podPolicy(pod)
	}
	return st
}

// podPolicy is what pod enforces: its network (none, or egress with the
// allow-list of its annotation) and its agent's resource limits.
func podPolicy(pod *corev1.Pod) *sandbox.Policy {
	p := &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkNone}}
	if rules, ok, err := podEgress(pod); ok && err == nil {
		p.Network = sandbox.Network{Mode: sandbox.NetworkEgress, Allow: rules}
	}
	if ps, ok, err := podSecretsOf(pod); ok && err == nil {
		p.Secrets = ps.Secrets // names and hosts: the values are sealed
	}
	if len(pod.Spec.Containers) > 0 {
		lim := pod.Spec.Containers[0].Resources.Limits
		if q, ok := lim[corev1.ResourceCPU]; ok {
			p.Limits.CPUs = float64(q.MilliValue()) / 1000
		}
		if q, ok := lim[corev1.ResourceMemory]; ok {
			p.Limits.MemoryBytes = q.Value()
		}
		if q, ok := lim[corev1.ResourceEphemeralStorage]; ok {
			p.Limits.DiskBytes = q.Value()
		}
	}
	return p
}

// SetTimeout moves running neuron id's deadline to d from now (0: none),
// with action ("" keeps the one it has: stop, unless it was made to wipe):
// the Sandbox's shutdown time and policy, which agent-sandbox's
// controller acts on, whichever host made it or is up then.
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration, action sandbox.TimeoutAction) (*sandbox.State, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if d < 0 {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("timeout %s is negative", d)}
	}
	if action == sandbox.OnTimeoutPause {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "on-timeout pause", Reason: "a pod's memory cannot be kept: kube mode does not pause"}
	}
	if m.Cluster.Agents == nil {
		return nil, &sandbox.UnsupportedError{Mode: Mode, Op: "timeout",
			Reason: "on the pods path a deadline is the pod's activeDeadlineSeconds, set at its create, which cannot be moved later; " +
				"agent-sandbox's Sandbox can move its shutdown time: install it (docs/kube.md)"}
	}
	v, err := m.Cluster.read(ctx, id, false, false)
	if err != nil {
		return nil, err
	}
	o := v.Observed
	switch o.Phase {
	case Absent:
		return nil, &sandbox.NotFoundError{ID: id}
	case Running, Unhealthy:
	default:
		return nil, &sandbox.NotRunningError{ID: id, Reason: "it is " + string(o.Phase) + ", and only a running neuron has a deadline"}
	}
	if action == "" {
		action = o.OnTimeout
	}
	spec := map[string]any{"shutdownTime": nil, "shutdownPolicy": nil}
	at := WholeSeconds(time.Now().Add(d))
	// A claimed neuron's wipe at a deadline is its claim's (see
	// claimDeadline), set once its Sandbox is found running (and its own
	// deadline cleared); a stop at one is its Sandbox's.
	var wipeAt *time.Time
	if v.claim != nil && d > 0 && action == sandbox.OnTimeoutWipe {
		wipeAt = &at
	}
	if d > 0 && wipeAt == nil {
		spec["shutdownTime"], spec["shutdownPolicy"] = at.Format(time.RFC3339), shutdownPolicy(action)
	}
	cfg := m.Cluster.Config.Defaults()
	sbs := m.Cluster.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace)
	for try := 0; ; try++ {
		sb, err := sbs.Get(ctx, v.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, &sandbox.NotFoundError{ID: id}
		} else if err != nil {
			return nil, explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		}
		// Its pod may still be running while the Sandbox is being
		// stopped: a deadline put back then would outlive the stop.
		if sb.Spec.OperatingMode != sbv1.SandboxOperatingModeRunning || sb.DeletionTimestamp != nil || Expired(sb, time.Now()) {
			return nil, &sandbox.NotRunningError{ID: id, Reason: "it is being stopped, wiped or ended by its deadline"}
		}
		// The version read is the patch's precondition: a Sandbox
		// stopped or expired since is not given a deadline. Its
		// controller writes its status often: a conflict is read again.
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": sb.ResourceVersion}, "spec": spec})
		if err != nil {
			return nil, err
		}
		_, err = sbs.Patch(ctx, v.name, types.MergePatchType, b, metav1.PatchOptions{})
		if err == nil {
			break
		}
		switch {
		case apierrors.IsNotFound(err):
			return nil, &sandbox.NotFoundError{ID: id}
		case apierrors.IsConflict(err) && try < 10:
			continue
		case apierrors.IsConflict(err):
			return nil, errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s kept changing while its deadline was being set: try again", id))
		}
		return nil, explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
	if v.claim != nil {
		if err := m.Cluster.claimDeadline(ctx, v.claim.Name, wipeAt); err != nil {
			return nil, err
		}
		if wipeAt != nil {
			// Stopped since the Sandbox was read: a stop keeps the
			// home, so the wipe goes with the run it was for.
			if again, err := m.Cluster.Observe(ctx, id, false, false); err == nil && again.Phase != Running && again.Phase != Unhealthy {
				if err := m.Cluster.claimDeadline(ctx, v.claim.Name, nil); err != nil {
					return nil, err
				}
				return nil, &sandbox.NotRunningError{ID: id, Reason: "it was stopped while its deadline was being set"}
			}
		}
	}
	st, err := m.Get(ctx, id)
	if err == nil && d > 0 {
		st.Timeout = d
	}
	return st, err
}

// Enforce applies nothing: a kube neuron's deadline is the cluster's to
// act on (agent-sandbox's controller at the shutdown time, the kubelet
// at a plain pod's active deadline), whichever host is up then.
func (m *Manager) Enforce(context.Context, string, string) (sandbox.TimeoutAction, error) {
	return "", nil
}

// Get is neuron id's state, as the cluster shows it.
func (m *Manager) Get(ctx context.Context, id string) (*sandbox.State, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	v, err := m.Cluster.read(ctx, id, false, false)
	if err != nil {
		return nil, err
	}
	if v.Phase == Absent {
		return nil, &sandbox.NotFoundError{ID: id}
	}
	return stateOf(id, v.pod, v.sb, v.Observed), nil
}

// List is every neuron of the namespace this mode made. The pods and
// the Sandboxes (or, without them, the home claims) are asked for at
// once, from the API server: what it answers is what any host would see.
func (m *Manager) List(ctx context.Context) ([]*sandbox.State, error) {
	cfg := m.Cluster.Config.Defaults()
	sel := metav1.ListOptions{LabelSelector: LabelManaged + "=" + managedBy}
	var (
		pods             *corev1.PodList
		sbs              *sbv1.SandboxList
		claims           *corev1.PersistentVolumeClaimList
		sbClaims         *extv1.SandboxClaimList
		podErr, otherErr error
		claimErr         error
		wg               sync.WaitGroup
	)
	wg.Go(func() {
		var err error
		if pods, err = m.Cluster.Core.CoreV1().Pods(cfg.Namespace).List(ctx, sel); err != nil {
			podErr = explain(err, "list", "pods", cfg.Namespace)
		}
	})
	if m.Cluster.Claims != nil {
		// A claimed neuron's wipe at a deadline is its claim's.
		wg.Go(func() {
			var err error
			if sbClaims, err = m.Cluster.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).List(ctx, sel); err != nil {
				claimErr = explain(err, "list", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
			}
		})
	}
	if m.Cluster.Agents != nil {
		// A pod's Sandbox, for its deadline and whether it is suspended.
		var err error
		if sbs, err = m.Cluster.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).List(ctx, sel); err != nil {
			otherErr = explain(err, "list", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		}
	} else {
		// The pod path: a home without a pod is a stopped neuron.
		var err error
		if claims, err = m.Cluster.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).List(ctx, sel); err != nil {
			otherErr = explain(err, "list", "persistentvolumeclaims", cfg.Namespace)
		}
	}
	wg.Wait()
	if podErr != nil {
		return nil, podErr
	}
	if otherErr != nil {
		return nil, otherErr
	}
	if claimErr != nil {
		return nil, claimErr
	}
	byName := map[string]*sbv1.Sandbox{}
	if sbs != nil {
		for i := range sbs.Items {
			byName[sbs.Items[i].Name] = &sbs.Items[i]
		}
	}
	seen := map[string]bool{}
	var out []*sandbox.State
	for i := range pods.Items {
		p := &pods.Items[i]
		sb := byName[p.Name]
		id := podNeuron(p)
		if id == "" && sb != nil {
			id = sb.Labels[LabelID] // claimed: the label its host gave the Sandbox
		}
		if id == "" || seen[id] {
			continue // a warm pod of the pool: no neuron's yet
		}
		seen[id] = true
		out = append(out, stateOf(id, p, sb, Observe(sb, p, true, false)))
	}
	if sbs != nil {
		for i := range sbs.Items {
			sb := &sbs.Items[i]
			id := sb.Labels[LabelID]
			if id == "" || seen[id] {
				continue // its pod is listed
			}
			seen[id] = true
			st := stateOf(id, nil, sb, Observe(sb, nil, true, false))
			out = append(out, st)
		}
		if sbClaims != nil {
			wipes := map[string]time.Time{}
			for i := range sbClaims.Items {
				if at, ok := claimWipeAt(&sbClaims.Items[i]); ok {
					wipes[sbClaims.Items[i].Labels[LabelID]] = at
				}
			}
			for _, st := range out {
				if at, ok := wipes[st.ID]; ok && st.Deadline == nil && (st.Status == sandbox.StatusRunning || st.Status == sandbox.StatusPending) {
					st.Deadline, st.OnTimeout = &at, sandbox.OnTimeoutWipe
				}
			}
		}
		return out, nil
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		id := c.Labels[LabelID]
		// A home being deleted is a wipe's, no neuron's.
		if id == "" || seen[id] || c.DeletionTimestamp != nil || CheckID(id) != nil {
			continue
		}
		seen[id] = true
		st := stateOf(id, nil, nil, Observed{Phase: Stopped, Reason: "its home is kept"})
		st.CreatedAt = c.CreationTimestamp.Time
		out = append(out, st)
	}
	return out, nil
}

// Destroy stops neuron id (its home kept), or wipes it.
func (m *Manager) Destroy(ctx context.Context, id string, opts sandbox.DestroyOptions) error {
	if err := CheckID(id); err != nil {
		return err
	}
	v, err := m.Cluster.read(ctx, id, false, false)
	if err != nil {
		return err
	} else if v.Phase == Absent && v.claim == nil {
		return &sandbox.NotFoundError{ID: id}
	}
	m.mu.Lock()
	l := m.links[id]
	delete(m.links, id)
	m.mu.Unlock()
	if l.Link != nil {
		l.Close() // outside the lock: a close waits for its dialling
	}
	if opts.Wipe {
		err = m.Cluster.Wipe(ctx, id)
	} else {
		err = m.Cluster.Stop(ctx, id)
	}
	if errdefs.Of(err).Is(errdefs.NotFound) || apierrors.IsNotFound(err) {
		return &sandbox.NotFoundError{ID: id}
	}
	if err != nil {
		return err
	}
	if opts.Wipe && m.Layout.Home != "" {
		// This host's writer locks of the neuron's terminals (CheckID
		// made id a DNS label: one path component).
		os.RemoveAll(filepath.Join(m.Layout.TerminalLocksDir(), id))
	}
	// Done when its pod is: a destroy that returns has stopped the neuron.
	// A wipe is done when the Sandbox is gone too (its claim goes when
	// the cluster lets it: a home being deleted is no neuron's).
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return m.awaitEnded(wctx, id, v.name, opts.Wipe)
}

// awaitEnded waits until neuron id, whose objects are named name, has no
// pod, and, wiped, no Sandbox and no home: agent-sandbox's controller may
// make the home again while the Sandbox is being deleted, and the
// cluster's garbage collector takes that one after the Sandbox; a create
// of the id before then would find it (BUSY).
func (m *Manager) awaitEnded(ctx context.Context, id, name string, wiped bool) error {
	if err := m.awaitGone(ctx, id, name); err != nil || !wiped || m.Cluster.Agents == nil {
		return err
	}
	if err := m.awaitSandboxGone(ctx, id, name); err != nil {
		return err
	}
	ns := m.Cluster.Config.Defaults().Namespace
	home := homeClaimOf(name)
	return awaitDeleted(ctx, m.Cluster.Core.CoreV1().PersistentVolumeClaims(ns), home, "persistentvolumeclaims", ns,
		fmt.Sprintf("neuron %s's home %s/%s", id, ns, home), ": its deletion waits for the cluster's garbage collector")
}

// awaitSandboxGone waits until neuron id has no Sandbox, name (the
// cluster's garbage collector ends a foreground deletion once its
// dependents go).
func (m *Manager) awaitSandboxGone(ctx context.Context, id, name string) error {
	ns := m.Cluster.Config.Defaults().Namespace
	return awaitDeleted(ctx, m.Cluster.Agents.AgentsV1beta1().Sandboxes(ns), name, "sandboxes.agents.x-k8s.io", ns,
		fmt.Sprintf("neuron %s's Sandbox %s/%s", id, ns, name), ": its deletion waits for the cluster's garbage collector")
}

// awaitGone waits until neuron id has no pod, name.
func (m *Manager) awaitGone(ctx context.Context, id, name string) error {
	ns := m.Cluster.Config.Defaults().Namespace
	return awaitDeleted(ctx, m.Cluster.Core.CoreV1().Pods(ns), name, "pods", ns,
		fmt.Sprintf("neuron %s's pod %s/%s", id, ns, name), "")
}

// watchGetter is what awaitDeleted needs of a typed client of one
// resource in one namespace.
type watchGetter[T any] interface {
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

// awaitDeleted waits until the object name of resource (in namespace ns,
// which c serves) is deleted; what and hint say what it is in errors.
func awaitDeleted[T any](ctx context.Context, c watchGetter[T], name, resource, ns, what, hint string) error {
	open := func() (watch.Interface, error) {
		w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		return w, explainIf(err, "watch", resource, ns)
	}
	done, err := follow(ctx, open, func() (bool, error) {
		_, err := c.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}, func(ev watch.Event) (bool, error) {
		o, isObj := ev.Object.(metav1.Object)
		return isObj && o.GetName() == name && ev.Type == watch.Deleted, nil
	})
	if done || err != nil {
		return err
	}
	return errdefs.New(errdefs.Timeout, what+" is still there"+hint)
}

// Connect returns a client on neuron id's agent, linking to it first when
// this host has no link yet (another host created it).
func (m *Manager) Connect(ctx context.Context, id string) (*link.Client, error) {
	m.mu.Lock()
	l := m.links[id]
	m.mu.Unlock()
	if l.Link != nil {
		if _, err := l.Conn(); err == nil {
			return l.Client(), nil
		}
		// Not connected: its pod may have died before the informer said
		// so. Ask the cluster.
	}
	cfg := m.Cluster.Config.Defaults()
	name, _, owned, err := m.Cluster.resolve(ctx, id)
	if err != nil {
		return nil, err
	}
	var owner types.UID
	if owned != nil {
		owner = owned.UID
	}
	pod, err := m.Cluster.Core.CoreV1().Pods(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, explain(err, "get", "pods", cfg.Namespace)
	}
	if pod == nil || err != nil {
		m.unlink(id, l)
		if o, oerr := m.Cluster.Observe(ctx, id, false, false); oerr == nil && o.Phase == Absent {
			return nil, &sandbox.NotFoundError{ID: id}
		}
		return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s is not running (no pod)", id))
	}
	same := l.Link != nil && l.uid == pod.UID
	o := Observe(nil, pod, true, same)
	if same && (o.Phase == Running || o.Phase == Unhealthy) {
		return l.Client(), nil // its pod runs: the link dials it again once it is ready
	}
	if o.Phase != Running {
		m.unlink(id, l)
		return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s is %s: %s", id, o.Phase, o.Reason))
	}
	if _, err := m.connect(ctx, id, pod, owner); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l = m.links[id]
	if l.Link == nil { // destroyed meanwhile
		return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s was destroyed while this host connected to it", id))
	}
	return l.Client(), nil
}

// Close ends this host's links and its informer; the neurons run on.
func (m *Manager) Close() error {
	m.watch.Do(func() {}) // none starts after this
	m.mu.Lock()
	m.closed = true
	stop := m.stopWatch
	m.stopWatch = nil
	links := m.links
	m.links = nil
	m.mu.Unlock()
	m.probeMu.Lock()
	run := m.probing
	if run != nil {
		m.stopProbe()
	}
	m.probeMu.Unlock()
	if run != nil {
		<-run.done // its pods' removal: at most 10 s
	}
	for _, l := range links {
		l.Close() // outside the lock
	}
	m.egress.Wait() // each ends with its link
	if stop != nil {
		stop()
	}
	return nil
}

// watchPods starts, once, one shared informer over the namespace's
// neuron pods (those labelled managed-by nsys-cortex). A pod that a link
// was made for and that stops running (failed, dead, being deleted,
// deleted, replaced by another of the same name) ends that link at once,
// so that what is pending on it fails NOT_RUNNING even while its
// connection has not ended: a node lost, or a pod the kubelet declared
// dead. The channel's keepalive is the first signal (link.Options
// .DeadAfter); this is the second.
func (m *Manager) watchPods() {
	m.watch.Do(func() {
		pods := m.Cluster.Core.CoreV1().Pods(m.Cluster.Config.Defaults().Namespace)
		sel := LabelManaged + "=" + managedBy
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = sel
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = sel
				return pods.Watch(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, m.Cluster.Core), &corev1.Pod{}, 0, cache.Indexers{})
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.podChanged(obj, false) },
			UpdateFunc: func(_, obj any) { m.podChanged(obj, false) },
			DeleteFunc: func(obj any) { m.podChanged(obj, true) },
		})
		if err != nil {
			return // the links keep their keepalive
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		m.mu.Lock()
		m.stopWatch = func() { cancel(); <-done }
		m.watched = inf.HasSynced
		m.mu.Unlock()
	})
}

// Watching starts the pod informer (as the first link does) and reports
// whether it has listed the namespace's neuron pods: what a host holds in
// memory for the neurons it watches (the scale benchmark measures it).
func (m *Manager) Watching() bool {
	m.watchPods()
	m.mu.Lock()
	synced := m.watched
	m.mu.Unlock()
	return synced != nil && synced()
}

// podChanged ends the link of the pod's neuron when the pod is no longer
// the running pod that link was made for.
func (m *Manager) podChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	id := podNeuron(pod)
	m.mu.Lock()
	l := m.links[id]
	if l.Link == nil || l.uid != pod.UID {
		// Not linked; or another pod of that name than the linked one
		// (the linked pod's own deletion ends the link).
		m.mu.Unlock()
		return
	}
	if !deleted {
		if o := Observe(nil, pod, true, true); o.Phase == Running || o.Phase == Unhealthy {
			m.mu.Unlock()
			return
		}
	}
	delete(m.links, id)
	m.mu.Unlock()
	l.Close()
}

// unlink ends neuron id's link l, when it is still the neuron's.
func (m *Manager) unlink(id string, l podLink) {
	if l.Link == nil {
		return
	}
	m.mu.Lock()
	cur := m.links[id]
	if cur.Link == l.Link {
		delete(m.links, id)
	}
	m.mu.Unlock()
	l.Close()
}

var _ sandbox.DataRooter = (*Manager)(nil)

// DataRoot refuses: a kube neuron's files are on a volume in the
// cluster, not on this host, so nothing of the host's (a snapshot's copy
// of files) may read them from a path.
func (m *Manager) DataRoot(ctx context.Context, id string) (string, error) {
	return "", errdefs.New(errdefs.Unsupported, fmt.Sprintf("neuron %s is a kube neuron: its files are on a volume in the cluster, not on this host, so file snapshots of it are not built; destroy keeps its home", id))
}

var _ sandbox.Pauser = (*Manager)(nil)

// noPause is why a kube neuron cannot be paused.
const noPause = "a pod's memory cannot be kept: destroy the neuron (its home stays) and create it again under its id"

// Pause refuses: UNSUPPORTED, saying what to do instead.
func (m *Manager) Pause(context.Context, string, sandbox.PauseOptions) (*sandbox.State, error) {
	return nil, &sandbox.UnsupportedError{Mode: Mode, Op: "pause", Reason: noPause}
}

// Resume refuses as Pause does: no kube neuron is ever paused.
func (m *Manager) Resume(context.Context, string) (*sandbox.State, error) {
	return nil, &sandbox.UnsupportedError{Mode: Mode, Op: "resume", Reason: noPause}
}
