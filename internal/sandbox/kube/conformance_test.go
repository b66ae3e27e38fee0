package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// The shared conformance suite, on the fake clientset with kubesim, each
// path (test/kube runs it against a real API server).
func TestConformance(t *testing.T) {
	for _, sandboxes := range []bool{true, false} {
		t.Run(map[bool]string{true: "sandbox", false: "pods"}[sandboxes], func(t *testing.T) {
			sandboxtest.Run(t, kubesim.Conformance(false, func(testing.TB) (kubernetes.Interface, agents.Interface, kube.Config) {
				var ag agents.Interface
				if sandboxes {
					ag = agentsfake.NewSimpleClientset()
				}
				return fake.NewClientset(), ag, kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}
			}, nil))
		})
	}
}
