package cli

import (
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// The light program's stand-in for kube mode turns on and explains
// itself as the mode does.
func TestKubeStandInMatches(t *testing.T) {
	if envSharedKeys != kube.EnvAPIKeys {
		t.Errorf("the CLI reads the shared keys' setting from %s, kube mode from %s", envSharedKeys, kube.EnvAPIKeys)
	}
	if kubeImageEnv != kube.EnvImage || kubeNotConfigured != kube.NotConfigured {
		t.Fatalf("the stand-in has %q, %q; kube mode %q, %q", kubeImageEnv, kubeNotConfigured, kube.EnvImage, kube.NotConfigured)
	}
}
