package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// podWith is a neuron pod in phase p, changed by each f.
func podWith(p corev1.PodPhase, f ...func(*corev1.Pod)) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "n-a"}, Status: corev1.PodStatus{Phase: p}}
	for _, f := range f {
		f(pod)
	}
	return pod
}

func onNode(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
}

func ready(p *corev1.Pod) {
	p.Status.PodIP = "10.0.0.7"
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

func notReady(p *corev1.Pod) {
	p.Status.PodIP = "10.0.0.7"
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
}

func waiting(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: AgentContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}}}}
	}
}

func exited(code int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: AgentContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error"}}}}
	}
}

func deleting(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }

func sandboxIn(mode sbv1.SandboxOperatingMode, conds ...metav1.Condition) *sbv1.Sandbox {
	return &sbv1.Sandbox{Spec: sbv1.SandboxSpec{OperatingMode: mode}, Status: sbv1.SandboxStatus{Conditions: conds}}
}

// Every row of docs/kube.md's state table, driven by a synthetic update
// of the objects.
func TestPhases(t *testing.T) {
	running := sandboxIn(sbv1.SandboxOperatingModeRunning)
	suspended := sandboxIn(sbv1.SandboxOperatingModeSuspended)
	expired := sandboxIn(sbv1.SandboxOperatingModeRunning, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "SandboxExpired"})
	expired.Spec.ShutdownTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	finished := sandboxIn(sbv1.SandboxOperatingModeRunning, metav1.Condition{Type: "Finished", Status: metav1.ConditionTrue, Reason: "SandboxExpired", Message: "shutdown time passed"})
	for _, c := range []struct {
		name      string
		sb        *sbv1.Sandbox
		pod       *corev1.Pod
		known     bool
		wasReady  bool
		want      Phase
		status    sandbox.Status
		exit      int
		ip        string
		reasonHas string
	}{
		{name: "the Sandbox, no pod yet", sb: running, want: Scheduling, status: sandbox.StatusPending},
		{name: "pending, unschedulable", sb: running, pod: podWith(corev1.PodPending, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes"}}
		}), want: Scheduling, status: sandbox.StatusPending, reasonHas: "0/3 nodes"},
		{name: "placed, container creating", pod: podWith(corev1.PodPending, onNode, waiting("ContainerCreating")), want: Starting, status: sandbox.StatusPending, reasonHas: "ContainerCreating"},
		{name: "running, not ready yet", pod: podWith(corev1.PodRunning, onNode, notReady), want: Starting, status: sandbox.StatusPending},
		{name: "running and ready", sb: running, pod: podWith(corev1.PodRunning, onNode, ready), want: Running, status: sandbox.StatusRunning, ip: "10.0.0.7"},
		{name: "ready once, not now", pod: podWith(corev1.PodRunning, onNode, notReady), wasReady: true, want: Unhealthy, status: sandbox.StatusRunning, ip: "10.0.0.7"},
		{name: "an image that cannot be pulled", pod: podWith(corev1.PodPending, onNode, waiting("ImagePullBackOff")), want: Failed, status: sandbox.StatusStopped, reasonHas: "ImagePullBackOff"},
		{name: "a container it cannot make", pod: podWith(corev1.PodPending, onNode, waiting("CreateContainerConfigError")), want: Failed, status: sandbox.StatusStopped},
		{name: "the agent exited", pod: podWith(corev1.PodFailed, onNode, exited(137)), want: Dead, status: sandbox.StatusStopped, exit: 137, reasonHas: "exit code 137"},
		{name: "the agent exited, saying why", pod: podWith(corev1.PodFailed, onNode, exited(1), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Terminated.Message = "cortex-agent: the trust key's SHA-256 is ...\n"
		}), want: Dead, status: sandbox.StatusStopped, exit: 1, reasonHas: `saying "cortex-agent: the trust key's SHA-256 is ..."`},
		{name: "the agent exited, its words hostile", pod: podWith(corev1.PodFailed, onNode, exited(1), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Terminated.Message = "\x1b]0;owned\x07" + strings.Repeat("x", 4000)
		}), want: Dead, status: sandbox.StatusStopped, exit: 1, reasonHas: `saying "\x1b]0;owned\a` + strings.Repeat("x", 290) + `"`},
		{name: "evicted", pod: podWith(corev1.PodFailed, onNode, func(p *corev1.Pod) { p.Status.Reason, p.Status.Message = "Evicted", "node low on memory" }), want: Dead, status: sandbox.StatusStopped, reasonHas: "Evicted"},
		{name: "the Sandbox finished, its pod gone", sb: finished, want: Dead, status: sandbox.StatusStopped, reasonHas: "SandboxExpired"},
		{name: "past its shutdown time, its pod gone (Retain)", sb: expired, want: Stopped, status: sandbox.StatusStopped, reasonHas: "deadline passed"},
		{name: "past its shutdown time, its pod going", sb: expired, pod: podWith(corev1.PodRunning, onNode, ready, deleting), want: Stopping, status: sandbox.StatusStopped},
		{name: "the pod being deleted", sb: running, pod: podWith(corev1.PodRunning, onNode, ready, deleting), want: Stopping, status: sandbox.StatusStopped},
		{name: "suspended, the pod going", sb: suspended, pod: podWith(corev1.PodRunning, onNode, ready, deleting), want: Stopping, status: sandbox.StatusStopped},
		{name: "suspended, the pod gone", sb: suspended, want: Stopped, status: sandbox.StatusStopped},
		{name: "deleted outside Cortex", known: true, want: Lost, status: sandbox.StatusUnknown},
		{name: "never made", want: Absent, status: sandbox.StatusUnknown},
	} {
		got := Observe(c.sb, c.pod, c.known, c.wasReady)
		if got.Phase != c.want || got.Status() != c.status || got.ExitCode != c.exit || got.PodIP != c.ip || c.reasonHas != "" && !strings.Contains(got.Reason, c.reasonHas) {
			t.Errorf("%s: %+v (status %s), want %s, %s, exit %d, ip %q, reason with %q", c.name, got, got.Status(), c.want, c.status, c.exit, c.ip, c.reasonHas)
		}
	}
}

