package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Cluster makes and removes neurons' objects through the API server.
type Cluster struct {
	Core kubernetes.Interface
	// Agents is agent-sandbox's client; nil: the cluster has no such CRDs,
	// and neurons are plain pods (the fallback path).
	Agents agents.Interface
	// Claims is agent-sandbox's extensions' client (SandboxClaim,
	// SandboxWarmPool, SandboxTemplate); nil: the cluster serves none,
	// and no neuron is claimed from a warm pool.
	Claims extclient.Interface
	Config Config
}

// Resolve is the name of neuron id's Sandbox, its pod and (after
// "home-") its home's claim: ObjectName(id), unless a SandboxClaim of
// that name holds a Sandbox of the warm pool, which kept the pool's name.
// claim is that SandboxClaim (nil: none holds the neuron). The claim is
// read from the API server, as any host would; the Sandbox it names is
// the neuron's only once the claim is its controller (agent-sandbox names
// a candidate on the claim before it adopts it, and takes the name back
// when another claim has it).
func (c *Cluster) Resolve(ctx context.Context, id string) (name string, claim *extv1.SandboxClaim, err error) {
	name, claim, _, err = c.resolve(ctx, id)
	return name, claim, err
}

// resolve is Resolve, and the claim's Sandbox when it read it.
func (c *Cluster) resolve(ctx context.Context, id string) (string, *extv1.SandboxClaim, *sbv1.Sandbox, error) {
	if c.Claims == nil {
		return ObjectName(id), nil, nil, nil
	}
	cfg := c.Config.Defaults()
	cl, err := c.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ObjectName(id), nil, nil, nil
	}
	if err != nil {
		return "", nil, nil, explain(err, "get", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}
	if a := Adopted(cl); a != "" && c.Agents != nil {
		sb, err := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, a, metav1.GetOptions{})
		switch {
		case err == nil && OwnedBy(sb, cl):
			return a, cl, sb, nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", nil, nil, explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		}
	}
	return ObjectName(id), cl, nil, nil // none of its own yet: a cold start is named as its claim
}

// OwnedBy says whether claim c is Sandbox sb's controller.
func OwnedBy(sb *sbv1.Sandbox, c *extv1.SandboxClaim) bool {
	ref := metav1.GetControllerOf(sb)
	return ref != nil && ref.Kind == "SandboxClaim" && ref.UID == c.UID && c.UID != ""
}

// Adopted is the name of the Sandbox claim c holds ("" none yet): its
// status's, else the annotation the controller writes first; "" for no
// claim (nil).
func Adopted(c *extv1.SandboxClaim) string {
	if c == nil {
		return ""
	}
	if n := c.Status.SandboxStatus.Name; n != "" {
		return n
	}
	return c.Annotations[extv1.AssignedSandboxNameAnnotation]
}

// homeClaimOf is the home's claim of the Sandbox (or pod) name.
func homeClaimOf(name string) string { return homeVolume + "-" + name }

// Create makes neuron n's objects, or, when a stopped neuron of its id
// is there, starts it again on its home. A create that fails leaves
// nothing it made behind.
func (c *Cluster) Create(ctx context.Context, n Neuron) error {
	_, err := c.create(ctx, n)
	return err
}

