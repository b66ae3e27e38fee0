package cli

import (
	"slices"
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

// A command line that names a command builds that command alone, so the
// names it is found by must be the command's own: a maker listed under a
// wrong name would leave its command unreachable by that name, or reached
// by one cobra does not know.
func TestCommandMakers(t *testing.T) {
	a := &App{}
	seen := map[string]bool{}
	for _, m := range a.commandMakers() {
		cmd := m.make()
		want := append([]string{cmd.Name()}, cmd.Aliases...)
		if !slices.Equal(m.names, want) {
			t.Errorf("maker listed as %q builds %q answering to %q", m.names, cmd.Name(), want)
		}
		for _, n := range m.names {
			if seen[n] {
				t.Errorf("two commands answer to %q", n)
			}
			seen[n] = true
		}
	}
	for _, args := range [][]string{{"exec", "n1"}, {"ls"}, {"rm", "x"}} {
		root := a.rootCommand(args...)
		if got := len(root.Commands()); got != 1 {
			t.Errorf("%q built %d commands, want only the one named", args, got)
		}
		if c, _, err := root.Find(args); err != nil || c == root {
			t.Errorf("%q: cobra finds %v, %v", args, c, err)
		}
	}
	for _, args := range [][]string{nil, {"help", "exec"}, {"--api", "u", "list"}, {"exce"}, {"__complete", "ex"}} {
		if got, all := len(a.rootCommand(args...).Commands()), len(a.commandMakers()); got != all {
			t.Errorf("%q built %d commands, want all %d", args, got, all)
		}
	}
}
