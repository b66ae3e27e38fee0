package main_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// serve starts nsys-cortex serve on a free loopback port and returns its
// URL; the daemon is stopped (SIGTERM) when the test ends, or by stop.
func (c *cli) serve(t *testing.T, extraEnv ...string) (url string, stop func() (string, int)) {
	t.Helper()
	return c.serveWith(t, nil, extraEnv...)
}

// serveWith is serve with more flags.
func (c *cli) serveWith(t *testing.T, flags []string, extraEnv ...string) (url string, stop func() (string, int)) {
	t.Helper()
	cmd := c.command(append([]string{"serve", "--listen", "127.0.0.1:0"}, flags...)...)
	cmd.Env = append(cmd.Env, extraEnv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	var rest strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
			rest.WriteString(sc.Text() + "\n")
		}
	}()
	re := regexp.MustCompile(`serving the API on (http://\S+)`)
	deadline := time.After(20 * time.Second)
	for url == "" {
		select {
		case l := <-lines:
			if m := re.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
		case <-done:
			t.Fatalf("serve exited: %s", rest.String())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatal("serve did not start")
		}
	}
	stopped := false
	stop = func() (string, int) {
		if stopped {
			return "", 0
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { <-done; exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			return rest.String(), code
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatal("serve did not stop on SIGTERM")
		}
		return "", 0
	}
	t.Cleanup(func() { stop() })
	return url, stop
}

// The CLI through the daemon, the README's curl lines, and the daemon's
// ownership, log and shutdown.
func TestServe(t *testing.T) {
	mode := "process"
	if ms := modes(t); slices.Contains(ms, "nsbox") {
		mode = "nsbox"
	}
	c := newCLI(t, mode)
	url, stop := c.serve(t)
	api := func(args ...string) []string { return append([]string{"--api", url}, args...) }

	if out := c.ok(api("create", "svc")...); strings.TrimSpace(out) != "svc" {
		t.Fatalf("create: %q", out)
	}
	if out, _, code := c.run("in\n", api("exec", "svc", "--", "sh", "-c", "cat; echo err >&2; exit 3")...); code != 3 || out != "in\n" {
		t.Fatalf("exec through the API: %d %q", code, out)
	}
	local := filepath.Join(t.TempDir(), "f.txt")
	os.WriteFile(local, []byte("payload"), 0o644)
	c.ok(api("cp", local, "svc:f.txt")...)
	back := filepath.Join(t.TempDir(), "back.txt")
	c.ok(api("cp", "svc:f.txt", back)...)
	if b, _ := os.ReadFile(back); string(b) != "payload" {
		t.Fatalf("cp round trip: %q", b)
	}
	pid := strings.TrimSpace(c.ok(api("exec", "-d", "svc", "--", "sh", "-c", "echo from-bg")...))
	waittest.For(t, 30*time.Second, "the background process to exit", func() bool {
		var procs []map[string]any
		json.Unmarshal([]byte(c.ok(api("ps", "svc", "--json")...)), &procs)
		return len(procs) == 1 && procs[0]["running"] == false
	})
	if out := c.ok(api("logs", "-f", "svc", pid)...); out != "from-bg\n" {
		t.Fatalf("logs: %q", out)
	}
	if out := c.ok(api("ps", "svc", "-o", "name")...); strings.TrimSpace(out) != pid {
		t.Fatalf("ps: %q", out)
	}
	if out := c.ok(api("list", "-o", "name")...); strings.TrimSpace(out) != "svc" {
		t.Fatalf("list: %q", out)
	}
	if out := c.ok(api("status", "svc", "--format", "{{.Status}}")...); strings.TrimSpace(out) != "running" {
		t.Fatalf("status: %q", out)
	}
	// NSYS_CORTEX_API_URL does what --api does.
	c.env = append(c.env, "NSYS_CORTEX_API_URL="+url)
	if out := c.ok("exec", "svc", "--", "echo", "via-env"); out != "via-env\n" {
		t.Fatalf("%q", out)
	}
	c.env = c.env[:len(c.env)-1]
	// Locally, the neuron is the daemon's: the CLI says where to go.
	if _, errs, code := c.run("", "exec", "svc", "--", "true"); code != 125 || !strings.Contains(errs, "--api") {
		t.Fatalf("a local exec of the daemon's neuron: %d %q", code, errs)
	}

	// The README's curl lines, as written.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var script []string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "API=") || strings.HasPrefix(l, "curl ") {
			script = append(script, l)
		}
	}
	if len(script) < 8 {
		t.Fatalf("the README's curl examples were not found (%d lines)", len(script))
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	// In a directory of the test's own, with the README the lines upload:
	// what they write (an export) never lands in the working tree.
	sh.Dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(sh.Dir, "README.md"), readme, 0o644); err != nil {
		t.Fatal(err)
	}
	sh.Env = append(os.Environ(), "NSYS_CORTEX_API_URL="+url, "NSYS_CORTEX_HOME="+c.home)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the README's curl lines: %v\n%s", err, out)
	} else if !strings.Contains(string(out), `"stdout":"Linux\n"`) || !strings.Contains(string(out), "event: exit") {
		t.Fatalf("the README's curl lines said: %s", out)
	}

	// The daemon's log.
	if out := c.ok("logs"); !strings.Contains(out, `"msg":"serving"`) || !strings.Contains(out, `"msg":"neuron created"`) {
		t.Fatalf("the daemon's log: %q", out)
	}
	// SIGTERM: a clean stop; the neuron keeps running, and is the CLI's again.
	errs, code := stop()
	if code != 0 || !strings.Contains(errs, "stopped") {
		t.Fatalf("serve after SIGTERM: %d %q", code, errs)
	}
	if out := c.ok("status", "svc", "--format", "{{.Status}}"); strings.TrimSpace(out) != "running" {
		t.Fatalf("after the daemon: %q", out)
	}
	if out := c.ok("exec", "svc", "--", "cat", "f.txt"); out != "payload" {
		t.Fatalf("%q", out)
	}
}

