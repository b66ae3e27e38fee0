package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
)

// The Manager on client-go's fake clientsets, each path: agent-sandbox's
// Sandboxes, and plain pods (test/kube runs the same against a real API
// server).
func TestManager(t *testing.T) {
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", RuntimeClass: "gvisor", StorageClass: "fast"}
	t.Run("sandbox", func(t *testing.T) { kubesim.RunManager(t, fake.NewClientset(), agentsfake.NewSimpleClientset(), cfg) })
	t.Run("pods", func(t *testing.T) { kubesim.RunManager(t, fake.NewClientset(), nil, cfg) })
}
