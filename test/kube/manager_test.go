package kube_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
)

// prepare makes what a cluster has before Cortex's first neuron: the
// namespace, its default service account (the controller manager's
// work, which this server does not run) and the RuntimeClass.
func prepare(t *testing.T, core kubernetes.Interface, cfg kube.Config) {
	t.Helper()
	ctx := context.Background()
	cfg = cfg.Defaults()
	if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().ServiceAccounts(cfg.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cfg.RuntimeClass != "" {
		if _, err := core.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: cfg.RuntimeClass}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// agentsClient is agent-sandbox's client on rc: JSON, as custom
// resources have no protobuf form (the test server's configuration asks
// for protobuf).
func agentsClient(rc *rest.Config) agents.Interface {
	rc = rest.CopyConfig(rc)
	rc.ContentType, rc.AcceptContentTypes = "application/json", "application/json"
	return agents.NewForConfigOrDie(rc)
}

// The Manager's scenario (kubesim.RunManager: create, exec, stop, create
// again on the kept home, a second host, wipe, a failed create that
// leaves nothing, refusals) against a real kube-apiserver, on each path:
// what the API server validates, defaults and admits is real here, and
// what a fake clientset lets by is not let by.
func TestManager(t *testing.T) {
	cfg := kube.Config{Image: "registry.example/nsys-cortex-neuron:1", RuntimeClass: "gvisor", StorageClass: "fast"}
	for _, path := range []string{"pods", "sandbox"} {
		t.Run(path, func(t *testing.T) {
			rc := startAPIServer(t, path == "sandbox")
			core := kubernetes.NewForConfigOrDie(rc)
			prepare(t, core, cfg)
			var ag agents.Interface
			if path == "sandbox" {
				ag = agentsClient(rc)
			}
			kubesim.RunManager(t, core, ag, cfg)
		})
	}
}
