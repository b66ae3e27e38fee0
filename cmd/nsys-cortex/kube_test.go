package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kube mode lives in the full program (client-go is heavy to start). The
// light program's stand-in says how to turn the mode on while it is off,
// and hands the command to the full program once it is on, whose answer
// names the API server it could not reach.
func TestKubeModeSplit(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n"+
		"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"), 0o600)
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NSYS_CORTEX_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			base = append(base, kv)
		}
	}
	bin := splitBinary(t)
	env := append(base, "NSYS_CORTEX_HOME="+filepath.Join(t.TempDir(), "h"))
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(env, "create", "--mode", "kube", "k1")
	if err == nil || !strings.Contains(out, "not configured: set kube.image") {
		t.Fatalf("kube mode off: %v\n%s", err, out)
	}
	on := append(env, "NSYS_CORTEX_KUBE_IMAGE=registry.example/neuron:1", "NSYS_CORTEX_KUBE_KUBECONFIG="+kubeconfig)
	out, err = run(on, "create", "--mode", "kube", "k1")
	if err == nil || !strings.Contains(out, "127.0.0.1:1") {
		t.Fatalf("kube mode on, no cluster: %v\n%s", err, out)
	}
	out, _ = run(on, "doctor", "--json")
	var report struct {
		Modes []struct {
			Mode, Summary string
			OK            bool
		}
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	found := false
	for _, m := range report.Modes {
		if m.Mode == "kube" {
			found = true
			if m.OK || !strings.Contains(m.Summary, "cannot be reached") {
				t.Errorf("doctor on kube: %+v", m)
			}
		}
	}
	if !found {
		t.Errorf("doctor does not report kube mode: %s", out)
	}
	// A local neuron's commands do not need the cluster: the modes
	// ahead of kube find it.
	if out, err := run(on, "list"); err != nil {
		t.Errorf("list with a cluster that does not answer: %v\n%s", err, out)
	}
}
