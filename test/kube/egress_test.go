package kube_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Network egress in kube mode: a neuron's programs reach what its
// allow-list names through the proxy its host serves over the channel
// (the egress tunnel), and nothing else through it: not another port, not
// the cloud's metadata address. A second host that links to the neuron
// waits; when the first goes (a replica's restart), the second takes the
// tunnel and the neuron's way out comes back, no create again. A create
// asking for full network is refused by name. (That the pod cannot go
// around the proxy is the NetworkPolicies' work, which no kubelet here
// enforces: docs/kube-validation.md.)
func TestEgress(t *testing.T) {
	core, ag, cfg := besideController(t)
	ctx := context.Background()

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream saw "+r.URL.Path)
	}))
	defer up.Close()
	upAddr := strings.TrimPrefix(up.URL, "http://")
	other, err := net.Listen("tcp", "127.0.0.1:0") // listens, and is not on the list
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	m := manager(t, core, ag, cfg)
	m.AgentBinary = buildAgent(t)
	if _, err := m.Create(ctx, "full", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}); !errors.As(err, new(*sandbox.UnenforceableError)) ||
		!strings.Contains(err.Error(), "network egress with an allow-list") {
		t.Fatalf("network full: %v", err)
	}
	st, err := m.Create(ctx, "web", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{upAddr}},
		BootTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = m.Get(ctx, "web"); err != nil || st.Policy == nil || st.Policy.Network.Mode != sandbox.NetworkEgress ||
		!slices.Equal(st.Policy.Network.Allow, []string{upAddr}) {
		t.Fatalf("its policy: %+v %v", st, err)
	}

	// fetch asks the neuron to GET url through the proxy its variables
	// name (--noproxy '': the test's upstream is on a loopback the
	// variables leave out, as they must for a pod's own servers).
	fetch := func(m *kube.Manager, url string) string {
		t.Helper()
		c, err := m.Connect(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"curl", "-sS", "--noproxy", "", "-m", "10",
			"-o", "/dev/stdout", "-w", " %{http_code}", url}}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	}
	waittest.For(t, 20*time.Second, "the host to hold the neuron's tunnel", func() bool {
		return fetch(m, up.URL+"/allowed") == "upstream saw /allowed 200"
	})
	if got := fetch(m, "http://"+other.Addr().String()+"/"); !strings.HasSuffix(got, " 403") {
		t.Errorf("a port not on the list: %q", got)
	}
	if got := fetch(m, "http://169.254.169.254/latest/meta-data/"); !strings.HasSuffix(got, " 403") {
		t.Errorf("the metadata address: %q", got)
	}
	// The proxy's variables are the neuron's, and name its own loopback.
	c, err := m.Connect(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: `echo "$https_proxy"`}})
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(res.Stdout)), ":3128") {
		t.Errorf("https_proxy in the neuron: %q %v", res.Stdout, err)
	}

	// Another host links to it: the tunnel stays with the first, then
	// moves to the second when the first goes.
	m2 := &kube.Manager{Cluster: &kube.Cluster{Core: core, Agents: ag, Config: cfg}, Key: m.Key, AgentBinary: m.AgentBinary} // a replica: the same key
	t.Cleanup(func() { m2.Close() })
	if got := fetch(m2, up.URL+"/second"); got != "upstream saw /second 200" {
		t.Fatalf("through the first host's tunnel, from the second: %q", got)
	}
	m.Close()
	waittest.For(t, 30*time.Second, "the second host to take the tunnel", func() bool {
		return fetch(m2, up.URL+"/after") == "upstream saw /after 200"
	})

	// Stopped and started again: the new pod has the same allow-list.
	if err := m2.Destroy(ctx, "web", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Create(ctx, "web", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{upAddr}},
		BootTimeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 20*time.Second, "the tunnel of the neuron started again", func() bool {
		return fetch(m2, up.URL+"/again") == "upstream saw /again 200"
	})
}