// A daemon always requires a token: the one configured, or one it makes
// and keeps in the home (which the CLI of that home reads); a neuron with
// network full, on the host's loopback, cannot drive it.
func TestServeAuth(t *testing.T) {
	mode := "process"
	if ms := modes(t); slices.Contains(ms, "nsbox") {
		mode = "nsbox"
	}
	c := newCLI(t, mode)
	url, stop := c.serve(t)
	token, err := os.ReadFile(filepath.Join(c.home, "api.token"))
	if err != nil || len(strings.TrimSpace(string(token))) != 64 {
		t.Fatalf("the daemon's own token: %q %v", token, err)
	}
	if st, _ := os.Stat(filepath.Join(c.home, "api.token")); st.Mode().Perm() != 0o600 {
		t.Errorf("api.token has mode %v", st.Mode())
	}
	c.ok("--api", url, "create", "other")
	if resp, err := http.Get(url + "/v1/neurons"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a loopback request without the token: %v %v", resp, err)
	}
	if mode == "nsbox" {
		// The review's reproduction: from inside a full-network neuron.
		c.ok("--api", url, "create", "--network", "full", "full")
		out, _, _ := c.run("", "--api", url, "exec", "full", "--", "sh", "-c",
			`curl -s -o /dev/null -w '%{http_code}' --json '{"argv":["id"]}' `+url+`/v1/neurons/other/exec; `+
				`cat ~/../../*/.nsys-cortex/api.token /root/.nsys-cortex/api.token 2>/dev/null | head -c 64`)
		if strings.TrimSpace(out) != "401" {
			t.Errorf("a full-network neuron driving the API: %q, want 401 and no token", out)
		}
	}
	stop()
	url, _ = c.serve(t, "NSYS_CORTEX_API_TOKEN=tok-123")
	if _, errs, code := c.run("", "--api", url, "list"); code != 125 || !strings.Contains(errs, "UNAUTHORIZED") {
		t.Fatalf("without the token: %d %q", code, errs)
	}
	c.env = append(c.env, "NSYS_CORTEX_API_TOKEN=tok-123")
	c.ok("--api", url, "list")
	// The token is never in the daemon's log.
	if out := c.ok("logs"); strings.Contains(out, "tok-123") {
		t.Fatal("the token is in the log")
	}
}

