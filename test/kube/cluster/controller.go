package cluster

import (
	"context"

	"github.com/go-logr/logr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/controllers"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
	extctrl "sigs.k8s.io/agent-sandbox/extensions/controllers"
	"sigs.k8s.io/agent-sandbox/extensions/controllers/queue"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// noTracing is agent-sandbox's controller's tracer, switched off (its
// own no-op is in an internal package).
type noTracing struct{}

func (noTracing) StartSpan(ctx context.Context, _ metav1.Object, _ string, _ map[string]string) (context.Context, func()) {
	return ctx, func() {}
}
func (noTracing) GetTraceContext(context.Context) string              { return "" }
func (noTracing) AddEvent(context.Context, string, map[string]string) {}
func (noTracing) IsRecording(context.Context) bool                    { return false }

// StartController runs agent-sandbox's controllers (their reconcilers,
// from the pinned module) in this process against rc, until the test
// ends: the Sandbox's, and its extensions' (SandboxTemplate,
// SandboxWarmPool, SandboxClaim), as its controller runs them with
// --extensions and its other flags' defaults.
func StartController(t T, rc *rest.Config) { Controller{}.Start(t, rc) }

// Controller is what agent-sandbox-controller's flags set that a test
// sets otherwise; the zero value is their defaults.
type Controller struct {
	// MaxRefillRate is --sandbox-warm-pool-max-refill-rate: the warm
	// pool's replacements made at most this many a second (0: as fast as
	// the pool empties).
	MaxRefillRate float64
}

// Start is StartController with c's flags.
func (c Controller) Start(t T, rc *rest.Config) {
	t.Helper()
	ctrl.SetLogger(logr.Discard()) // its logs are the API server's business here
	rc = rest.CopyConfig(rc)
	rc.ContentType = "application/json" // custom resources have no protobuf form
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := sbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := extv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Each test its own controller, in one process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	// Each with the workers agent-sandbox-controller's flags default to.
	type reconciler interface{ SetupWithManager(ctrl.Manager, int) error }
	for r, workers := range map[reconciler]int{
		&controllers.SandboxReconciler{Client: mgr.GetClient(), Scheme: scheme, Recorder: mgr.GetEventRecorder("sandbox-controller"), Tracer: noTracing{}}:                        100,
		&extctrl.SandboxWarmPoolReconciler{Client: mgr.GetClient(), Scheme: scheme, Recorder: mgr.GetEventRecorder("sandboxwarmpool-controller"), MaxRefillRate: c.MaxRefillRate}: 1,
		&extctrl.SandboxClaimReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
			WarmSandboxQueue: queue.NewSimpleSandboxQueue(), Recorder: mgr.GetEventRecorder("sandboxclaim-controller"), Tracer: noTracing{}}: 50,
		&extctrl.SandboxTemplateReconciler{Client: mgr.GetClient(), Scheme: scheme, Recorder: mgr.GetEventRecorder("sandboxtemplate-controller"), Tracer: noTracing{}}: 1,
	} {
		if err := r.SetupWithManager(mgr, workers); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent-sandbox's controller: %v", err)
		}
	})
}