// The deadline is read back from where the cluster keeps it: the
// Sandbox's shutdown time and policy, or a plain pod's annotation.
func TestDeadlineObserved(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	sb := sandboxIn(sbv1.SandboxOperatingModeRunning)
	if o := Observe(sb, nil, false, false); o.Deadline != nil {
		t.Errorf("no shutdown time: %+v", o)
	}
	sb.Spec.ShutdownTime = &metav1.Time{Time: at}
	if o := Observe(sb, podWith(corev1.PodRunning, onNode, ready), false, false); o.Deadline == nil || !o.Deadline.Equal(at) || o.OnTimeout != sandbox.OnTimeoutStop {
		t.Errorf("a shutdown time: %+v", o)
	}
	del := sbv1.ShutdownPolicyDelete
	sb.Spec.ShutdownPolicy = &del
	if o := Observe(sb, nil, false, false); o.OnTimeout != sandbox.OnTimeoutWipe {
		t.Errorf("policy Delete: %+v, want wipe", o)
	}
	pod := podWith(corev1.PodRunning, onNode, ready, func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationDeadline: at.Format(time.RFC3339)} })
	if o := Observe(nil, pod, false, false); o.Deadline == nil || !o.Deadline.Equal(at) || o.OnTimeout != sandbox.OnTimeoutStop {
		t.Errorf("a plain pod's deadline: %+v", o)
	}
	pod.Annotations[AnnotationDeadline] = "not a time"
	if o := Observe(nil, pod, false, false); o.Deadline != nil {
		t.Errorf("a deadline that does not parse: %+v", o)
	}
}

// Which pod the host takes as a neuron's (ofNeuron): where the cluster
// serves Sandboxes, only one its Sandbox, named as the pod, controls
// (and, for a claimed neuron, the Sandbox of the uid the claim holds),
// whatever its labels or annotations say; on the fallback path, the pod
// that names the neuron. The review's forgeries of 12-07, each made by
// someone who may make pods: a pod under the neuron's name with its
// annotation and no owner, and one with a controller of another group
// that agent-sandbox's controller adopts by uid.
func TestOfNeuron(t *testing.T) {
	const uid = "uid-of-n-a"
	sandboxRef := func(apiVersion, name, uid string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "Sandbox", Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
		}
	}
	labelled := func(p *corev1.Pod) { p.Labels = map[string]string{LabelID: "a"} }
	annotated := func(p *corev1.Pod) { p.Annotations = map[string]string{LabelID: "a"} }
	ours := sandboxRef(sbv1.GroupVersion.String(), "n-a", uid)
	for _, c := range []struct {
		what      string
		pod       *corev1.Pod
		sandboxes bool
		owner     types.UID
		want      bool
	}{
		{"its Sandbox's, labelled", podWith(corev1.PodRunning, labelled, ours), true, "", true},
		{"its claim's Sandbox's, unlabelled", podWith(corev1.PodRunning, ours), true, uid, true},
		{"its claim's Sandbox's, annotated", podWith(corev1.PodRunning, annotated, ours), true, uid, true},
		{"labelled, no owner", podWith(corev1.PodRunning, labelled), true, "", false},
		{"annotated, no owner", podWith(corev1.PodRunning, annotated), true, uid, false},
		{"a controller of another group", podWith(corev1.PodRunning, labelled, sandboxRef("x.example/v1", "n-a", uid)), true, uid, false},
		{"another Sandbox's", podWith(corev1.PodRunning, labelled, sandboxRef(sbv1.GroupVersion.String(), "n-b", uid)), true, "", false},
		{"a Sandbox of another uid", podWith(corev1.PodRunning, labelled, sandboxRef(sbv1.GroupVersion.String(), "n-a", "other")), true, uid, false},
		{"its Sandbox's, naming another neuron", podWith(corev1.PodRunning, ours, func(p *corev1.Pod) { p.Labels = map[string]string{LabelID: "b"} }), true, uid, false},
		{"its Sandbox's, naming none, no claim", podWith(corev1.PodRunning, ours), true, "", false},
		{"the fallback's, labelled", podWith(corev1.PodRunning, labelled), false, "", true},
		{"the fallback's, unlabelled", podWith(corev1.PodRunning), false, "", false},
	} {
		if got := ofNeuron("a", c.pod, c.sandboxes, c.owner); got != c.want {
			t.Errorf("%s: taken %v, want %v", c.what, got, c.want)
		}
	}
}
