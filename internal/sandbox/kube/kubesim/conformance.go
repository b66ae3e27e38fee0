package kubesim

import (
	"context"
	"crypto/ed25519"
	"testing"

	"k8s.io/client-go/kubernetes"
	agents "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"

	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// sim is why kubesim's neurons are no boundary.
const sim = "kubesim runs each pod's agent in the test process: what confines a neuron on a cluster is its pod (docs/kube-validation.md)"

// Conformance is kube mode's configuration of the shared suite
// (sandboxtest.Run) with a Kubelet: each fixture gets the cluster
// cluster returns for it (its clients and configuration: a cluster, or a
// namespace, of its own), which every manager the suite builds for the
// fixture (its "hosts") shares; a kill is the agent's death as Kill
// makes it. What the mode or kubesim cannot take is skipped, saying why.
// beside: agent-sandbox's own controller runs (StartBeside). boxes, when
// it returns a manager, runs the pods' agents inside its neurons
// (InSandboxes: nsbox, a boundary), and the suite's file tests with them.
func Conformance(beside bool, cluster func(t testing.TB) (kubernetes.Interface, agents.Interface, kube.Config),
	boxes func(t testing.TB) (sandbox.Manager, string)) sandboxtest.Config {
	start := Start
	if beside {
		start = StartBeside
	}
	var cur struct {
		cl  *kube.Cluster
		key ed25519.PrivateKey
		kl  *Kubelet
	}
	unconfined := sim
	skip := map[string]string{
		"Files":       "kubesim's agents run in the test process on a root of their own, so the pod's absolute paths (/home/agent/workspace) are not theirs; relative paths are tried by Exec, Persistence and RunManager",
		"Ownership":   "a kube neuron is the cluster's: every host with the configuration drives it (docs/kube.md, \"The Manager\"), so none owns it alone",
		"Boundary":    sim,
		"DiskCeiling": "a kube neuron's disk is its pod's ephemeral-storage limit and its claim's size, which the kubelet enforces (docs/kube-validation.md)",
		"NoLeaks":     "kubesim's watches, made with the fixture, live until the test ends; the Manager's informer and links end at Close",
	}
	if boxes != nil {
		// The pods' agents run in nsbox neurons whose home is the pod's
		// /home/agent: the file tests' absolute paths are theirs.
		delete(skip, "Files")
		unconfined = "kubesim runs each pod's agent in an nsbox neuron, whose boundary nsbox's own suite tries; a kube neuron's is its pod's, which only a real cluster has (docs/kube-validation.md)"
		skip["Boundary"] = unconfined
	}
	return sandboxtest.Config{
		Env: func(t testing.TB) sandbox.Env {
			var box sandbox.Manager
			var bin string
			if boxes != nil {
				box, bin = boxes(t) // before the Kubelet: its cleanup after the Kubelet's
			}
			core, ag, cfg := cluster(t)
			cfg = cfg.Defaults()
			key, _ := podtoken.NewKey()
			if err := kube.EnsureTrust(context.Background(), core, cfg, key); err != nil {
				t.Fatal(err)
			}
			cur.cl, cur.key = &kube.Cluster{Core: core, Agents: ag, Config: cfg}, key
			cur.kl = start(t, core, ag, cfg)
			if box != nil {
				if err := cur.kl.InSandboxes(box, bin); err != nil {
					t.Fatal(err)
				}
			}
			return sandbox.Env{}
		},
		New: func(env sandbox.Env) sandbox.Manager {
			cl := *cur.cl
			return &kube.Manager{Cluster: &cl, Key: cur.key, Layout: env.Layout}
		},
		Kill: func(t *testing.T, st *sandbox.State) {
			if err := cur.kl.Kill(context.Background(), cur.cl.Config.Namespace, kube.ObjectName(st.ID), 137); err != nil {
				t.Fatal(err)
			}
		},
		Detached:    true,
		RemoteFiles: true,
		IDLimit:     61, // "n-" and the id is a DNS label
		Unconfined:  unconfined,
		Skip:        skip,
	}
}
