package kube_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The shared conformance suite against a real kube-apiserver with
// agent-sandbox's CRDs and controller: each fixture a namespace of its
// own on the one server, the pods' agents inside nsbox neurons.
func TestConformance(t *testing.T) {
	rc := cluster.Start(t, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	cluster.StartController(t, rc)
	var n atomic.Int64
	sandboxtest.Run(t, kubesim.Conformance(true, func(t testing.TB) (kubernetes.Interface, agents.Interface, kube.Config) {
		cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: fmt.Sprintf("conformance-%d", n.Add(1))}
		cluster.Prepare(t, core, cfg)
		return core, ag, cfg
	}, boxedSandboxes))
}