// create is Create, and the name of the objects it made or started.
func (c *Cluster) create(ctx context.Context, n Neuron) (string, error) {
	cfg := c.Config.Defaults()
	if err := cfg.Check(); err != nil {
		return "", errdefs.New(errdefs.Invalid, err.Error())
	}
	if c.Agents == nil {
		return ObjectName(n.ID), c.createPod(ctx, cfg, n)
	}
	want, err := Sandbox(cfg, n)
	if err != nil {
		return "", err
	}
	name, claim, err := c.Resolve(ctx, n.ID)
	if err != nil {
		return "", err
	}
	sbs := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace)
	for try := 0; ; try++ {
		old, err := sbs.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && claim != nil:
			return "", errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s's SandboxClaim %s/%s holds no Sandbox now (agent-sandbox's controller is giving it one): try again", n.ID, cfg.Namespace, claim.Name))
		case apierrors.IsNotFound(err):
			// A home left by a Sandbox deleted without Cortex's wipe (its
			// deadline's, with policy Delete) goes when the cluster's
			// garbage collector and pvc-protection let it; a new
			// Sandbox's controller would not take it, and its pod would
			// never be made.
			claim := HomeClaimName(n.ID)
			if _, err := c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, claim, metav1.GetOptions{}); err == nil {
				return "", errdefs.New(errdefs.Busy, fmt.Sprintf("the home of neuron %s (%s/%s) is still there from a Sandbox that was deleted (a wipe, or a deadline's): create it again once it is gone", n.ID, cfg.Namespace, claim))
			} else if !apierrors.IsNotFound(err) {
				return "", explain(err, "get", "persistentvolumeclaims", cfg.Namespace)
			}
			made, err := sbs.Create(ctx, want, metav1.CreateOptions{})
			if err != nil {
				return "", explain(err, "create", "sandboxes.agents.x-k8s.io", cfg.Namespace)
			}
			return name, c.raced(ctx, n.ID, made)
		case err != nil:
			return "", explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		case old.Spec.OperatingMode != sbv1.SandboxOperatingModeSuspended && !Expired(old, time.Now()) || old.DeletionTimestamp != nil:
			return "", errdefs.New(errdefs.Exists, fmt.Sprintf("neuron %s is already there (Sandbox %s/%s, %s)", n.ID, cfg.Namespace, want.Name, old.Spec.OperatingMode))
		}
		// A stopped neuron (suspended, or past its deadline): running
		// again, on the home it kept (its claim templates cannot change),
		// with this create's pod, labels and deadline. The version read
		// is the patch's precondition, so that of two creates one starts
		// it and the other finds it there; the controller writes the
		// status often, so a conflict is read again.
		// The pod's allow-list is this create's, or none: an annotation
		// left out of a merge patch would keep the last run's.
		// So are its secrets.
		annotations := map[string]any{AnnotationEgress: nil, AnnotationSecrets: nil}
		for k, v := range podAnnotations(n) {
			annotations[k] = v
		}
		spec := map[string]any{
			"operatingMode": sbv1.SandboxOperatingModeRunning,
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": want.Spec.PodTemplate.ObjectMeta.Labels, "annotations": annotations},
				"spec":     want.Spec.PodTemplate.Spec,
			},
			"shutdownTime":   want.Spec.ShutdownTime,
			"shutdownPolicy": want.Spec.ShutdownPolicy,
		}
		if claim != nil {
			// A claimed neuron: its pod's metadata is its claim's (the
			// claim's controller puts it back, so it cannot carry an
			// allow-list), its pod this create's; a wipe at a deadline its
			// claim's (claimDeadline).
			if n.Egress != nil {
				return "", &sandbox.UnenforceableError{Mode: Mode, Policy: "network egress",
					Reason: fmt.Sprintf("neuron %s came from the warm pool, and its pod's metadata, where the allow-list goes, is its SandboxClaim's: "+
						"wipe it and create it again with egress (such a create is never a warm claim)", n.ID)}
			}
			spec["podTemplate"] = map[string]any{"spec": PodSpec(cfg, n, homeClaimOf(name))}
			if n.Deadline != nil && n.OnTimeout == sandbox.OnTimeoutWipe {
				spec["shutdownTime"], spec["shutdownPolicy"] = nil, nil
			}
		}
		patch := map[string]any{
			"metadata": map[string]any{"labels": want.Labels, "resourceVersion": old.ResourceVersion},
			"spec":     spec,
		}
		b, err := json.Marshal(patch)
		if err != nil {
			return "", err
		}
		_, err = sbs.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case err == nil && claim != nil:
			// Started: a wipe at its deadline is its claim's (and none,
			// without one, clears the last run's).
			var at *time.Time
			if n.Deadline != nil && n.OnTimeout == sandbox.OnTimeoutWipe {
				at = n.Deadline
			}
			return name, c.claimDeadline(ctx, claim.Name, at)
		case err == nil:
			return name, nil
		case apierrors.IsConflict(err) && try < 10:
			continue
		case apierrors.IsConflict(err):
			return "", errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s's Sandbox kept changing while it was being started: try again", n.ID))
		}
		return "", explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
}

