package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/config"
)

// configEnv gives the test a home of its own and no setting from the
// environment.
func configEnv(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("NSYS_CORTEX_HOME", home)
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
	}
	return home
}

// runConfig runs `config ARGS...` and returns stdout, stderr and the error.
func runConfig(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	return runCommand(t, (*App).configCommand, stdin, args...)
}

// runCommand runs the command cmd of a fresh App with ARGS and stdin, and
// returns stdout, stderr and the error.
func runCommand(t *testing.T, cmdOf func(*App) *cobra.Command, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &App{Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(stdin)}
	cmd := cmdOf(a)
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return stdout.String(), stderr.String(), err
}

func TestConfigCommand(t *testing.T) {
	home := configEnv(t)
	file := filepath.Join(home, "config.json")

	steps := []struct {
		name       string
		stdin      string
		args       []string
		env        map[string]string
		wantOut    string // exact, when not empty
		wantErr    string // substring; "" means success
		wantStderr string // substring
	}{
		{name: "path", args: []string{"path"}, wantOut: file + "\n"},
		{name: "get default", args: []string{"get", "api.listen"}, wantOut: "127.0.0.1:3100\n"},
		{name: "set", args: []string{"set", "api.listen", "0.0.0.0:3100"}},
		{name: "get from file", args: []string{"get", "api.listen"}, wantOut: "0.0.0.0:3100\n"},
		{name: "set bool", args: []string{"set", "log.console", "1"}},
		{name: "get bool", args: []string{"get", "log.console"}, wantOut: "true\n"},
		{name: "set secret from stdin", stdin: "s3cret\n", args: []string{"set", "api.token", "-"}},
		{name: "get secret", args: []string{"get", "api.token"}, wantOut: "<set>\n"},
		{name: "get secret revealed", args: []string{"get", "api.token", "--reveal"}, wantOut: "s3cret\n"},
		{name: "env overrides", args: []string{"get", "api.listen"}, env: map[string]string{"NSYS_CORTEX_API_LISTEN": "127.0.0.1:9"}, wantOut: "127.0.0.1:9\n"},
		{name: "set notes env", args: []string{"set", "api.listen", "0.0.0.0:3200"}, env: map[string]string{"NSYS_CORTEX_API_LISTEN": "127.0.0.1:9"},
			wantStderr: "NSYS_CORTEX_API_LISTEN is set in this environment and overrides the file"},
		{name: "get unknown", args: []string{"get", "api.lisen"}, wantErr: `unknown key "api.lisen"; known keys: allow_insecure_dev, api.domain, api.images, api.key_neurons, api.key_rate, api.listen,`},
		{name: "set unknown", args: []string{"set", "api.lisen", "x"}, wantErr: `unknown key "api.lisen"`},
		{name: "set bad value", args: []string{"set", "api.max_upload", "lots"}, wantErr: `api.max_upload: "lots" is not a size`},
		{name: "set bad enum", args: []string{"set", "docker.transport", "ssh"}, wantErr: "one of auto, unix, tcp"},
		{name: "bad env", args: []string{"get", "log.max_files"}, env: map[string]string{"NSYS_CORTEX_LOG_MAX_FILES": "many"}, wantErr: "NSYS_CORTEX_LOG_MAX_FILES"},
		{name: "unset", args: []string{"unset", "log.console"}},
		{name: "unset again", args: []string{"unset", "log.console"}, wantStderr: "log.console was not set in " + file},
		{name: "get after unset", args: []string{"get", "log.console"}, wantOut: "false\n"},
		{name: "unset unknown", args: []string{"unset", "nope"}, wantErr: `unknown key "nope"`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			for k, v := range s.env {
				t.Setenv(k, v)
			}
			out, errOut, err := runConfig(t, s.stdin, s.args...)
			switch {
			case s.wantErr == "" && err != nil:
				t.Fatalf("config %v: %v", s.args, err)
			case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
				t.Fatalf("config %v: error %v, want %q", s.args, err, s.wantErr)
			}
			if s.wantOut != "" && out != s.wantOut {
				t.Errorf("config %v printed %q, want %q", s.args, out, s.wantOut)
			}
			if !strings.Contains(errOut, s.wantStderr) {
				t.Errorf("config %v: stderr %q, want %q", s.args, errOut, s.wantStderr)
			}
		})
	}

	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode: %v %v", st, err)
	}
	b, _ := os.ReadFile(file)
	want := "{\n  \"api.listen\": \"0.0.0.0:3200\",\n  \"api.token\": \"s3cret\"\n}\n"
	if string(b) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", b, want)
	}
}

