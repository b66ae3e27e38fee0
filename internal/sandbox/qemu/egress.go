package qemu

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
)

// Network egress of a VM neuron. The guest still has no network device:
// its PID 1 listens on the guest's loopback (vmguest.Proxy, in the
// programs' proxy variables) and carries each connection over a
// virtio-serial port, cortex.egress, to the host. There QEMU's end of the
// port is one end of a socket pair; the other is held by "cortex-agent
// egress-tunnel", which runs the very proxy nsbox runs, as the neuron's
// uid, confined like an agent. So what the guest can reach is decided on
// the host, and nothing joins the guest to the host's network.
//
// The tunnel process lives as long as its QEMU: when QEMU exits, its end
// of the pair closes and the tunnel ends. Should the tunnel die first,
// the guest loses its way out and answers its programs 502: fail closed.

// startTunnel starts the host's end of a neuron's egress tunnel and
// returns QEMU's end of the pair.
func startTunnel(req *lifecycle.StartRequest, id identity, allow []string) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress: a socket pair: %w", err)
	}
	vmEnd, tunnelEnd := os.NewFile(uintptr(fds[0]), "egress-vm"), os.NewFile(uintptr(fds[1]), "egress-tunnel")
	defer tunnelEnd.Close()
	stats, err := lifecycle.EgressStatsFile(req.Layout, req.ID)
	if err != nil {
		vmEnd.Close()
		return nil, err
	}
	defer stats.Close()
	t := vmguest.Tunnel{AgentBin: req.AgentBin, Log: req.Log, Allow: allow, Cred: id.cred, Stream: tunnelEnd, Stats: stats}
	if err := t.Start(); err != nil {
		vmEnd.Close()
		return nil, err
	}
	return vmEnd, nil
}
