package kube

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	labelsel "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The warm pool's objects (kube.warm_pool): one SandboxTemplate and one
// SandboxWarmPool per namespace, shared by every host of it.
const (
	// TemplateName is the SandboxTemplate of a warm neuron.
	TemplateName = "nsys-cortex-neuron"
	// WarmPoolName is the SandboxWarmPool; its Sandboxes (and their
	// pods) are named "<WarmPoolName>-<random>", and keep that name when
	// a claim adopts one.
	WarmPoolName = "nsys-cortex-warm"
)

// Template is the warm neuron's SandboxTemplate: the pod of a neuron
// with no id, environment or limits of its own (which a claim cannot
// give one without a cold start), its home a volume claim template as a
// Sandbox's is. Its NetworkPolicy is left to the namespace's own
// (Unmanaged): agent-sandbox's default would set the pod's DNS servers
// to public ones and add a policy of its own. Recreate: a warm neuron of
// an older template (another image, trust key, runtime class) is not
// claimed, and the pool replaces it.
func Template(cfg Config, trustKeySHA256 string) *extv1.SandboxTemplate {
	cfg = cfg.Defaults()
	spec := PodSpec(cfg, Neuron{TrustKeySHA256: trustKeySHA256}, homeVolume)
	return &extv1.SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: TemplateName, Namespace: cfg.Namespace, Labels: map[string]string{LabelManaged: managedBy}},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint: sbv1.SandboxBlueprint{
				PodTemplate: sbv1.PodTemplate{
					ObjectMeta: sbv1.PodMetadata{Labels: map[string]string{LabelManaged: managedBy, LabelRole: "neuron"}},
					Spec:       spec,
				},
				VolumeClaimTemplates: []sbv1.PersistentVolumeClaimTemplate{{
					EmbeddedObjectMetadata: sbv1.EmbeddedObjectMetadata{Name: homeVolume, Labels: map[string]string{LabelManaged: managedBy}},
					Spec:                   homeClaimSpec(cfg),
				}},
				Service: ptr.To(false),
			},
			NetworkPolicyManagement:    extv1.NetworkPolicyManagementUnmanaged,
			EnvVarsInjectionPolicy:     extv1.EnvVarsInjectionPolicyDisallowed,
			VolumeClaimTemplatesPolicy: extv1.VolumeClaimTemplatesPolicyDisallowed,
		},
	}
}

// WarmPool is the SandboxWarmPool that keeps size warm neurons of
// Template.
func WarmPool(cfg Config, size int32) *extv1.SandboxWarmPool {
	cfg = cfg.Defaults()
	return &extv1.SandboxWarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool"},
		ObjectMeta: metav1.ObjectMeta{Name: WarmPoolName, Namespace: cfg.Namespace, Labels: map[string]string{LabelManaged: managedBy}},
		Spec: extv1.SandboxWarmPoolSpec{
			Replicas:       ptr.To(size),
			TemplateRef:    extv1.SandboxTemplateRef{Name: TemplateName},
			UpdateStrategy: &extv1.SandboxWarmPoolUpdateStrategy{Type: extv1.RecreateSandboxWarmPoolUpdateStrategyType},
		},
	}
}

// Claim is neuron n's SandboxClaim, named as its Sandbox would be
// (ObjectName): it adopts a warm Sandbox of the pool, which keeps its own
// name, or, the pool empty, has the controller make one named as the
// claim. The neuron's id reaches the pod as an annotation (a claim may
// add only labels of allow-listed domains to a pod), which is what this
// host's informer finds a warm pod's neuron by.
func Claim(cfg Config, n Neuron) (*extv1.SandboxClaim, error) {
	if err := CheckID(n.ID); err != nil {
		return nil, err
	}
	cfg = cfg.Defaults()
	return &extv1.SandboxClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: ObjectName(n.ID), Namespace: cfg.Namespace, Labels: objectLabels(n)},
		Spec: extv1.SandboxClaimSpec{
			WarmPoolRef:           extv1.SandboxWarmPoolRef{Name: WarmPoolName},
			AdditionalPodMetadata: sbv1.PodMetadata{Annotations: map[string]string{LabelID: n.ID}},
		},
	}, nil
}

