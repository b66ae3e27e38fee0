package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func runToken(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCommand(t, (*App).tokenCommand, "", args...)
}

// token create prints the token once; list shows the key, never the
// token nor its hash; rm removes it; bad flags name what is wrong.
func TestTokenCommand(t *testing.T) {
	configEnv(t)
	out, _, err := runToken(t, "create", "team-a", "--scope", "exec,files", "--selector", "team=a", "--max-neurons", "3")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	if !strings.HasPrefix(tok, "cxk_") {
		t.Fatalf("create printed %q", out)
	}
	out, _, err = runToken(t, "list")
	if err != nil || !strings.Contains(out, "team-a") || !strings.Contains(out, "exec,files") || !strings.Contains(out, "team=a") || !strings.Contains(out, "never") {
		t.Fatalf("list: %q, %v", out, err)
	}
	js, _, err := runToken(t, "list", "-o", "json")
	if err != nil || strings.Contains(js, tok[4:]) || strings.Contains(js, "sha256") {
		t.Fatalf("list -o json shows a secret or its hash: %s, %v", js, err)
	}
	var keys []map[string]any
	if err := json.Unmarshal([]byte(js), &keys); err != nil || len(keys) != 1 || keys[0]["maxNeurons"] != float64(3) {
		t.Fatalf("list -o json: %s, %v", js, err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"create", "x", "--scope", "root"}, `unknown scope "root"`},
		{[]string{"create", "x", "--selector", "team!=a"}, "KEY=VALUE"},
		{[]string{"create", "team-a"}, "exists"},
		{[]string{"rm", "nobody"}, "no key"},
	} {
		if _, _, err := runToken(t, c.args...); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v; want it to say %q", c.args, err, c.says)
		}
	}
	if out, _, err := runToken(t, "rm", "team-a"); err != nil || out != "team-a\n" {
		t.Fatalf("rm: %q, %v", out, err)
	}
	if out, _, _ := runToken(t, "list"); strings.Contains(out, "team-a") {
		t.Fatalf("list after rm: %q", out)
	}
}
