package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// startPortServer copies the port suite's server into neuron id and runs
// it in the background on port.
func (c *cli) startPortServer(id string, port int) {
	c.t.Helper()
	c.ok("cp", sandboxtest.PortServer(c.t), id+":portserver")
	c.ok("exec", id, "--", "chmod", "755", "portserver")
	c.ok("exec", "-d", id, "--", "./portserver", fmt.Sprint(port))
}

// port-forward as a user runs it: a local port carried to the neuron's
// server, then Ctrl-C ends it cleanly; a closed port is said on stderr.
func TestPortForwardCommand(t *testing.T) {
	c := newCLI(t, "process")
	c.ok("create", "web")
	port := sandboxtest.FreePort(t)
	c.startPortServer("web", port)
	closed := sandboxtest.FreePort(t)
	cmd := c.command("port-forward", "web", fmt.Sprintf(":%d", port), fmt.Sprintf(":%d", closed))
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> web:(\d+)$`)
	sc := bufio.NewScanner(stdout)
	local := map[string]string{}
	for len(local) < 2 && sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("port-forward printed %q", sc.Text())
		}
		local[m[2]] = m[1]
	}
	var body string
	for i := range 3 {
		resp, err := http.Get(fmt.Sprintf("http://%s/hello%d", local[fmt.Sprint(port)], i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	if !strings.HasPrefix(body, "hello from the neuron: GET /hello2") {
		t.Fatalf("through port-forward: %q", body)
	}
	if _, err := http.Get("http://" + local[fmt.Sprint(closed)] + "/"); err == nil {
		t.Fatal("a forward to a closed port answered")
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("port-forward after Ctrl-C: %v (%s)", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("port-forward did not end on Ctrl-C")
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("port %d in neuron web: nothing listens", closed)) {
		t.Fatalf("stderr does not say the port is closed: %q", stderr.String())
	}
	c.fails("is no port", "port-forward", "web", "99999")
}

// url, and port-forward through a daemon: a signed URL opens the
// neuron's server without the token; a forward goes through the daemon's
// tunnel.
func TestPortURLThroughTheDaemon(t *testing.T) {
	c := newCLI(t, "process")
	url, _ := c.serve(t)
	api := func(args ...string) []string { return append([]string{"--api", url}, args...) }
	c.ok(api("create", "web")...)
	port := sandboxtest.FreePort(t)
	c.ok(api("cp", sandboxtest.PortServer(t), "web:portserver")...)
	c.ok(api("exec", "web", "--", "chmod", "755", "portserver")...)
	c.ok(api("exec", "-d", "web", "--", "./portserver", fmt.Sprint(port))...)
	signed := strings.TrimSpace(c.ok(api("url", "web", fmt.Sprint(port), "--expires", "10m")...))
	if !strings.HasPrefix(signed, fmt.Sprintf("%s/v1/neurons/web/ports/%d/?cortex_url=", url, port)) {
		t.Fatalf("url printed %q", signed)
	}
	// A browser: it keeps the cookie the signed URL sets, and follows
	// the redirect that takes the token out of its address bar.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	var body string
	waittest.For(t, 30*time.Second, "the signed URL to reach the neuron's server", func() bool {
		resp, err := browser.Get(signed)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return resp.StatusCode == 200
	})
	if !strings.HasPrefix(body, "hello from the neuron: GET /") {
		t.Fatalf("the signed URL: %q", body)
	}
	// port-forward through the daemon: its tunnel.
	cmd := c.command(api("port-forward", "web", fmt.Sprintf(":%d", port))...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatal("port-forward through the daemon printed nothing")
	}
	m := regexp.MustCompile(`^Forwarding from (\S+) ->`).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("port-forward printed %q", sc.Text())
	}
	resp, err := http.Get("http://" + m[1] + "/tunnelled")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), "hello from the neuron: GET /tunnelled") {
		t.Fatalf("port-forward through the daemon: %q", b)
	}
	c.fails("--expires", "url", "web", "80", "--expires", "9999h")
}