// warmable says whether a create of a new neuron with opts is a claim on
// the warm pool: kube.warm_pool is set, the cluster serves claims, and
// opts ask for nothing the pool's pods cannot take after they started
// (limits of the neuron's own: a claim cannot set them, and one that
// did would be a cold start in agent-sandbox; network egress, whose
// listener and allow-list are the pod's own). An environment can: the
// host hands it to the claimed pod's agent (adopt), never to the claim.
func (m *Manager) warmable(opts sandbox.CreateOptions) bool {
	size := 0
	for _, kv := range opts.Env {
		size += len(kv)
	}
	return m.Cluster.Config.WarmPool > 0 && m.Cluster.Claims != nil && opts.Limits == (sandbox.Limits{}) &&
		opts.Network.Mode != sandbox.NetworkEgress &&
		len(opts.Env) <= protocol.MaxAdoptEnv && size <= protocol.MaxAdoptEnvBytes // more than an adopt takes: the pod's spec
}

// adoptClaimed makes the agent of claimed neuron n's pod, a pool's agent
// that serves no neuron, n's, with n's environment: what a cold pod's
// spec gives it (its --id, its variables), given once it is claimed.
func (m *Manager) adoptClaimed(ctx context.Context, n Neuron) error {
	m.mu.Lock()
	l := m.links[n.ID]
	m.mu.Unlock()
	if l.Link == nil {
		return errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s was destroyed while it was created", n.ID))
	}
	err := l.Client().Adopt(ctx, n.ID, n.Env)
	switch {
	case err == nil:
		return nil
	case protocol.HasCode(err, protocol.CodeUnsupported) && len(n.Env) == 0:
		return nil // an older agent: it serves no id, and there is no environment to give it
	case protocol.HasCode(err, protocol.CodeUnsupported):
		return fmt.Errorf("neuron %s: the claimed pod's agent cannot take its environment (%w): "+
			"kube.image's agent is older than protocol 1.5; build it again", n.ID, err)
	}
	return fmt.Errorf("neuron %s: handing the claimed pod's agent its id and environment: %w", n.ID, err)
}

// ClaimStats reports the creates that were claims on the warm pool.
func (m *Manager) ClaimStats() sandbox.ClaimStats { return m.claims.Stats(Mode) }

// ensurePool makes the namespace's warm pool, or brings it to what this
// host's configuration says (the template's pod, the pool's size), once
// per Manager; a failure is tried again at the next claim.
func (m *Manager) ensurePool(ctx context.Context) error {
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	if m.poolMade {
		return nil
	}
	cfg := m.Cluster.Config.Defaults()
	ext := m.Cluster.Claims.ExtensionsV1beta1()
	tmpl := Template(cfg, podtoken.Fingerprint(m.Key.Public().(ed25519.PublicKey)))
	if err := ensure(ctx, ext.SandboxTemplates(cfg.Namespace), tmpl, "sandboxtemplates.extensions.agents.x-k8s.io",
		func(old *extv1.SandboxTemplate) bool { return equality.Semantic.DeepEqual(tmpl.Spec, old.Spec) },
		func(old *extv1.SandboxTemplate) { old.Spec = tmpl.Spec }); err != nil {
		return err
	}
	pool := WarmPool(cfg, cfg.WarmPool)
	if err := ensure(ctx, ext.SandboxWarmPools(cfg.Namespace), pool, "sandboxwarmpools.extensions.agents.x-k8s.io",
		func(old *extv1.SandboxWarmPool) bool { return equality.Semantic.DeepEqual(pool.Spec, old.Spec) },
		func(old *extv1.SandboxWarmPool) { old.Spec = pool.Spec }); err != nil {
		return err
	}
	m.poolMade = true
	return nil
}

// typedClient is what ensure needs of a typed client of T's kind.
type typedClient[T metav1.Object] interface {
	Get(ctx context.Context, name string, o metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, o metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, o metav1.UpdateOptions) (T, error)
}

