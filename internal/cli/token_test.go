package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/apikey"
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

// memKeys is an apikey.Shared in memory (the full program's is a Secret).
type memKeys struct{ data []byte }

func (m *memKeys) Where() string                 { return "memory" }
func (m *memKeys) Load() ([]byte, string, error) { return m.data, strconv.Itoa(len(m.data)), nil }
func (m *memKeys) Change(fn func([]byte) ([]byte, error)) error {
	b, err := fn(m.data)
	if err == nil {
		m.data = b
	}
	return err
}

// kube.api_keys set in the config file (not only in the environment)
// sends token create, list and rm to the shared keys, not the home's.
func TestTokenSharedFromConfigFile(t *testing.T) {
	home := configEnv(t)
	if _, _, err := runConfig(t, "", "set", "kube.api_keys", "nsys-cortex-api-keys"); err != nil {
		t.Fatal(err)
	}
	shared := &memKeys{}
	run := func(args ...string) (string, error) {
		var stdout, stderr strings.Builder
		a := &App{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(""), SharedKeys: func() (apikey.Shared, error) { return shared, nil }}
		cmd := a.tokenCommand()
		cmd.SetArgs(args)
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		return stdout.String(), err
	}
	if _, err := run("create", "ci"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(shared.data), `"ci"`) {
		t.Fatalf("the shared keys after create: %s", shared.data)
	}
	if _, err := os.Stat(filepath.Join(home, "api-keys.json")); !os.IsNotExist(err) {
		t.Errorf("the home's keys file was written: %v", err)
	}
	if out, err := run("list"); err != nil || !strings.Contains(out, "ci") {
		t.Fatalf("list: %q %v", out, err)
	}
	if _, err := run("rm", "ci"); err != nil || strings.Contains(string(shared.data), `"ci"`) {
		t.Fatalf("rm: %v; the shared keys: %s", err, shared.data)
	}
}