func TestConfigList(t *testing.T) {
	home := configEnv(t)
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"api.token": "s3cret", "log.level": "debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NSYS_CORTEX_MODE", "nsbox")

	out, _, err := runConfig(t, "", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(config.Keys())+1 || strings.Join(strings.Fields(lines[0]), " ") != "NAME VALUE SOURCE ENV" {
		t.Fatalf("table:\n%s", out)
	}
	for _, want := range []string{
		"api.token <set> file NSYS_CORTEX_API_TOKEN",
		"log.level debug file NSYS_CORTEX_LOG_LEVEL",
		"mode nsbox env NSYS_CORTEX_MODE",
		"api.listen 127.0.0.1:3100 default NSYS_CORTEX_API_LISTEN",
	} {
		found := false
		for _, l := range lines {
			found = found || strings.Join(strings.Fields(l), " ") == want
		}
		if !found {
			t.Errorf("no row %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Error("list shows the secret")
	}

	out, _, err = runConfig(t, "", "list", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var items []map[string]string
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(items) != len(config.Keys()) {
		t.Fatalf("%d items", len(items))
	}
	for _, it := range items {
		if it["key"] == "api.max_upload" {
			if it["value"] != "1g" || it["source"] != "default" || it["env"] != "NSYS_CORTEX_API_MAX_UPLOAD" ||
				it["default"] != "1g" || it["description"] == "" {
				t.Errorf("api.max_upload: %v", it)
			}
		}
		if it["key"] == "api.token" && it["value"] != "<set>" {
			t.Errorf("api.token: %v", it)
		}
	}

	// A bad environment value is listed, then the command fails naming it.
	t.Setenv("NSYS_CORTEX_API_SHUTDOWN_GRACE", "soon")
	out, _, err = runConfig(t, "", "list")
	if err == nil || !strings.Contains(err.Error(), "NSYS_CORTEX_API_SHUTDOWN_GRACE") || !strings.Contains(out, "soon") {
		t.Fatalf("list with a bad env: %v\n%s", err, out)
	}

	// A broken file fails every reading command, naming the file.
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"mode": `), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runConfig(t, "", "list"); err == nil || !strings.Contains(err.Error(), "config.json:1:") {
		t.Fatalf("list with a broken file: %v", err)
	}
}

// --kube-port-forward with --api says that the daemon's configuration,
// not the flag, decides how it reaches its pods; without the flag, or
// working locally, nothing is said.
func TestKubePortForwardWithAPI(t *testing.T) {
	configEnv(t)
	for _, c := range []struct {
		url  string
		flag bool
		warn bool
	}{{"http://127.0.0.1:1", true, true}, {"http://127.0.0.1:1", false, false}, {"", true, false}} {
		var stderr bytes.Buffer
		a := &App{Stderr: &stderr, apiURL: c.url, kubePortForward: optBool{set: c.flag, val: true}}
		api, err := a.apiClient()
		if err != nil || (api != nil) != (c.url != "") {
			t.Fatalf("%+v: %v, %v", c, api, err)
		}
		said := strings.Contains(stderr.String(), "--kube-port-forward does nothing for the daemon at "+c.url)
		if said != c.warn {
			t.Errorf("%+v: stderr %q", c, stderr.String())
		}
	}
}
