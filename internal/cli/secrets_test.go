package cli

import (
	"strings"
	"testing"
)

// TestSecretFlags: --secret takes its value from the environment, never
// the command line; each needs a --secret-host, and a --secret-host needs
// its --secret; what is wrong is named.
func TestSecretFlags(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-value")
	t.Setenv("EMPTY_KEY", "")
	got, err := secretFlags([]string{"OPENAI_API_KEY"}, []string{"OPENAI_API_KEY=api.openai.com", "OPENAI_API_KEY=eu.api.openai.com:8443"})
	if err != nil || len(got) != 1 || got[0].Value != "sk-value" || strings.Join(got[0].Hosts, " ") != "api.openai.com eu.api.openai.com:8443" {
		t.Fatalf("secretFlags: %+v, %v", got, err)
	}
	for _, c := range []struct {
		names, hosts []string
		says         string
	}{
		{[]string{"NOT_SET_ANYWHERE_42"}, []string{"NOT_SET_ANYWHERE_42=h"}, "is not set in this environment"},
		{[]string{"EMPTY_KEY"}, []string{"EMPTY_KEY=h"}, "is not set in this environment"},
		{[]string{"OPENAI_API_KEY"}, nil, "no --secret-host OPENAI_API_KEY=HOST"},
		{[]string{"OPENAI_API_KEY"}, []string{"OTHER=h"}, "no --secret OTHER"},
		{[]string{"OPENAI_API_KEY"}, []string{"api.openai.com"}, "want NAME=HOST"},
		{[]string{"OPENAI_API_KEY", "OPENAI_API_KEY"}, []string{"OPENAI_API_KEY=h"}, "given twice"},
	} {
		if _, err := secretFlags(c.names, c.hosts); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v %v: %v; want it to say %q", c.names, c.hosts, err, c.says)
		}
	}
	// The value never shows in what the command says about a bad flag.
	configEnv(t)
	t.Setenv("OPENAI_API_KEY", "sk-value")
	_, stderr, err := runCommand(t, (*App).createCommand, "", "--secret", "OPENAI_API_KEY", "--network", "none", "--secret-host", "OPENAI_API_KEY=api.openai.com", "n1")
	if err == nil || !strings.Contains(err.Error(), "secrets go with network egress, not none") || strings.Contains(err.Error()+stderr, "sk-value") {
		t.Errorf("--secret with --network none: %v %q", err, stderr)
	}
}

// TestKeeperEnv: the keeper, which outlives the command that starts it,
// gets nsys-cortex's settings and none of the operator's keys.
func TestKeeperEnv(t *testing.T) {
	got := strings.Join(keeperEnv([]string{"PATH=/bin", "NSYS_CORTEX_HOME=/h", "OPENAI_API_KEY=sk-x", "AWS_SECRET_ACCESS_KEY=y",
		"DOCKER_HOST=unix:///d", "LC_ALL=C", "GITHUB_TOKEN=z"}), " ")
	if got != "PATH=/bin NSYS_CORTEX_HOME=/h DOCKER_HOST=unix:///d LC_ALL=C" {
		t.Errorf("keeperEnv: %q", got)
	}
}