// raced undoes Sandbox sb, just made for neuron id, when a claim of the
// id has been made meanwhile (a create of it from the warm pool, on this
// host or another): of two creates of one id, one wins. Each makes its
// object, then looks for the other's (createClaimed does the same the
// other way round), so at least one of them sees the other.
func (c *Cluster) raced(ctx context.Context, id string, sb *sbv1.Sandbox) error {
	if c.Claims == nil {
		return nil
	}
	cfg := c.Config.Defaults()
	_, err := c.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	uid := sb.UID
	derr := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Delete(rctx, sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if derr != nil && !apierrors.IsNotFound(derr) {
		return errors.Join(errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s is being created by another create (its SandboxClaim)", id)),
			fmt.Errorf("and Sandbox %s/%s this create made could not be removed: %w (delete it by hand)", cfg.Namespace, sb.Name, derr))
	}
	if err != nil {
		return explain(err, "get", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}
	return errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s is being created by another create (its SandboxClaim %s/%s): try again", id, cfg.Namespace, ObjectName(id)))
}

// createPod is Create on the fallback path: the home's claim (kept when
// it is there already: a stopped neuron's), then the pod; a pod that
// cannot be made takes the claim it made with it.
func (c *Cluster) createPod(ctx context.Context, cfg Config, n Neuron) error {
	pod, pvc, err := Fallback(cfg, n)
	if err != nil {
		return err
	}
	claims := c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace)
	made := false
	if old, err := claims.Get(ctx, pvc.Name, metav1.GetOptions{}); err == nil && old.DeletionTimestamp != nil {
		// A wipe's: the claim goes once nothing uses it (the cluster's
		// pvc-protection), and a pod on it now would get no home.
		return errdefs.New(errdefs.Busy, fmt.Sprintf("the home of neuron %s (%s/%s) is being deleted by a wipe: create it again once it is gone", n.ID, cfg.Namespace, pvc.Name))
	} else if err == nil && (old.Labels[LabelID] != n.ID || old.Labels[LabelManaged] != managedBy || len(old.OwnerReferences) != 0) {
		// Not one this mode made (someone else's, made ahead of the
		// neuron under its name): the neuron does not start on it.
		return errdefs.New(errdefs.Permission, fmt.Sprintf("the claim %s/%s where neuron %s's home would be was not made by kube mode (labels %v, %d owners): "+
			"it is not used as a home; remove it, or create the neuron under another id", cfg.Namespace, pvc.Name, n.ID, old.Labels, len(old.OwnerReferences)))
	} else if apierrors.IsNotFound(err) {
		if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return explain(err, "create", "persistentvolumeclaims", cfg.Namespace)
		}
		made = true
	} else if err != nil {
		return explain(err, "get", "persistentvolumeclaims", cfg.Namespace)
	}
	if _, err := c.Core.CoreV1().Pods(cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		err = explain(err, "create", "pods", cfg.Namespace)
		if made {
			// With a context of its own: the create's may be what ended.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if rerr := claims.Delete(rctx, pvc.Name, metav1.DeleteOptions{}); rerr != nil && !apierrors.IsNotFound(rerr) {
				return errors.Join(err, fmt.Errorf("and the home's claim %s/%s it made could not be removed: %w (delete it by hand)", cfg.Namespace, pvc.Name, rerr))
			}
		}
		return err
	}
	return nil
}

// Stop ends neuron id's pod and keeps its home: the Sandbox is suspended
// (the pod deleted, the claim kept), or the plain pod deleted.
func (c *Cluster) Stop(ctx context.Context, id string) error {
	cfg := c.Config.Defaults()
	name, claim, err := c.Resolve(ctx, id)
	if err != nil {
		return err
	}
	if c.Agents == nil {
		err := c.Core.CoreV1().Pods(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return explain(err, "delete", "pods", cfg.Namespace)
		}
		return nil
	}
	// The deadline goes with the run it was for: agent-sandbox's
	// controller acts on a shutdown time whatever the operating mode, and
	// a wipe at it would take the home a stop keeps.
	b := []byte(`{"spec":{"operatingMode":"` + string(sbv1.SandboxOperatingModeSuspended) + `","shutdownTime":null,"shutdownPolicy":null}}`)
	_, err = c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return errdefs.New(errdefs.NotFound, fmt.Sprintf("no neuron %s in namespace %s", id, cfg.Namespace))
	}
	if err != nil {
		return explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
	if claim != nil && claim.Spec.Lifecycle != nil {
		// A wipe at a deadline is the claim's: it goes with the run it
		// was for too, once the Sandbox is stopped (before, a failed
		// stop would leave the neuron running with no deadline).
		return c.claimDeadline(ctx, claim.Name, nil)
	}
	return nil
}

