package nsbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// hostAddress is an address of this host's other than loopback, if it has one.
func hostAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func requireCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
			t.Fatal("the egress tests use curl inside the neuron (from the host's /usr): install curl")
		}
		t.Skip("the egress tests use curl inside the neuron (from the host's /usr); it is not installed")
	}
}

// Network egress: what the allow-list names is reachable through the
// proxy, nothing else is, and there is no way around the proxy.
func TestEgress(t *testing.T) {
	requireCurl(t)
	allowed := sandboxtest.ServeText(t, "127.0.0.1:0", "hello from an allowed server")
	other := sandboxtest.ServeText(t, "127.0.0.1:0", "hello from another server")
	n := newNeuron(t, "egress", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress,
		Allow: []string{fmt.Sprintf("127.0.0.1:%d", allowed), fmt.Sprintf("localhost:%d", allowed), fmt.Sprintf("localhost:%d", other)}}})
	check := func(what, script string, wantExit int, want string) {
		t.Helper()
		res := n.sh(script)
		out := string(res.Stdout) + string(res.Stderr)
		if (wantExit == 0) != (res.ExitCode == 0) || !strings.Contains(out, want) {
			t.Errorf("%s: `%s` exit %d, output %q; want exit %d and %q", what, script, res.ExitCode, out, wantExit, want)
		}
	}
	// no_proxy keeps the neuron's own loopback off the proxy; here the
	// host's loopback is the far side.
	curl := "env -u no_proxy -u NO_PROXY curl -sS --max-time 10 "
	code := curl + "-o /dev/null -w '%{http_code}' "
	check("an allowed address", curl+fmt.Sprintf("http://127.0.0.1:%d/", allowed), 0, "hello from an allowed server")
	check("an allowed address through CONNECT", curl+fmt.Sprintf("--proxytunnel http://127.0.0.1:%d/", allowed), 0, "hello from an allowed server")
	check("another port", code+fmt.Sprintf("http://127.0.0.1:%d/", other), 0, "403")
	check("another port through CONNECT", curl+fmt.Sprintf("--proxytunnel http://127.0.0.1:%d/", other), 1, "403")
	check("an allowed name on an allowed address", curl+fmt.Sprintf("http://localhost:%d/", allowed), 0, "hello from an allowed server")
	check("an allowed name that resolves to loopback", curl+fmt.Sprintf("http://localhost:%d/", other), 0,
		"localhost resolves to 127.0.0.1")
	check("a name not listed", code+"http://example.com/", 0, "403")
	// Three connections went through (the denied ones count for nothing).
	sandboxtest.WantEgressCounted(t, n.m, "egress", 3)
	// Around the proxy: the neuron's loopback is its own, and nothing
	// else is routed.
	check("--noproxy to the host's loopback", curl+fmt.Sprintf("--noproxy '*' http://127.0.0.1:%d/", allowed), 1, "")
	check("the neuron's interfaces", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", 0, "lo")
	if res := n.sh("cat /proc/net/dev | tail -n +3 | wc -l"); strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Errorf("the neuron has more than a loopback: %q", n.sh("cat /proc/net/dev").Stdout)
	}
	if ip := hostAddress(); ip != "" {
		port := sandboxtest.ServeText(t, "0.0.0.0:0", "hello from the host's network")
		check("--noproxy to the host's address", curl+fmt.Sprintf("--noproxy '*' http://%s:%d/", ip, port), 1, "")
		check("a raw connection to the host's address", fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/%s/%d' 2>&1", ip, port), 1, "unreachable")
		check("the host's address through the proxy", code+fmt.Sprintf("http://%s:%d/", ip, port), 0, "403")
	}
	check("DNS from inside", "getent hosts example.com", 1, "")
	// Every decision is in the neuron's log on the host.
	log, _ := os.ReadFile(filepath.Join(n.env.Layout.LogsDir(), "neurons", "egress.log"))
	if !strings.Contains(string(log), fmt.Sprintf("egress deny GET 127.0.0.1:%d: 127.0.0.1 port %d is not on this neuron's allow-list", other, other)) ||
		!strings.Contains(string(log), fmt.Sprintf("egress allow GET 127.0.0.1:%d -> 127.0.0.1:%d", allowed, allowed)) {
		t.Errorf("the neuron's log lacks the proxy's decisions:\n%s", log)
	}
	// An agent killed from inside comes back in the neuron's network
	// namespace, not PID 1's.
	if _, err := n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "kill -9 -1"}, Timeout: time.Minute}); !errdefs.IsNotRunning(err) {
		t.Fatalf("kill -9 -1: %v", err)
	}
	var err error
	if !waittest.Until(30*time.Second, func() bool {
		_, err = n.c.Exec(n.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "true"}})
		return err == nil
	}) {
		t.Fatalf("the agent did not come back: %v", err)
	}
	check("--noproxy after the agent came back", curl+fmt.Sprintf("--noproxy '*' http://127.0.0.1:%d/", allowed), 1, "")
	check("the proxy after the agent came back", curl+fmt.Sprintf("http://127.0.0.1:%d/", allowed), 0, "hello from an allowed server")
}

// An allow-list that is wrong, or that goes with another network mode,
// fails create with an error naming the entry.
func TestEgressRefusals(t *testing.T) {
	requireNsbox(t)
	lay, err := layout.New(sandboxtest.ShortTempDir(t), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := nsbox.New(e)
	defer m.Close()
	for _, tc := range []struct {
		net  sandbox.Network
		want string
	}{
		{sandbox.Network{Mode: sandbox.NetworkEgress}, "needs an allow-list"},
		{sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"ok.example", "https://bad.example"}}, `"https://bad.example": write a host name`},
		{sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"*"}}, "network full"},
		{sandbox.Network{Mode: sandbox.NetworkNone, Allow: []string{"ok.example"}}, "goes with network egress"},
	} {
		_, err := m.Create(context.Background(), "refused", sandbox.CreateOptions{Network: tc.net})
		var inv *sandbox.InvalidError
		if !asErr(err, &inv) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an InvalidError saying %q", tc.net, err, tc.want)
		}
	}
	if l, _ := m.List(context.Background()); len(l) != 0 {
		t.Errorf("refused creates left neurons: %+v", *l[0])
	}
}