// ensure makes want through c, or, where its name is taken, makes that
// object's spec want's (same: it is already; set: make it so), again on
// a conflict; resource names the kind in errors.
func ensure[T metav1.Object](ctx context.Context, c typedClient[T], want T, resource string, same func(old T) bool, set func(old T)) error {
	ns := want.GetNamespace()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, want, metav1.CreateOptions{})
			return explainIf(err, "create", resource, ns)
		} else if err != nil {
			return explain(err, "get", resource, ns)
		}
		if same(old) {
			return nil
		}
		set(old)
		if _, err = c.Update(ctx, old, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			return err
		}
		return explainIf(err, "update", resource, ns)
	})
}

// createClaimed makes new neuron n a SandboxClaim on the warm pool:
// agent-sandbox's controller gives the claim a warm Sandbox of the pool
// (or, the pool empty, makes one named as the claim), whose name the
// neuron keeps (Resolve finds it); this host labels that Sandbox as the
// neuron's, so that lists show it, and connects. A wipe at n's deadline
// is the claim's; a stop at it, the Sandbox's. A create that fails
// removes what it made (undoClaim).
func (m *Manager) createClaimed(ctx context.Context, n Neuron, boot time.Duration) (st *sandbox.State, err error) {
	start, warm := time.Now(), false
	defer func() { m.claims.Record(time.Since(start), warm, err != nil) }()
	if err := m.ensurePool(ctx); err != nil {
		return nil, err
	}
	cfg := m.Cluster.Config.Defaults()
	c, err := Claim(cfg, n)
	if err != nil {
		return nil, err
	}
	if n.Deadline != nil && n.OnTimeout == sandbox.OnTimeoutWipe {
		c.Spec.Lifecycle = &extv1.Lifecycle{ShutdownTime: &metav1.Time{Time: WholeSeconds(*n.Deadline)}, ShutdownPolicy: extv1.ShutdownPolicyDelete}
	}
	claims := m.Cluster.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace)
	made, err := claims.Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, errdefs.New(errdefs.Exists, fmt.Sprintf("neuron %s is already there (SandboxClaim %s/%s)", n.ID, cfg.Namespace, c.Name))
	} else if err != nil {
		return nil, explain(err, "create", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}
	var held *sbv1.Sandbox // the claim's Sandbox, once it holds one
	bctx, cancel := context.WithTimeout(ctx, boot)
	defer cancel()
	// A cold create of the id made meanwhile (Cluster.raced, the other
	// way round): one of the two gives way. Asked beside the wait for
	// the adoption, which it ends when it finds one.
	actx, stopAdopt := context.WithCancel(bctx)
	raced := make(chan error, 1)
	go func() {
		err := m.racedClaim(bctx, n.ID, made)
		if err != nil {
			stopAdopt()
		}
		raced <- err
	}()
	sb, err := m.awaitAdopted(actx, n.ID, made, boot)
	stopAdopt()
	if rerr := <-raced; rerr != nil {
		if sb != nil && sb.Name != ObjectName(n.ID) {
			// Held already: undone with the claim, and waited for (never
			// the name the cold create holds).
			held = sb
		}
		sb, err = nil, rerr
	}
	if err == nil {
		// The labels while the agent is dialled: neither waits for the
		// other.
		held, warm = sb, sb.Name != ObjectName(n.ID)
		labelled := make(chan error, 1)
		go func() { labelled <- m.labelClaimed(bctx, sb, made, n) }()
		st, err = m.await(ctx, n.ID, sb.Name, sb.UID, boot)
		// The environment goes to the pod's agent only once the labels
		// hold, which they do only while the Sandbox is the claim's.
		if lerr := <-labelled; lerr != nil && err == nil {
			err = lerr
		}
		if err == nil {
			err = m.adoptClaimed(bctx, n)
		}
		if err != nil { // the link made, if any, goes with the claim
			m.mu.Lock()
			l := m.links[n.ID]
			m.mu.Unlock()
			m.unlink(n.ID, l)
		}
	}
	if err != nil {
		if uerr := m.undoClaim(ctx, n.ID, made, held); uerr != nil {
			err = errors.Join(err, fmt.Errorf("and undoing the create: %w", uerr))
		}
		return nil, err
	}
	st.Labels = labels.Set{}
	for k, v := range objectLabels(n) {
		if !modeLabel(k) {
			st.Labels[k] = v
		}
	}
	return st, nil
}