// Wipe removes every object of neuron id, its home included. The claim
// is deleted by name as well as by its owner, so that a cluster whose
// garbage collector lags does not keep a wiped neuron's data.
func (c *Cluster) Wipe(ctx context.Context, id string) error {
	cfg := c.Config.Defaults()
	var errs []error
	gone := func(err error, verb, resource string) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, explain(err, verb, resource, cfg.Namespace))
		}
	}
	name, claim, err := c.Resolve(ctx, id)
	if err != nil {
		return err
	}
	if claim != nil {
		// The claim first: while it is there, a Sandbox of it deleted is
		// one it replaces, from the pool or anew.
		gone(c.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Delete(ctx, ObjectName(id), metav1.DeleteOptions{}), "delete", "sandboxclaims.extensions.agents.x-k8s.io")
	}
	// The claim's Sandbox, and n-<id> whatever made it (a cold create
	// of the id racing a claim of it): a wipe leaves nothing of the id.
	names := []string{name}
	if name != ObjectName(id) {
		names = append(names, ObjectName(id))
	}
	for _, name := range names {
		if c.Agents != nil {
			fg := metav1.DeletePropagationForeground
			gone(c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}), "delete", "sandboxes.agents.x-k8s.io")
		} else {
			gone(c.Core.CoreV1().Pods(cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{}), "delete", "pods")
		}
		gone(c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Delete(ctx, homeClaimOf(name), metav1.DeleteOptions{}), "delete", "persistentvolumeclaims")
	}
	return errors.Join(errs...)
}

// Observe reads neuron id's objects (known: this host made it and has
// not destroyed it; wasReady: it was ready before).
func (c *Cluster) Observe(ctx context.Context, id string, known, wasReady bool) (Observed, error) {
	v, err := c.read(ctx, id, known, wasReady)
	return v.Observed, err
}

// objects are a neuron's objects as one read found them, and its state.
type objects struct {
	Observed
	// name and claim are what Resolve would find: the name of the
	// neuron's Sandbox and pod, and its claim (nil: no claim holds it).
	name  string
	claim *extv1.SandboxClaim
	sb    *sbv1.Sandbox // nil: none (or the pods path)
	pod   *corev1.Pod   // nil: none
}

// read reads neuron id's objects: its claim, and the Sandbox and pod of
// the name a neuron has unless a claim holds a warm Sandbox for it, all
// at once (one round trip); then, where a claim holds one, that
// Sandbox's and its pod.
func (c *Cluster) read(ctx context.Context, id string, known, wasReady bool) (objects, error) {
	cfg := c.Config.Defaults()
	v := objects{name: ObjectName(id)}
	var claimErr error
	var wg sync.WaitGroup
	if c.Claims != nil {
		wg.Go(func() {
			cl, err := c.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Get(ctx, v.name, metav1.GetOptions{})
			switch {
			case err == nil:
				v.claim = cl
			case !apierrors.IsNotFound(err):
				claimErr = explain(err, "get", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
			}
		})
	}
	sb, pod, err := c.readNamed(ctx, v.name)
	wg.Wait()
	if claimErr != nil {
		return v, claimErr
	}
	if err != nil {
		return v, err
	}
	v.sb, v.pod = sb, pod
	if a := Adopted(v.claim); a != "" && a != v.name && c.Agents != nil {
		sb, pod, err := c.readNamed(ctx, a)
		if err != nil {
			return v, err
		}
		if sb != nil && OwnedBy(sb, v.claim) {
			v.name, v.sb, v.pod = a, sb, pod
		}
	}
	v.Observed, err = c.observed(ctx, v, known, wasReady)
	return v, err
}

// readNamed reads the Sandbox (where the cluster serves them) and the
// pod named name at once; nil for each that is not there.
func (c *Cluster) readNamed(ctx context.Context, name string) (*sbv1.Sandbox, *corev1.Pod, error) {
	cfg := c.Config.Defaults()
	var sb *sbv1.Sandbox
	var sbErr error
	var wg sync.WaitGroup
	if c.Agents != nil {
		wg.Go(func() {
			got, err := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
			switch {
			case err == nil:
				sb = got
			case !apierrors.IsNotFound(err):
				sbErr = explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
			}
		})
	}
	pod, err := c.Core.CoreV1().Pods(cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	wg.Wait()
	switch {
	case sbErr != nil:
		return nil, nil, sbErr
	case apierrors.IsNotFound(err):
		return sb, nil, nil
	case err != nil:
		return nil, nil, explain(err, "get", "pods", cfg.Namespace)
	}
	return sb, pod, nil
}

// observed is the state of the neuron whose objects v holds.
func (c *Cluster) observed(ctx context.Context, v objects, known, wasReady bool) (Observed, error) {
	cfg := c.Config.Defaults()
	sb, pod, name := v.sb, v.pod, v.name
	o := Observe(sb, pod, known, wasReady)
	if at, ok := claimWipeAt(v.claim); ok && o.Deadline == nil && (o.Phase == Running || o.Phase == Unhealthy || o.Phase == Starting || o.Phase == Scheduling) {
		o.Deadline, o.OnTimeout = &at, sandbox.OnTimeoutWipe
	}
	if o.Phase == Absent && c.Agents == nil {
		// A plain pod's neuron is stopped when its home is all there is.
		pvc, err := c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, homeClaimOf(name), metav1.GetOptions{})
		switch {
		case err == nil && pvc.DeletionTimestamp != nil:
			// Wiped: the claim waits for the cluster to let it go.
		case err == nil:
			o = Observed{Phase: Stopped, Reason: "its pod is gone; its home is kept"}
		case !apierrors.IsNotFound(err):
			return Observed{}, explain(err, "get", "persistentvolumeclaims", cfg.Namespace)
		}
	}
	return o, nil
}

// explain turns the API server's refusal of verb on resource into an
// error that names it and says what to do.
func explain(err error, verb, resource, ns string) error {
	var status apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(msg, "exceeded quota"):
		return errdefs.New(errdefs.Capacity, fmt.Sprintf("namespace %s's resource quota refuses the neuron: %s (raise the quota, or ask for smaller limits)", ns, msg))
	case apierrors.IsForbidden(err) && strings.Contains(msg, "RuntimeClass") && strings.Contains(msg, "not found"):
		return errdefs.New(errdefs.Invalid, fmt.Sprintf("the cluster has no such RuntimeClass: %s (set kube.runtime_class to one it has, which nsys-cortex doctor lists, or install it)", msg))
	case apierrors.IsForbidden(err) && strings.Contains(msg, "violates PodSecurity"):
		return errdefs.New(errdefs.Permission, fmt.Sprintf("namespace %s's Pod Security admission refuses the neuron's pod: %s (the pod meets \"restricted\" but for what the message names; docs/kube.md)", ns, msg))
	case apierrors.IsForbidden(err):
		return errdefs.New(errdefs.Permission, fmt.Sprintf("the cluster's RBAC forbids %s on %s in namespace %s: %s (grant it to Cortex's ServiceAccount: deploy/kubernetes/rbac.yaml; docs/kube.md)", verb, resource, ns, msg))
	case apierrors.IsNotFound(err) && strings.HasSuffix(resource, ".agents.x-k8s.io") && verb == "create":
		return errdefs.New(errdefs.Unsupported, fmt.Sprintf("the cluster does not serve %s (agent-sandbox's CRDs are not installed): install agent-sandbox v1.0, or set kube.objects = pods (docs/kube.md): %s", resource, msg))
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return errdefs.New(errdefs.Exists, fmt.Sprintf("%s %s in namespace %s: %s", verb, resource, ns, msg))
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return errdefs.New(errdefs.Invalid, fmt.Sprintf("the API server refuses to %s %s: %s", verb, resource, msg))
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err):
		return errdefs.New(errdefs.Unavailable, fmt.Sprintf("the API server did not %s %s in time: %s", verb, resource, msg))
	case errors.As(err, &status):
		return fmt.Errorf("%s %s in namespace %s: %w", verb, resource, ns, err)
	}
	return errdefs.New(errdefs.Unavailable, fmt.Sprintf("the API server cannot be reached to %s %s: %v (is kube.kubeconfig right, and the cluster up?)", verb, resource, err))
}

