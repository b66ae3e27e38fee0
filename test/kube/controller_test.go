package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The Manager's scenario on the Sandbox path with agent-sandbox's own
// controller making and removing the pods and claims (kubesim runs the
// pods and stands in for the garbage collector only): what Cortex
// writes in a Sandbox is what the real controller acts on.
func TestManagerWithController(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}
	cluster.Prepare(t, core, cfg)
	cluster.StartController(t, rc)
	kubesim.RunManagerBeside(t, core, cluster.Agents(rc), cfg)
}