// undoClaim removes what a claiming create of neuron id made, and only
// that: its claim (made), and the Sandbox it holds (held; nil: none) with
// its home and pod, which the claim's garbage collection would take too.
// Not Wipe: a cold create of the id racing this one keeps what it made.
// The Sandbox goes only if it is still held's (its uid), and the home
// only if held controls it: a Sandbox made again under the name meanwhile
// keeps both.
func (m *Manager) undoClaim(ctx context.Context, id string, made *extv1.SandboxClaim, held *sbv1.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	cfg := m.Cluster.Config.Defaults()
	uid := made.UID
	err := m.Cluster.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Delete(ctx, made.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return explain(err, "delete", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}
	if held == nil {
		return nil // the cluster's garbage collector takes what the claim came to hold
	}
	name, sbUID := held.Name, held.UID
	fg := metav1.DeletePropagationForeground
	err = m.Cluster.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg, Preconditions: &metav1.Preconditions{UID: &sbUID}})
	switch {
	case apierrors.IsConflict(err):
		return nil // another Sandbox of the name: not this create's, nor is its home
	case err != nil && !apierrors.IsNotFound(err):
		return explain(err, "delete", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
	pvcs := m.Cluster.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace)
	home, err := pvcs.Get(ctx, homeClaimOf(name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return explain(err, "get", "persistentvolumeclaims", cfg.Namespace)
	case !controlledBy(home, sbUID):
		return m.awaitGone(ctx, id, name) // a home of another's: neither taken nor waited for
	default:
		homeUID := home.UID
		err = pvcs.Delete(ctx, home.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &homeUID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return explain(err, "delete", "persistentvolumeclaims", cfg.Namespace)
		}
	}
	return m.awaitEnded(ctx, id, name, true)
}

// controlledBy says whether obj's controller is the object of uid.
func controlledBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}

// claimFailures are the reasons of a claim's Ready condition that the
// claim's controller does not get past by itself.
var claimFailures = map[string]bool{
	"TemplateNotFound": true, "WarmPoolNotFound": true, "InvalidMetadata": true,
	"EnvVarsInjectionRejected": true, "VolumeClaimTemplatesError": true,
}

// racedClaim says BUSY when a Sandbox of neuron id's name is there and
// is not claim made's: a cold create of the id made it meanwhile.
func (m *Manager) racedClaim(ctx context.Context, id string, made *extv1.SandboxClaim) error {
	ns := m.Cluster.Config.Defaults().Namespace
	other, err := m.Cluster.Agents.AgentsV1beta1().Sandboxes(ns).Get(ctx, ObjectName(id), metav1.GetOptions{})
	switch {
	case err == nil && !OwnedBy(other, made):
		return errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s is being created by another create (Sandbox %s/%s): try again", id, ns, other.Name))
	case err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil:
		return explain(err, "get", "sandboxes.agents.x-k8s.io", ns)
	}
	return nil
}

