package kube_test

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// besideController is a real API server with agent-sandbox's Sandbox
// controller in process and kubesim beside it, and the configuration of
// a namespace prepared there.
func besideController(t *testing.T) (kubernetes.Interface, agents.Interface, kube.Config) {
	t.Helper()
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	cluster.StartController(t, rc)
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.StartBeside(t, core, ag, cfg) })
	return core, ag, cfg
}

// Deadlines beside agent-sandbox's own controller, which acts on them:
// a neuron made with a timeout is stopped at its shutdown time with its
// home kept, and starts again on it; a deadline moved with SetTimeout is
// the Sandbox's new shutdown time; one set to wipe deletes the Sandbox
// and its home at the deadline, no host acting.
func TestDeadline(t *testing.T) {
	core, ag, cfg := besideController(t)
	ctx := context.Background()
	m := manager(t, core, ag, cfg)
	exec := func(id, script string) string {
		t.Helper()
		c, err := m.Connect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: script}})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}

	st, err := m.Create(ctx, "brief", sandbox.CreateOptions{Timeout: 3 * time.Second, BootTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Deadline == nil || st.OnTimeout != sandbox.OnTimeoutStop {
		t.Fatalf("created with a timeout: deadline %v, on timeout %q", st.Deadline, st.OnTimeout)
	}
	exec("brief", "echo kept > f")
	waittest.For(t, 30*time.Second, "the controller to stop the neuron at its deadline", func() bool {
		st, err := m.Get(ctx, "brief")
		return err == nil && st.Status == sandbox.StatusStopped
	})
	if _, err := m.Create(ctx, "brief", sandbox.CreateOptions{BootTimeout: 20 * time.Second}); err != nil {
		t.Fatalf("a create after the deadline: %v", err)
	}
	if out := exec("brief", "cat f"); out != "kept\n" {
		t.Fatalf("the home after the deadline: %q", out)
	}
	if st, _ := m.Get(ctx, "brief"); st.Deadline != nil {
		t.Errorf("created again without a timeout, it keeps deadline %v", st.Deadline)
	}

	// Moved: the Sandbox's shutdown time is the new one, whole seconds.
	before := time.Now()
	st, err = m.SetTimeout(ctx, "brief", time.Hour, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, kube.ObjectName("brief"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if at := sb.Spec.ShutdownTime; at == nil || at.Before(&metav1.Time{Time: before.Add(time.Hour - time.Second)}) || at.After(before.Add(time.Hour+5*time.Second)) ||
		st.Deadline == nil || !st.Deadline.Equal(at.Time) {
		t.Fatalf("set to an hour: the Sandbox's shutdown time %v, the state's deadline %v", at, st.Deadline)
	}
	if st, err = m.SetTimeout(ctx, "brief", 0, ""); err != nil || st.Deadline != nil {
		t.Fatalf("cleared: %v %v", st.Deadline, err)
	}
	if _, err := m.SetTimeout(ctx, "brief", time.Minute, sandbox.OnTimeoutPause); !errors.As(err, new(*sandbox.UnenforceableError)) {
		t.Errorf("on-timeout pause: %v, want UNENFORCEABLE", err)
	}

	// A stop ends the run's deadline with it: a wipe at it would take the
	// home the stop keeps.
	if _, err := m.SetTimeout(ctx, "brief", time.Hour, sandbox.OnTimeoutWipe); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "brief", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	sb, err = ag.AgentsV1beta1().Sandboxes(cfg.Namespace).Get(ctx, kube.ObjectName("brief"), metav1.GetOptions{})
	// (The CRD defaults the policy to Retain.)
	if err != nil || sb.Spec.ShutdownTime != nil || sb.Spec.ShutdownPolicy != nil && *sb.Spec.ShutdownPolicy != "Retain" {
		t.Fatalf("stopped with a deadline to wipe: the Sandbox keeps shutdown time %v, policy %v (%v)", sb.Spec.ShutdownTime, ptrString(sb.Spec.ShutdownPolicy), err)
	}
	if _, err := m.SetTimeout(ctx, "brief", time.Hour, ""); !errors.As(err, new(*sandbox.NotRunningError)) {
		t.Errorf("a deadline for a stopped neuron: %v, want NOT_RUNNING", err)
	}
	if _, err := m.Create(ctx, "brief", sandbox.CreateOptions{BootTimeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}

	// To wipe: the controller deletes the Sandbox, and the home with it.
	if _, err := m.SetTimeout(ctx, "brief", 2*time.Second, sandbox.OnTimeoutWipe); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 30*time.Second, "the controller to delete the neuron at its deadline", func() bool {
		_, err := m.Get(ctx, "brief")
		return errors.As(err, new(*sandbox.NotFoundError))
	})
	waittest.For(t, 30*time.Second, "its home to go", func() bool {
		claims, err := core.CoreV1().PersistentVolumeClaims(cfg.Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0
	})
	if _, err := m.SetTimeout(ctx, "brief", time.Minute, ""); !errors.As(err, new(*sandbox.NotFoundError)) {
		t.Errorf("a timeout for a wiped neuron: %v, want NOT_FOUND", err)
	}
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return "none"
	}
	return string(*p)
}

// Two creates of one stopped neuron at once: one starts it, the other
// finds it there (EXISTS), on the real API server, whose versions are
// the patches' preconditions.
func TestConcurrentStart(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true, Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	cluster.Prepare(t, core, cfg)
	ctx := context.Background()
	cl := manager(t, core, ag, cfg).Cluster // its trust ConfigMap for kubesim's pods
	boxedKubelet(t, func() *kubesim.Kubelet { return kubesim.Start(t, core, ag, cfg) })
	n := kube.Neuron{ID: "twice"}
	if err := cl.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		if err := cl.Stop(ctx, "twice"); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- cl.Create(ctx, n) }()
		}
		var ok, exists int
		for range 2 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case errdefs.Of(err).Is(errdefs.Exists):
				exists++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if ok != 1 || exists != 1 {
			t.Fatalf("round %d: %d creates started the stopped neuron, %d found it there; want one each", round, ok, exists)
		}
	}
}
