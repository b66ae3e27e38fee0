package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// clearEnv unsets every key's environment variable for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range keys {
		t.Setenv(k.Env, "") // registers the restore
		os.Unsetenv(k.Env)  // "" counts as unset too; this keeps Apply's checks exact
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKeysSortedAndDefaultsValid(t *testing.T) {
	if !slices.IsSortedFunc(keys, func(a, b Key) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("keys are not sorted by name: %v", Names())
	}
	envs := map[string]bool{}
	for _, k := range Keys() {
		if _, err := k.parse(k.Default); err != nil && k.Default != "" {
			t.Errorf("%s: default %q does not parse: %v", k.Name, k.Default, err)
		}
		if envs[k.Env] || !strings.HasPrefix(k.Env, "NSYS_CORTEX_") {
			t.Errorf("%s: environment variable %q is a duplicate or lacks the NSYS_CORTEX_ prefix", k.Name, k.Env)
		}
		envs[k.Env] = true
		if k.Description == "" {
			t.Errorf("%s has no description", k.Name)
		}
	}
	if len(keys) != 46 { // a key added or removed is a decision: update docs/config.md (go test -update)
		t.Errorf("%d keys, want 46", len(keys))
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("api.lisen")
	var uk *UnknownKeyError
	if !errors.As(err, &uk) || !strings.Contains(err.Error(), `unknown key "api.lisen"; known keys: allow_insecure_dev, api.domain, api.images, api.key_neurons, api.key_rate, api.listen, api.max_upload`) {
		t.Fatalf("err = %v", err)
	}
	if k, err := Lookup("api.listen"); err != nil || k.Env != "NSYS_CORTEX_API_LISTEN" {
		t.Fatalf("%+v %v", k, err)
	}
}

func TestPrecedence(t *testing.T) {
	path := writeConfig(t, `{"api.listen": "10.0.0.1:1", "log.max_files": 3}`)
	for _, tc := range []struct {
		name       string
		key        string
		flag, env  string
		wantValue  string
		wantSource Source
	}{
		{"flag beats env and file", "api.listen", "10.0.0.3:3", "10.0.0.2:2", "10.0.0.3:3", SourceFlag},
		{"env beats file", "api.listen", "", "10.0.0.2:2", "10.0.0.2:2", SourceEnv},
		{"file beats default", "api.listen", "", "", "10.0.0.1:1", SourceFile},
		{"empty env is unset", "log.max_files", "", "", "3", SourceFile},
		{"default", "docker.image", "", "", "nsys-cortex-neuron:latest", SourceDefault},
		{"flag beats default", "log.console", "1", "", "true", SourceFlag},
		{"env bool is normalised", "allow_insecure_dev", "", "1", "true", SourceEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.env != "" {
				t.Setenv(mustLookup(tc.key).Env, tc.env)
			}
			if tc.flag != "" {
				if err := c.SetFlag(tc.key, tc.flag); err != nil {
					t.Fatal(err)
				}
			}
			v, src, err := c.Get(tc.key)
			if err != nil || v != tc.wantValue || src != tc.wantSource {
				t.Fatalf("Get(%s) = %q, %s, %v; want %q, %s", tc.key, v, src, err, tc.wantValue, tc.wantSource)
			}
		})
	}
}