// awaitAdopted waits until neuron id's claim holds a Sandbox of its own,
// and returns it. A Sandbox is the claim's when the claim names it (only
// agent-sandbox's controller writes that: the annotation, then the
// status) and is its controller (an owner reference, which anyone who
// may make a Sandbox may write): a name alone is a candidate the
// controller may take back, and a reference alone may be forged. Two
// watches, at once: the Sandboxes labelled with the claim's uid
// (agents.x-k8s.io/claim-uid, which the controller writes in the one
// patch that makes the claim their controller), and the claim, which
// also shows what keeps the controller from giving it one, and its
// deletion. The Sandbox watch only speeds the wait: its failure leaves
// the claim's to decide, as it did before that watch (from the status's
// name, read back).
func (m *Manager) awaitAdopted(ctx context.Context, id string, claim *extv1.SandboxClaim, boot time.Duration) (*sbv1.Sandbox, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		sb   *sbv1.Sandbox
		done bool
		err  error
	}
	seen := &adoption{owned: map[string]*sbv1.Sandbox{}}
	why := "agent-sandbox's controller has not answered it (is its extensions controller running?)"
	fromSandboxes, fromClaim := make(chan result, 1), make(chan result, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		sb, done, err := m.watchAdoption(wctx, claim, seen)
		fromSandboxes <- result{sb, done, err}
	})
	wg.Go(func() {
		sb, done, err := m.watchClaim(wctx, id, claim, seen, &why)
		fromClaim <- result{sb, done, err}
	})
	var r result
	select {
	case r = <-fromClaim:
	case r = <-fromSandboxes:
		if !r.done {
			r = <-fromClaim
		}
	}
	cancel()
	wg.Wait() // both watches stopped; why is the claim watch's last word
	switch {
	case r.done || r.err != nil:
		return r.sb, r.err
	case errors.Is(ctx.Err(), context.Canceled):
		return nil, fmt.Errorf("neuron %s: waiting for its SandboxClaim to hold a Sandbox: %w", id, ctx.Err())
	}
	ns := m.Cluster.Config.Defaults().Namespace
	return nil, errdefs.New(errdefs.Timeout, fmt.Sprintf("neuron %s's SandboxClaim %s/%s held no Sandbox within %v: %s", id, ns, ObjectName(id), boot, why))
}

// adoption is what awaitAdopted's watches have seen: the claim, and the
// Sandboxes it controls that are not being deleted, each as last seen.
type adoption struct {
	mu    sync.Mutex
	claim *extv1.SandboxClaim
	owned map[string]*sbv1.Sandbox
}

// sawClaim records claim c and returns the Sandbox it now holds, if any.
func (a *adoption) sawClaim(c *extv1.SandboxClaim) *sbv1.Sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.claim = c
	return a.held()
}

// sawSandbox records sb, controlled by the claim or not (gone), and
// returns the Sandbox the claim now holds, if any.
func (a *adoption) sawSandbox(sb *sbv1.Sandbox, gone bool) *sbv1.Sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gone {
		delete(a.owned, sb.Name)
	} else {
		a.owned[sb.Name] = sb
	}
	return a.held()
}

// forgetSandboxes forgets the Sandboxes seen.
func (a *adoption) forgetSandboxes() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.owned)
}

// held is the Sandbox the claim names and controls (nil: none yet).
func (a *adoption) held() *sbv1.Sandbox {
	if n := Adopted(a.claim); n != "" {
		return a.owned[n]
	}
	return nil
}

// watchAdoption follows the Sandboxes labelled with claim's uid until the
// claim, as its own watch last saw it, names one it controls.
func (m *Manager) watchAdoption(ctx context.Context, claim *extv1.SandboxClaim, seen *adoption) (*sbv1.Sandbox, bool, error) {
	ns := m.Cluster.Config.Defaults().Namespace
	sbs := m.Cluster.Agents.AgentsV1beta1().Sandboxes(ns)
	sel := labelsel.SelectorFromSet(labelsel.Set{extv1.SandboxIDLabel: string(claim.UID)}).String()
	var sb *sbv1.Sandbox
	done, err := follow(ctx, func() (watch.Interface, error) {
		// A watch begun again (from no version) shows the Sandboxes as
		// they are: what the last one saw may be gone since.
		seen.forgetSandboxes()
		w, err := sbs.Watch(ctx, metav1.ListOptions{LabelSelector: sel})
		return w, explainIf(err, "watch", "sandboxes.agents.x-k8s.io", ns)
	}, nil, func(ev watch.Event) (bool, error) {
		got, isSandbox := ev.Object.(*sbv1.Sandbox)
		if !isSandbox {
			return false, nil
		}
		sb = seen.sawSandbox(got, ev.Type == watch.Deleted || !OwnedBy(got, claim) || got.DeletionTimestamp != nil)
		return sb != nil, nil
	})
	return sb, done, err
}

