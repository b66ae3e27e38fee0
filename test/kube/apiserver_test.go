package kube_test

import (
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// writeKubeconfig writes a kubeconfig that reaches cfg's server as cfg's
// user, for the CLI.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// A real API server starts, with agent-sandbox's CRDs, and answers.
func TestAPIServerStarts(t *testing.T) {
	start := time.Now()
	cfg := cluster.Start(t, cluster.Options{Sandboxes: true})
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	if cfg.Host == "" {
		t.Fatal("no host")
	}
}
