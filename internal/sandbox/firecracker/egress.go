package firecracker

import (
	"fmt"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
)

// Network egress of a firecracker neuron: still no network interface.
// The guest's PID 1 listens on the guest's loopback (vmguest.Proxy, in the
// programs' proxy variables) and carries every connection as a stream of
// a tunnel over a vsock connection it makes to the host's port
// EgressVsockPort. Firecracker hands such a connection to the Unix socket
// <uds_path>_<port> in the jail, where "cortex-agent egress-tunnel"
// listens: nsbox's enforcing proxy, as the jail's uid, confined like an
// agent, ending when Firecracker does (a pidfd). What the guest can reach
// is decided on the host; a VM is never joined to the host's network.
const EgressVsockPort = boot.DefaultEgressVsockPort

// tunnelSocket is where, in the jail, Firecracker connects the guest's
// tunnel connections.
func tunnelSocket(j jail) string { return j.host(fmt.Sprintf("%s_%d", jailVsock, EgressVsockPort)) }

// startTunnel starts the host's end of the neuron's egress, listening in
// its jail, for the Firecracker process vmm.
func startTunnel(req *lifecycle.StartRequest, j jail, vmm int, allow []string) error {
	stats, err := lifecycle.EgressStatsFile(req.Layout, req.ID)
	if err != nil {
		return err
	}
	defer stats.Close()
	t := vmguest.Tunnel{AgentBin: req.AgentBin, Log: req.Log, Allow: allow, Listen: tunnelSocket(j), VMM: vmm,
		Cred: &syscall.Credential{Uid: uint32(j.uid), Gid: uint32(j.gid)}, Stats: stats}
	return t.Start()
}