// watchClaim follows neuron id's claim until it names a Sandbox it
// controls (done: one the Sandbox watch saw, or the one its status
// names, read back), it is deleted or replaced, or its controller says
// it cannot give it one (an error); why is what keeps it waiting.
func (m *Manager) watchClaim(ctx context.Context, id string, claim *extv1.SandboxClaim, seen *adoption, why *string) (*sbv1.Sandbox, bool, error) {
	cfg := m.Cluster.Config.Defaults()
	claims := m.Cluster.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace)
	sbs := m.Cluster.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace)
	check := func(c *extv1.SandboxClaim) (*sbv1.Sandbox, error) {
		if c.UID != claim.UID {
			return nil, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s's SandboxClaim was replaced while it was being created", id))
		}
		if sb := seen.sawClaim(c); sb != nil {
			return sb, nil
		}
		// The status's name, written once the Sandbox is the claim's.
		if a := c.Status.SandboxStatus.Name; a != "" {
			sb, err := sbs.Get(ctx, a, metav1.GetOptions{})
			if err == nil && OwnedBy(sb, c) && sb.DeletionTimestamp == nil {
				return sb, nil
			}
			if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				return nil, explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
			}
			*why = "Sandbox " + a + " is named on it and not yet its own"
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type != string(sbv1.SandboxConditionReady) || cond.Status == metav1.ConditionTrue {
				continue
			}
			*why = cond.Reason + ": " + cond.Message
			if claimFailures[cond.Reason] {
				return nil, errdefs.New(errdefs.Unavailable, fmt.Sprintf("neuron %s's SandboxClaim %s/%s cannot be given a Sandbox: %s (nsys-cortex doctor; docs/kube.md, \"Warm pools\")", id, cfg.Namespace, c.Name, *why))
			}
		}
		return nil, nil
	}
	// A watch from no version begins with the claim as it is (an ADDED
	// event): no read beside it.
	var sb *sbv1.Sandbox
	done, err := follow(ctx, func() (watch.Interface, error) {
		w, err := claims.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", ObjectName(id)).String()})
		return w, explainIf(err, "watch", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}, nil, func(ev watch.Event) (bool, error) {
		c, isClaim := ev.Object.(*extv1.SandboxClaim)
		if !isClaim {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			return false, errdefs.New(errdefs.NotRunning, fmt.Sprintf("neuron %s's SandboxClaim was deleted while it was being created", id))
		}
		var err error
		sb, err = check(c)
		return sb != nil, err
	})
	return sb, done, err
}

// labelClaimed gives Sandbox sb, which neuron n's claim holds, the
// neuron's labels (its id among them: what lists find it by), and, for a
// stop at n's deadline, its shutdown time. The claim's controller leaves
// a Sandbox's own labels and shutdown time alone. The patch holds only
// while the Sandbox is the claim's and names no other neuron.
func (m *Manager) labelClaimed(ctx context.Context, sb *sbv1.Sandbox, claim *extv1.SandboxClaim, n Neuron) error {
	cfg := m.Cluster.Config.Defaults()
	sbs := m.Cluster.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace)
	spec := map[string]any{}
	if n.Deadline != nil && n.OnTimeout != sandbox.OnTimeoutWipe {
		spec["shutdownTime"] = WholeSeconds(*n.Deadline).Format(time.RFC3339)
		spec["shutdownPolicy"] = string(sbv1.ShutdownPolicyRetain)
	}
	for try := 0; ; try++ {
		if !OwnedBy(sb, claim) || sb.Labels[LabelID] != "" && sb.Labels[LabelID] != n.ID {
			return errdefs.New(errdefs.NotRunning, fmt.Sprintf("Sandbox %s/%s is no longer neuron %s's (its claim's, naming it)", cfg.Namespace, sb.Name, n.ID))
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": objectLabels(n), "resourceVersion": sb.ResourceVersion}, "spec": spec})
		if err != nil {
			return err
		}
		_, err = sbs.Patch(ctx, sb.Name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && try < 10:
			if sb, err = sbs.Get(ctx, sb.Name, metav1.GetOptions{}); err != nil {
				return explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
			}
			continue
		}
		return explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
}
