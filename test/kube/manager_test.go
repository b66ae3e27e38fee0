package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The Manager's scenario (kubesim.RunManager: create, exec, stop, create
// again on the kept home, a second host, wipe, a failed create that
// leaves nothing, refusals) against a real kube-apiserver, on each path:
// what the API server validates, defaults and admits is real here, and
// what a fake clientset lets by is not let by.
func TestManager(t *testing.T) {
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", RuntimeClass: "gvisor", StorageClass: "fast"}
	for _, path := range []string{"pods", "sandbox"} {
		t.Run(path, func(t *testing.T) {
			rc := cluster.Start(t, cluster.Options{Sandboxes: path == "sandbox"})
			core := kubernetes.NewForConfigOrDie(rc)
			cluster.Prepare(t, core, cfg)
			var ag agents.Interface
			if path == "sandbox" {
				ag = cluster.Agents(rc)
			}
			kubesim.RunManager(t, core, ag, cfg)
		})
	}
}