// With log.console the daemon's audit facts come on its stderr too (a
// container's: what its cluster keeps), each the line audit.log holds;
// without it they do not.
func TestServeAuditOnStderr(t *testing.T) {
	c := newCLI(t, "process")
	for _, console := range []bool{true, false} {
		url, stop := c.serve(t, "NSYS_CORTEX_LOG_CONSOLE="+strconv.FormatBool(console))
		id := "audit-" + strconv.FormatBool(console)
		c.ok("--api", url, "create", id)
		c.ok("--api", url, "exec", id, "--", "true")
		c.ok("--api", url, "destroy", "--wipe", id)
		stderr, _ := stop()
		var facts []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "{") && strings.Contains(l, `"neuron":"`+id+`"`) {
				facts = append(facts, l)
			}
		}
		file, err := os.ReadFile(filepath.Join(c.home, "logs", "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		if !console {
			if len(facts) != 0 {
				t.Errorf("without log.console, facts on stderr: %q", facts)
			}
			continue
		}
		if len(facts) < 2 {
			t.Fatalf("the exec's and the destroy's facts on stderr: %q\n%s", facts, stderr)
		}
		for _, f := range facts {
			var fact map[string]any
			if err := json.Unmarshal([]byte(f), &fact); err != nil || fact["event"] != "gate" {
				t.Errorf("a fact on stderr: %q, %v", f, err)
			}
			if !strings.Contains(string(file), f+"\n") {
				t.Errorf("a fact on stderr that audit.log does not hold: %q", f)
			}
		}
	}
}

// serve --pool, as a user runs it: a create through the daemon claims a
// warm neuron and says so; warm neurons are in no list; stopping serve
// removes the unclaimed ones and leaves the claimed neuron running; a
// pool of a mode that cannot keep one is refused at start.
func TestServePool(t *testing.T) {
	if !slices.Contains(modes(t), "nsbox") {
		t.Skip("nsbox cannot run here")
	}
	c := newCLI(t, "nsbox")
	if _, stderr, code := c.run("", "serve", "--listen", "127.0.0.1:0", "--pool", "process=2"); code == 0 || !strings.Contains(stderr, "warm pool") {
		t.Fatalf("serve --pool process=2: %d %s", code, stderr)
	}
	url, stop := c.serve(t, "NSYS_CORTEX_POOL=nsbox=2")
	overlays := filepath.Join(c.home, "overlays")
	warm := func() (dirs []string) {
		entries, _ := os.ReadDir(overlays)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".warm-") && e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		return dirs
	}
	waittest.For(t, time.Minute, "two warm neurons", func() bool { return len(warm()) == 2 })
	api := func(args ...string) []string { return append([]string{"--api", url}, args...) }
	if out := c.ok(api("create", "hot", "-e", "FOO=bar")...); strings.TrimSpace(out) != "hot" {
		t.Fatalf("create: %q", out)
	}
	if out := c.ok(api("exec", "hot", "--", "sh", "-c", `echo "$(hostname) $FOO"`)...); out != "hot bar\n" {
		t.Fatalf("exec: %q", out)
	}
	if out := c.ok(api("list", "-o", "name")...); strings.TrimSpace(out) != "hot" {
		t.Fatalf("list: %q", out)
	}
	log, code := stop()
	if code != 0 {
		t.Fatalf("serve stopped with %d: %s", code, log)
	}
	if left := warm(); len(left) != 0 {
		t.Fatalf("serve left warm neurons: %v", left)
	}
	if out := c.ok("exec", "hot", "--", "hostname"); out != "hot\n" {
		t.Fatalf("the claimed neuron after serve stopped: %q", out)
	}
}
