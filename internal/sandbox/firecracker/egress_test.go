package firecracker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Network egress: the guest is told to dial the host's vsock port, and
// the tunnel listens where Firecracker connects such a connection (the
// jail's <uds_path>_<port>), as the jail's uid, enforcing the allow-list;
// it ends with Firecracker. This test stands in for Firecracker and the
// guest: it connects to that socket and runs the guest's end of the tunnel.
func TestEgressTunnel(t *testing.T) {
	f := newFixture(t)
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	f.env.AgentBinary = func() (string, error) { return bin, nil }
	m := f.manager()
	allowed := fmt.Sprintf("127.0.0.1:%d", sandboxtest.ServeText(t, "127.0.0.1:0", "allowed"))
	denied := fmt.Sprintf("127.0.0.1:%d", sandboxtest.ServeText(t, "127.0.0.1:0", "denied"))
	st, err := m.Create(f.ctx, "net", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{allowed}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy.Network.Mode != sandbox.NetworkEgress || !slices.Equal(st.Policy.Network.Allow, []string{allowed}) {
		t.Fatalf("policy %+v", st.Policy.Network)
	}
	// Still no network interface: the API calls are the golden ones.
	if got := callNames(f.calls("net")); !slices.Equal(got, goldenCreate) {
		t.Fatalf("API calls %q, want %q", got, goldenCreate)
	}
	j := f.jail("net")
	raw, err := os.ReadFile(j.host(jailConfig))
	if err != nil {
		t.Fatal(err)
	}
	var gc GuestConfig
	if err := json.Unmarshal([]byte(strings.TrimRight(string(raw), "\x00")), &gc); err != nil {
		t.Fatal(err)
	}
	if gc.Egress != vmguest.Proxy || gc.EgressVsockPort != EgressVsockPort || !slices.Contains(gc.Env, "http_proxy=http://"+vmguest.Proxy) {
		t.Fatalf("guest config: egress %q port %d env %q", gc.Egress, gc.EgressVsockPort, gc.Env)
	}

	sock := tunnelSocket(j)
	var conn net.Conn
	if !waittest.Until(30*time.Second, func() bool { conn, err = net.Dial("unix", sock); return err == nil }) {
		t.Fatalf("the tunnel does not listen on %s: %v", sock, err)
	}
	defer conn.Close()
	var fi syscall.Stat_t
	if err := syscall.Stat(sock, &fi); err != nil || int(fi.Uid) != j.uid || fi.Mode&0o777 != 0o600 {
		t.Errorf("the tunnel's socket: owner %d (jail %d), mode %o: %v", fi.Uid, j.uid, fi.Mode&0o777, err)
	}
	pids := sandboxtest.TunnelProcesses(sock)
	if len(pids) != 1 {
		t.Fatalf("egress-tunnel processes for %s: %v", sock, pids)
	}
	pid := pids[0]
	// It listens as root and gives root up before it accepts (the kernel
	// queues a connection before that): wait for the drop.
	var status []byte
	if !waittest.Until(30*time.Second, func() bool {
		status, _ = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		return strings.Contains(string(status), fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", j.uid, j.uid, j.uid, j.uid))
	}) {
		t.Errorf("the tunnel (pid %d) does not run as the jail's uid %d:\n%s", pid, j.uid, status)
	}

	guest := &egress.GuestTunnel{Logf: t.Logf}
	guest.Attach(conn)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	served := make(chan struct{})
	go func() { defer close(served); guest.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	pu, _ := url.Parse("http://" + ln.Addr().String())
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
	get := func(origin string) (int, string) {
		resp, err := client.Get("http://" + origin + "/")
		if err != nil {
			t.Fatalf("GET %s: %v", origin, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(allowed); code != 200 || body != "allowed\n" {
		t.Errorf("allowed origin: %d %q", code, body)
	}
	if code, body := get(denied); code != 403 {
		t.Errorf("denied origin: %d %q", code, body)
	}
	sandboxtest.WantEgressCounted(t, m, "net", 1)
	log, _ := os.ReadFile(filepath.Join(f.lay.LogsDir(), "neurons", "net.log"))
	if !strings.Contains(string(log), "egress allow GET "+allowed) || !strings.Contains(string(log), "egress deny GET "+denied) {
		t.Errorf("the neuron's log lacks the decisions:\n%s", log)
	}

	if err := m.Destroy(f.ctx, "net", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waittest.Until(30*time.Second, func() bool { return len(sandboxtest.TunnelProcesses(sock)) == 0 }) {
		t.Fatal("the tunnel outlived Firecracker")
	}
}
