package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// The channel over the API server's port-forward (kube.port_forward,
// --kube-port-forward: a host outside the cluster): the Manager's whole
// scenario, on each path, with its hosts' links carried by the real API
// server's pods/portforward to the kubelet's port-forward handler (the
// one kubelets run, k8s.io/cri-streaming's) and from there to the pod's
// agent. Agent death is still seen within 2 s (the forwarded connection
// closes), and a swapped trust key still refuses the host. TestCLI
// runs the flag.
func TestPortForward(t *testing.T) {
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}
	for _, path := range []string{"pods", "sandbox"} {
		t.Run(path, func(t *testing.T) {
			rc := cluster.Start(t, cluster.Options{Sandboxes: path == "sandbox", Quiet: true})
			core := kubernetes.NewForConfigOrDie(rc)
			cluster.Prepare(t, core, cfg)
			var ag agents.Interface
			if path == "sandbox" {
				ag = cluster.Agents(rc)
			}
			forwarded := cluster.ServePortForward(t, core)
			fwd, err := kube.NewForwarder(rc)
			if err != nil {
				t.Fatal(err)
			}
			kubesim.RunManagerAs(t, core, ag, kubesim.Hosts{Core: core, Agents: ag, Forward: fwd}, cfg)
			// Each link dialled through the kubelet: at least the first
			// host's two creates and the second host's (5 here, with the
			// neurons of the death and trust cases).
			t.Logf("%d connections forwarded", forwarded.Load())
			if n := forwarded.Load(); n < 3 {
				t.Errorf("%d connections went through the kubelet's port-forward, want at least 3", n)
			}
		})
	}
}