func TestTypedGetters(t *testing.T) {
	clearEnv(t)
	c, err := Load(writeConfig(t, `{"api.max_upload": "1.5g", "log.max_age": "36h", "log.console": true, "log.max_files": 0, "docker.transport": "tcp"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Bytes("api.max_upload"); got != 3<<29 {
		t.Errorf("api.max_upload = %d", got)
	}
	if got := c.Bytes("log.max_size"); got != 50<<20 {
		t.Errorf("log.max_size = %d", got)
	}
	if got := c.Duration("log.max_age"); got != 36*time.Hour {
		t.Errorf("log.max_age = %v", got)
	}
	if got := c.Duration("api.shutdown_grace"); got != 10*time.Second {
		t.Errorf("api.shutdown_grace = %v", got)
	}
	if !c.Bool("log.console") || c.Bool("allow_insecure_dev") {
		t.Error("booleans wrong")
	}
	if c.Int("log.max_files") != 0 || c.String("docker.transport") != "tcp" || c.String("mode") != "auto" {
		t.Error("int or string wrong")
	}
	// A bad environment value is passed over by the getters...
	t.Setenv("NSYS_CORTEX_LOG_MAX_FILES", "many")
	if c.Int("log.max_files") != 0 {
		t.Error("a bad environment value was not passed over")
	}
	// ...and programming errors panic.
	for name, f := range map[string]func(){
		"unknown key": func() { c.String("nope") },
		"wrong type":  func() { c.Bool("api.listen") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestValidateNamesEnvVar(t *testing.T) {
	clearEnv(t)
	c, err := Load(filepath.Join(t.TempDir(), "missing.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("clean environment: %v", err)
	}
	t.Setenv("NSYS_CORTEX_API_MAX_UPLOAD", "lots")
	t.Setenv("NSYS_CORTEX_LOG_LEVEL", "info,api=loud")
	t.Setenv("NSYS_CORTEX_DOCKER_TRANSPORT", "ssh")
	err = c.Validate()
	for _, want := range []string{
		`NSYS_CORTEX_API_MAX_UPLOAD (api.max_upload): "lots" is not a size`,
		`NSYS_CORTEX_LOG_LEVEL (log.level): level "loud"`,
		`NSYS_CORTEX_DOCKER_TRANSPORT (docker.transport): "ssh" is not one of auto, unix, tcp`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to contain %q", err, want)
		}
	}
	if _, _, err := c.Get("api.max_upload"); err == nil || !strings.Contains(err.Error(), "NSYS_CORTEX_API_MAX_UPLOAD") {
		t.Errorf("Get = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", `{"api.lisen": "x"}`, []string{`:1: unknown key "api.lisen"; known keys: allow_insecure_dev, api.domain, api.images, api.key_neurons, api.key_rate, api.listen,`}},
		{"string for bool", `{"log.console": "yes"}`, []string{`log.console: want true or false (a JSON boolean), got "yes"`}},
		{"string for int", "{\n\"log.max_files\": \"3\"\n}", []string{`:2: log.max_files: want a whole number, 0 or more (a JSON number), got "3"`}},
		{"fraction for int", `{"log.max_files": 1.5}`, []string{`log.max_files: want a whole number`}},
		{"negative int", `{"log.max_files": -1}`, []string{`log.max_files: want a whole number`}},
		{"bad size", `{"api.max_upload": "big"}`, []string{`api.max_upload: want a size like`}},
		{"number for duration", `{"log.max_age": 7}`, []string{`log.max_age: want a duration like 500ms, 10s or 168h (a JSON string), got 7`}},
		{"enum", `{"docker.transport": "ssh"}`, []string{`docker.transport: want one of auto, unix, tcp`}},
		{"level spec", `{"log.level": "info,api=chatty"}`, []string{`level "chatty" in level spec "info,api=chatty" is not one of debug, info, warn, error`}},
		{"empty mode", `{"mode": ""}`, []string{`mode: must not be empty`}},
		{"null", `{"mode": null}`, []string{`mode: null is not a value`}},
		{"two errors", `{"a": 1, "log.console": 2}`, []string{`unknown key "a"`, `log.console: want true or false`}},
		{"malformed", "{\n  \"mode\": \"auto\",\n  \"api.listen\" \"x\"\n}", []string{`:3:16: malformed JSON: `}},
		{"truncated", `{"mode": "auto"`, []string{`malformed JSON: unexpected end of file`}},
		{"trailing", `{"mode": "auto"} {}`, []string{`malformed JSON: more after the closing brace`}},
		{"not an object", `["mode"]`, []string{`want a JSON object of settings`}},
		{"duplicate", "{\"mode\": \"auto\",\n\"mode\": \"nsbox\"}", []string{`:2: "mode" is given twice (first on line 1)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.body)
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if !strings.HasPrefix(err.Error(), path+":") {
				t.Errorf("error does not start with the file name: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadMissingAndBlank(t *testing.T) {
	clearEnv(t)
	for _, path := range []string{filepath.Join(t.TempDir(), "none.json"), writeConfig(t, " \n")} {
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, src, _ := c.Get("api.listen"); v != "127.0.0.1:3100" || src != SourceDefault {
			t.Errorf("%s: %q %s", path, v, src)
		}
	}
}

func TestSetUnset(t *testing.T) {
	clearEnv(t)
	dir := filepath.Join(t.TempDir(), "home") // Set makes the directory
	path := filepath.Join(dir, "config.json")
	for _, kv := range [][2]string{
		{"api.listen", "0.0.0.0:3100"}, {"log.console", "1"}, {"log.max_files", "4"},
		{"api.max_upload", "2g"}, {"api.token", "s3cret"}, {"api.listen", "0.0.0.0:3200"},
	} {
		if err := Set(path, kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s): %v", kv[0], err)
		}
	}
	want := "{\n" +
		"  \"api.listen\": \"0.0.0.0:3200\",\n" +
		"  \"api.max_upload\": \"2g\",\n" +
		"  \"api.token\": \"s3cret\",\n" +
		"  \"log.console\": true,\n" +
		"  \"log.max_files\": 4\n" +
		"}\n"
	if b, _ := os.ReadFile(path); string(b) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", b, want)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v %v", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}

	// Bad input leaves the file alone.
	for _, kv := range [][2]string{{"api.lisen", "x"}, {"log.console", "maybe"}, {"log.level", "info,,api=debug"}} {
		if err := Set(path, kv[0], kv[1]); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("Set(%s, %q) = %v", kv[0], kv[1], err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != want {
		t.Fatalf("a failed Set changed the file:\n%s", b)
	}

	if removed, err := Unset(path, "api.listen"); !removed || err != nil {
		t.Fatalf("Unset = %v %v", removed, err)
	}
	if removed, err := Unset(path, "api.listen"); removed || err != nil {
		t.Fatalf("second Unset = %v %v", removed, err)
	}
	if _, err := Unset(path, "api.lisen"); err == nil {
		t.Fatal("Unset of an unknown key not in the file succeeded")
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, src, _ := c.Get("api.listen"); src != SourceDefault || v != "127.0.0.1:3100" {
		t.Errorf("api.listen = %q from %s", v, src)
	}
	if c.Int("log.max_files") != 4 || !c.Bool("log.console") || c.Bytes("api.max_upload") != 2<<30 {
		t.Error("other keys were not kept")
	}
}

func TestUnsetMendsUnknownKey(t *testing.T) {
	path := writeConfig(t, `{"old.key": 1, "mode": "nsbox"}`)
	if _, err := Load(path); err == nil {
		t.Fatal("Load accepted an unknown key")
	}
	if removed, err := Unset(path, "old.key"); !removed || err != nil {
		t.Fatalf("Unset = %v %v", removed, err)
	}
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
}

func TestSecrets(t *testing.T) {
	clearEnv(t)
	path := writeConfig(t, `{"api.token": "s3cret", "api.listen": "0.0.0.0:1", "log.console": true, "allow_insecure_dev": false}`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if v, ok := os.LookupEnv("NSYS_CORTEX_API_TOKEN"); ok {
		t.Errorf("Apply put the token in the environment: %q", v)
	}
	if c.String("api.token") != "s3cret" {
		t.Error("the token is not readable from the Config")
	}
	if v, _, _ := c.Display("api.token"); v != "<set>" {
		t.Errorf("Display(api.token) = %q", v)
	}
	if v, _, _ := c.Display("api.listen"); v != "0.0.0.0:1" {
		t.Errorf("Display(api.listen) = %q", v)
	}
	c2, _ := Load(filepath.Join(t.TempDir(), "none"))
	if v, _, _ := c2.Display("api.token"); v != "" {
		t.Errorf("Display of an unset secret = %q", v)
	}
}

func TestApply(t *testing.T) {
	clearEnv(t)
	c, err := Load(writeConfig(t, `{"api.listen": "0.0.0.0:1", "allow_insecure_dev": true, "log.console": false, "docker.image": "mine:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NSYS_CORTEX_DOCKER_IMAGE", "env:2")      // env beats the file: left alone
	t.Setenv("NSYS_CORTEX_LOG_CONSOLE", "true")        // rewritten in the readers' form
	if err := c.SetFlag("mode", "nsbox"); err != nil { // flags reach the environment too
		t.Fatal(err)
	}
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		"NSYS_CORTEX_API_LISTEN":         "0.0.0.0:1",
		"NSYS_CORTEX_ALLOW_INSECURE_DEV": "1",
		"NSYS_CORTEX_DOCKER_IMAGE":       "env:2",
		"NSYS_CORTEX_LOG_CONSOLE":        "1",
		"NSYS_CORTEX_MODE":               "nsbox",
	} {
		if got := os.Getenv(env); got != want {
			t.Errorf("%s = %q, want %q", env, got, want)
		}
	}
	for _, env := range []string{"NSYS_CORTEX_LOG_LEVEL", "NSYS_CORTEX_API_URL"} {
		if v, ok := os.LookupEnv(env); ok {
			t.Errorf("a default reached the environment: %s=%q", env, v)
		}
	}
	// A false boolean from the file leaves its variable unset.
	os.Unsetenv("NSYS_CORTEX_ALLOW_INSECURE_DEV")
	c, _ = Load(writeConfig(t, `{"allow_insecure_dev": false}`))
	if err := c.Apply(); err != nil {
		t.Fatal(err)
	}
	if v, ok := os.LookupEnv("NSYS_CORTEX_ALLOW_INSECURE_DEV"); ok {
		t.Errorf("NSYS_CORTEX_ALLOW_INSECURE_DEV=%q after a false from the file", v)
	}
}

func TestSetFlagErrors(t *testing.T) {
	var c Config
	if err := c.SetFlag("api.lisen", "x"); err == nil || !strings.Contains(err.Error(), "known keys") {
		t.Errorf("unknown: %v", err)
	}
	if err := c.SetFlag("api.shutdown_grace", "soon"); err == nil || !strings.Contains(err.Error(), `api.shutdown_grace: "soon" is not a duration`) {
		t.Errorf("bad duration: %v", err)
	}
	if err := c.SetFlag("api.shutdown_grace", "-1s"); err == nil {
		t.Error("negative duration accepted")
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512k": 512 << 10, "100m": 100 << 20, "1g": 1 << 30, "1.5G": 3 << 29,
		"2GiB": 2 << 30, "1kb": 1024, "3T": 3 << 40, " 7 ": 7,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1x", "k", "1e3", "inf", "NaN", "1ib", "0x10", "1m1", "99999999999t"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// A size key whose description says "0: none" (disk) takes 0, from the
// environment and from the file, and reads back as 0 bytes; every other
// size key still refuses it.
func TestZeroSizeIsNone(t *testing.T) {
	for _, zero := range []string{"0", "0g", "0.0m"} {
		t.Setenv("NSYS_CORTEX_DISK", zero)
		c, err := Load(filepath.Join(t.TempDir(), "missing.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("disk=%s: %v", zero, err)
		}
		if n := c.Bytes("disk"); n != 0 {
			t.Fatalf("disk=%s reads as %d bytes", zero, n)
		}
	}
	t.Setenv("NSYS_CORTEX_DISK", "")
	c, err := Load(writeConfig(t, `{"disk": 0}`))
	if err != nil || c.Bytes("disk") != 0 {
		t.Fatalf("disk 0 in the file: %v", err)
	}
	for _, bad := range []string{"-0", "0x0", "00e1"} {
		t.Setenv("NSYS_CORTEX_DISK", bad)
		if err := c.Validate(); err == nil {
			t.Errorf("disk=%s is accepted", bad)
		}
	}
	t.Setenv("NSYS_CORTEX_DISK", "")
	if _, err := Load(writeConfig(t, `{"api.max_upload": 0}`)); err == nil || !strings.Contains(err.Error(), "api.max_upload") {
		t.Fatalf("api.max_upload 0: %v", err)
	}
}