// claimWipeAt is when claim c's controller deletes it, and with it the
// neuron and its home (a wipe at a deadline); ok false: never.
func claimWipeAt(c *extv1.SandboxClaim) (time.Time, bool) {
	if c == nil || c.Spec.Lifecycle == nil || c.Spec.Lifecycle.ShutdownTime == nil {
		return time.Time{}, false
	}
	switch c.Spec.Lifecycle.ShutdownPolicy {
	case extv1.ShutdownPolicyDelete, extv1.ShutdownPolicyDeleteForeground:
		return c.Spec.Lifecycle.ShutdownTime.Time, true
	}
	return time.Time{}, false
}

// claimDeadline sets when claim name's controller deletes it (a wipe of
// its neuron; nil: never). A claimed neuron's wipe at a deadline is its
// claim's: a Sandbox that deletes itself at its shutdown time would be
// replaced by the claim at once.
func (c *Cluster) claimDeadline(ctx context.Context, name string, at *time.Time) error {
	cfg := c.Config.Defaults()
	lc := map[string]any(nil)
	if at != nil {
		lc = map[string]any{"shutdownTime": WholeSeconds(*at).Format(time.RFC3339), "shutdownPolicy": string(extv1.ShutdownPolicyDelete)}
	}
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"lifecycle": lc}})
	if err != nil {
		return err
	}
	_, err = c.Claims.ExtensionsV1beta1().SandboxClaims(cfg.Namespace).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return explain(err, "patch", "sandboxclaims.extensions.agents.x-k8s.io", cfg.Namespace)
	}
	return nil
}
