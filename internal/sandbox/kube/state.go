package kube

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// Phase is a kube neuron's state, read from its objects (docs/kube.md,
// "States"; each row is a case of TestPhases).
type Phase string

const (
	// Scheduling: the pod waits for a node.
	Scheduling Phase = "scheduling"
	// Starting: placed; its image is pulled, its container starts, or
	// its agent is not ready yet.
	Starting Phase = "starting"
	// Running: the agent is ready at the pod's IP.
	Running Phase = "running"
	// Unhealthy: it was ready and is not now (the readiness probe fails).
	Unhealthy Phase = "unhealthy"
	// Failed: it cannot start (an image that cannot be pulled, a
	// container it cannot make): Reason says why.
	Failed Phase = "failed"
	// Dead: the agent's container ended (ExitCode).
	Dead Phase = "dead"
	// Stopping: its pod is being deleted.
	Stopping Phase = "stopping"
	// Stopped: suspended, the pod gone, the home kept (destroy without
	// --wipe).
	Stopped Phase = "stopped"
	// Lost: this host created it and its objects are gone, and no destroy
	// of Cortex removed them.
	Lost Phase = "lost"
	// Absent: there is no such neuron.
	Absent Phase = "absent"
)

// Observed is a neuron's state as its objects show it.
type Observed struct {
	Phase Phase
	// Reason says why, in words, for the phases that have one.
	Reason string
	// PodIP is where the agent listens, once Running or Unhealthy.
	PodIP string
	// ExitCode is the container's, when Dead.
	ExitCode int
	// Deadline is when the cluster ends the neuron (nil: never), and
	// OnTimeout what that does (stop, or wipe).
	Deadline  *time.Time
	OnTimeout sandbox.TimeoutAction
}

// Status is the phase as the sandbox package's status of a neuron.
func (o Observed) Status() sandbox.Status {
	switch o.Phase {
	case Running, Unhealthy:
		return sandbox.StatusRunning
	case Scheduling, Starting:
		return sandbox.StatusPending
	case Stopped, Dead, Failed, Stopping:
		return sandbox.StatusStopped
	}
	return sandbox.StatusUnknown
}

// waitingFailures are a container's waiting reasons that do not pass by
// themselves: the neuron has failed to start.
var waitingFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// Observe reads a neuron's state from its Sandbox (nil on the fallback
// path, or when it is gone) and its pod (nil when there is none). known
// says this host created the neuron and has not destroyed it; wasReady,
// that its agent was ready before.
func Observe(sb *sbv1.Sandbox, pod *corev1.Pod, known, wasReady bool) Observed {
	o := observe(sb, pod, known, wasReady)
	switch {
	case sb != nil && sb.Spec.ShutdownTime != nil:
		d := sb.Spec.ShutdownTime.Time
		o.Deadline, o.OnTimeout = &d, sandbox.OnTimeoutStop
		if sb.Spec.ShutdownPolicy != nil && *sb.Spec.ShutdownPolicy == sbv1.ShutdownPolicyDelete {
			o.OnTimeout = sandbox.OnTimeoutWipe
		}
	case sb == nil && pod != nil && pod.Annotations[AnnotationDeadline] != "":
		if d, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationDeadline]); err == nil {
			o.Deadline, o.OnTimeout = &d, sandbox.OnTimeoutStop
		}
	}
	return o
}

func observe(sb *sbv1.Sandbox, pod *corev1.Pod, known, wasReady bool) Observed {
	if sb != nil && sb.Spec.OperatingMode == sbv1.SandboxOperatingModeSuspended && (pod == nil || pod.DeletionTimestamp != nil) {
		if pod != nil {
			return Observed{Phase: Stopping, Reason: "suspended: its pod is being deleted"}
		}
		return Observed{Phase: Stopped, Reason: "suspended: its home is kept"}
	}
	if sb != nil && sb.DeletionTimestamp != nil {
		return Observed{Phase: Stopping, Reason: "its Sandbox is being deleted"}
	}
	if pod == nil {
		switch {
		case sb != nil:
			if c := condition(sb.Status.Conditions, sbv1.SandboxConditionFinished); c != nil && c.Status == metav1.ConditionTrue {
				return Observed{Phase: Dead, Reason: c.Reason + ": " + c.Message}
			}
			if Expired(sb, time.Now()) {
				// Its controller ended the pod at the shutdown time and
				// keeps the Sandbox (and the home) until a create.
				return Observed{Phase: Stopped, Reason: "its deadline passed (" + sb.Spec.ShutdownTime.UTC().Format(time.RFC3339) + "): its home is kept"}
			}
			return Observed{Phase: Scheduling, Reason: "its pod is not made yet"}
		case known:
			return Observed{Phase: Lost, Reason: "its objects were deleted outside Cortex"}
		}
		return Observed{Phase: Absent}
	}
	if pod.DeletionTimestamp != nil {
		return Observed{Phase: Stopping, Reason: "its pod is being deleted"}
	}
	agent := containerStatus(pod)
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		o := Observed{Phase: Dead, Reason: pod.Status.Reason}
		if agent != nil && agent.State.Terminated != nil {
			t := agent.State.Terminated
			o.ExitCode = int(t.ExitCode)
			o.Reason = fmt.Sprintf("the agent's container ended: %s, exit code %d", t.Reason, t.ExitCode)
			if m := strings.TrimSpace(t.Message); m != "" {
				// The container's own words (its termination message, or
				// its log's tail): the neuron's, so quoted and bounded.
				o.Reason += fmt.Sprintf(", saying %.300q", m)
			}
		} else if pod.Status.Reason != "" {
			o.Reason = fmt.Sprintf("%s: %s", pod.Status.Reason, pod.Status.Message) // Evicted, with the kubelet's words
		}
		return o
	}
	if agent != nil && agent.State.Waiting != nil && waitingFailures[agent.State.Waiting.Reason] {
		w := agent.State.Waiting
		return Observed{Phase: Failed, Reason: fmt.Sprintf("%s: %s", w.Reason, w.Message)}
	}
	if c := podCondition(pod, corev1.PodScheduled); pod.Spec.NodeName == "" && (c == nil || c.Status != corev1.ConditionTrue) {
		o := Observed{Phase: Scheduling}
		if c != nil {
			o.Reason = c.Reason + ": " + c.Message // Unschedulable, with the scheduler's words
		}
		return o
	}
	ready := podCondition(pod, corev1.PodReady)
	if pod.Status.Phase == corev1.PodRunning && ready != nil && ready.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
		return Observed{Phase: Running, PodIP: pod.Status.PodIP}
	}
	if wasReady && pod.Status.Phase == corev1.PodRunning {
		return Observed{Phase: Unhealthy, PodIP: pod.Status.PodIP, Reason: "its agent stopped answering the readiness probe"}
	}
	o := Observed{Phase: Starting}
	if agent != nil && agent.State.Waiting != nil {
		o.Reason = agent.State.Waiting.Reason // ContainerCreating, PodInitializing
	}
	return o
}

// Expired says whether Sandbox sb's shutdown time has come by now: its
// controller then ends its pod, and makes none until the time is moved.
func Expired(sb *sbv1.Sandbox, now time.Time) bool {
	return sb.Spec.ShutdownTime != nil && !now.Before(sb.Spec.ShutdownTime.Time)
}

func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == AgentContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func condition(cs []metav1.Condition, t sbv1.ConditionType) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == string(t) {
			return &cs[i]
		}
	}
	return nil
}
