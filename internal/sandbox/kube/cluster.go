package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Cluster makes and removes neurons' objects through the API server.
type Cluster struct {
	Core kubernetes.Interface
	// Agents is agent-sandbox's client; nil: the cluster has no such CRDs,
	// and neurons are plain pods (the fallback path).
	Agents agents.Interface
	Config Config
}

// Create makes neuron n's objects, or, when a stopped neuron of its id
// is there, starts it again on its home. A create that fails leaves
// nothing it made behind.
func (c *Cluster) Create(ctx context.Context, n Neuron) error {
	cfg := c.Config.Defaults()
	if err := cfg.Check(); err != nil {
		return errdefs.New(errdefs.Invalid, err.Error())
	}
	if c.Agents == nil {
		return c.createPod(ctx, cfg, n)
	}
	want, err := Sandbox(cfg, n)
	if err != nil {
		return err
	}
	sbs := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace)
	for try := 0; ; try++ {
		old, err := sbs.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// A home left by a Sandbox deleted without Cortex's wipe (its
			// deadline's, with policy Delete) goes when the cluster's
			// garbage collector and pvc-protection let it; a new
			// Sandbox's controller would not take it, and its pod would
			// never be made.
			claim := HomeClaimName(n.ID)
			if _, err := c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, claim, metav1.GetOptions{}); err == nil {
				return errdefs.New(errdefs.Busy, fmt.Sprintf("the home of neuron %s (%s/%s) is still there from a Sandbox that was deleted (a wipe, or a deadline's): create it again once it is gone", n.ID, cfg.Namespace, claim))
			} else if !apierrors.IsNotFound(err) {
				return explain(err, "get", "persistentvolumeclaims", cfg.Namespace)
			}
			if _, err := sbs.Create(ctx, want, metav1.CreateOptions{}); err != nil {
				return explain(err, "create", "sandboxes.agents.x-k8s.io", cfg.Namespace)
			}
			return nil
		case err != nil:
			return explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		case old.Spec.OperatingMode != sbv1.SandboxOperatingModeSuspended && !Expired(old, time.Now()) || old.DeletionTimestamp != nil:
			return errdefs.New(errdefs.Exists, fmt.Sprintf("neuron %s is already there (Sandbox %s/%s, %s)", n.ID, cfg.Namespace, want.Name, old.Spec.OperatingMode))
		}
		// A stopped neuron (suspended, or past its deadline): running
		// again, on the home it kept (its claim templates cannot change),
		// with this create's pod, labels and deadline. The version read
		// is the patch's precondition, so that of two creates one starts
		// it and the other finds it there; the controller writes the
		// status often, so a conflict is read again.
		patch := map[string]any{
			"metadata": map[string]any{"labels": want.Labels, "resourceVersion": old.ResourceVersion},
			"spec": map[string]any{
				"operatingMode":  sbv1.SandboxOperatingModeRunning,
				"podTemplate":    want.Spec.PodTemplate,
				"shutdownTime":   want.Spec.ShutdownTime,
				"shutdownPolicy": want.Spec.ShutdownPolicy,
			},
		}
		b, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		_, err = sbs.Patch(ctx, want.Name, types.MergePatchType, b, metav1.PatchOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && try < 10:
			continue
		case apierrors.IsConflict(err):
			return errdefs.New(errdefs.Busy, fmt.Sprintf("neuron %s's Sandbox kept changing while it was being started: try again", n.ID))
		}
		return explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
	}
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
	if c.Agents == nil {
		err := c.Core.CoreV1().Pods(cfg.Namespace).Delete(ctx, ObjectName(id), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return explain(err, "delete", "pods", cfg.Namespace)
		}
		return nil
	}
	// The deadline goes with the run it was for: agent-sandbox's
	// controller acts on a shutdown time whatever the operating mode, and
	// a wipe at it would take the home a stop keeps.
	b := []byte(`{"spec":{"operatingMode":"` + string(sbv1.SandboxOperatingModeSuspended) + `","shutdownTime":null,"shutdownPolicy":null}}`)
	_, err := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Patch(ctx, ObjectName(id), types.MergePatchType, b, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return errdefs.New(errdefs.NotFound, fmt.Sprintf("no neuron %s in namespace %s", id, cfg.Namespace))
	}
	if err != nil {
		return explain(err, "patch", "sandboxes.agents.x-k8s.io", cfg.Namespace)
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
	if c.Agents != nil {
		fg := metav1.DeletePropagationForeground
		gone(c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Delete(ctx, ObjectName(id), metav1.DeleteOptions{PropagationPolicy: &fg}), "delete", "sandboxes.agents.x-k8s.io")
	} else {
		gone(c.Core.CoreV1().Pods(cfg.Namespace).Delete(ctx, ObjectName(id), metav1.DeleteOptions{}), "delete", "pods")
	}
	gone(c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Delete(ctx, HomeClaimName(id), metav1.DeleteOptions{}), "delete", "persistentvolumeclaims")
	return errors.Join(errs...)
}

// Observe reads neuron id's objects (known: this host made it and has
// not destroyed it; wasReady: it was ready before).
func (c *Cluster) Observe(ctx context.Context, id string, known, wasReady bool) (Observed, error) {
	cfg := c.Config.Defaults()
	var sb *sbv1.Sandbox
	if c.Agents != nil {
		got, err := c.Agents.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
		switch {
		case err == nil:
			sb = got
		case !apierrors.IsNotFound(err):
			return Observed{}, explain(err, "get", "sandboxes.agents.x-k8s.io", cfg.Namespace)
		}
	}
	var pod *corev1.Pod
	got, err := c.Core.CoreV1().Pods(cfg.Namespace).Get(ctx, ObjectName(id), metav1.GetOptions{})
	switch {
	case err == nil:
		pod = got
	case !apierrors.IsNotFound(err):
		return Observed{}, explain(err, "get", "pods", cfg.Namespace)
	}
	o := Observe(sb, pod, known, wasReady)
	if o.Phase == Absent && c.Agents == nil {
		// A plain pod's neuron is stopped when its home is all there is.
		pvc, err := c.Core.CoreV1().PersistentVolumeClaims(cfg.Namespace).Get(ctx, HomeClaimName(id), metav1.GetOptions{})
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
