package qemu_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// egressCheck runs script in the guest and wants its exit status to be
// zero or not (wantOK) and its output to hold want.
func egressCheck(t *testing.T, f *vmFixture, c *link.Client, what, script string, wantOK bool, want string) {
	t.Helper()
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Shell: script}})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if (res.ExitCode == 0) != wantOK || !strings.Contains(out, want) {
		t.Errorf("%s: `%s` exit %d, output %q; want success %v and %q", what, script, res.ExitCode, out, wantOK, want)
	}
}

// Network egress in a VM: the guest has no network device, its proxy
// connections cross the egress port to the host's enforcing proxy, which
// lets through what the allow-list names and nothing else; the decisions
// are in the neuron's log. After a snapshot restore (a new QEMU, a new
// tunnel process) it still works.
func TestEgress(t *testing.T) {
	f := newVM(t)
	allowed := sandboxtest.ServeText(t, "127.0.0.1:0", "hello from an allowed server")
	other := sandboxtest.ServeText(t, "127.0.0.1:0", "hello from another server")
	st, c := f.create("egress", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkEgress,
		Allow: []string{fmt.Sprintf("127.0.0.1:%d", allowed)}}})
	if st.Policy == nil || st.Policy.Network.Mode != sandbox.NetworkEgress || len(st.Policy.Network.Allow) != 1 {
		t.Fatalf("the neuron's policy: %+v", st.Policy)
	}
	// The image's busybox wget ignores no_proxy (which keeps the guest's
	// own loopback off the proxy): here the host's loopback is the far side.
	wget := "wget -q -O - "
	egressCheck(t, f, c, "an allowed address", wget+fmt.Sprintf("http://127.0.0.1:%d/", allowed), true, "hello from an allowed server")
	egressCheck(t, f, c, "another port", wget+fmt.Sprintf("http://127.0.0.1:%d/ 2>&1", other), false, "403")
	egressCheck(t, f, c, "a name not listed", wget+"http://example.com/ 2>&1", false, "403")
	sandboxtest.WantEgressCounted(t, f.m, "egress", 1)
	egressCheck(t, f, c, "the guest's interfaces", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", true, "lo")
	if out := f.sh(c, "tail -n +3 /proc/net/dev | wc -l"); out != "1" {
		t.Errorf("the guest has more than a loopback: %s", f.sh(c, "cat /proc/net/dev"))
	}
	egressCheck(t, f, c, "around the proxy", fmt.Sprintf("wget -q -O - -Y off http://127.0.0.1:%d/ 2>&1", allowed), false, "")

	if _, err := f.m.Snapshot(f.ctx, "egress", "net"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Restore(f.ctx, "egress", "net"); err != nil {
		t.Fatal(err)
	}
	c2, err := f.m.Connect(f.ctx, "egress")
	if err != nil {
		t.Fatal(err)
	}
	egressCheck(t, f, c2, "an allowed address after a restore", wget+fmt.Sprintf("http://127.0.0.1:%d/", allowed), true, "hello from an allowed server")
	egressCheck(t, f, c2, "another port after a restore", wget+fmt.Sprintf("http://127.0.0.1:%d/ 2>&1", other), false, "403")

	log, _ := os.ReadFile(filepath.Join(f.lay.LogsDir(), "neurons", "egress.log"))
	if !strings.Contains(string(log), fmt.Sprintf("egress deny GET 127.0.0.1:%d", other)) ||
		!strings.Contains(string(log), fmt.Sprintf("egress allow GET 127.0.0.1:%d -> 127.0.0.1:%d", allowed, allowed)) {
		t.Errorf("the neuron's log lacks the proxy's decisions:\n%s", log)
	}
	// The tunnel's host process ends with its QEMU.
	rule := fmt.Sprintf("127.0.0.1:%d", allowed)
	if len(sandboxtest.TunnelProcesses(rule)) == 0 {
		t.Error("no egress-tunnel process for the running neuron")
	}
	if err := f.m.Destroy(f.ctx, "egress", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if !waittest.Until(30*time.Second, func() bool { return len(sandboxtest.TunnelProcesses(rule)) == 0 }) {
		t.Fatalf("egress-tunnel processes left after destroy: %v", sandboxtest.TunnelProcesses(rule))
	}
	// Restored while stopped, the neuron takes the host's policy (no
	// network), not the snapshot's: the machine keeps its egress port, with
	// nothing behind it, and it loads (the re-test saw QEMU refuse the
	// state and the neuron left stopped).
	st3, err := f.m.Restore(f.ctx, "egress", "net")
	if err != nil {
		t.Fatalf("restore into a neuron with no egress: %v", err)
	}
	if st3.Policy == nil || st3.Policy.Network.Mode == sandbox.NetworkEgress {
		t.Fatalf("the restored neuron's policy: %+v, want the host's default, no egress", st3.Policy)
	}
	c3, err := f.m.Connect(f.ctx, "egress")
	if err != nil {
		t.Fatal(err)
	}
	egressCheck(t, f, c3, "the allowed address with no egress", "timeout 5 "+wget+fmt.Sprintf("http://127.0.0.1:%d/ 2>&1", allowed), false, "")
	if ps := sandboxtest.TunnelProcesses(rule); len(ps) > 0 {
		t.Errorf("a neuron with no egress has an egress tunnel: %v", ps)
	}
}

// What qemu mode cannot enforce, or what is wrong, fails before a boot.
func TestNetworkRefusals(t *testing.T) {
	f := newVM(t)
	for _, tc := range []struct {
		net  sandbox.Network
		want string
	}{
		{sandbox.Network{Mode: sandbox.NetworkFull}, "never bridges a VM to the host's network"},
		{sandbox.Network{Mode: sandbox.NetworkEgress}, "needs an allow-list"},
		{sandbox.Network{Mode: sandbox.NetworkEgress, Allow: []string{"https://bad.example"}}, `"https://bad.example"`},
		{sandbox.Network{Mode: sandbox.NetworkNone, Allow: []string{"ok.example"}}, "goes with network egress"},
	} {
		_, err := f.m.Create(context.Background(), "refused", sandbox.CreateOptions{Network: tc.net, Image: f.img})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("network %+v: %v, want an error with %q", tc.net, err, tc.want)
		}
		var ue *sandbox.UnenforceableError
		if tc.net.Mode == sandbox.NetworkFull && !errors.As(err, &ue) {
			t.Errorf("network full: %T, want UNENFORCEABLE", err)
		}
	}
}
