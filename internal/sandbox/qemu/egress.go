package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
)

// Network egress of a VM neuron. The guest still has no network device:
// its PID 1 listens on the guest's loopback (GuestProxy, in the programs'
// proxy variables) and carries each connection over a virtio-serial port,
// cortex.egress, to the host. There QEMU's end of the port is one end of a
// socket pair; the other is held by "cortex-agent egress-tunnel", which
// runs the very proxy nsbox runs (the egress package: the allow-list, the
// host's resolver files read once, the host's own addresses refused to
// name rules), as the neuron's uid, confined like an agent. So what the
// guest can reach is decided on the host, and nothing joins the guest to
// the host's network.
//
// The tunnel process lives as long as its QEMU: when QEMU exits, its end
// of the pair closes and the tunnel ends. Should the tunnel die first,
// the guest loses its way out and answers its programs 502: fail closed.

// GuestProxy is where a VM neuron's programs find the egress proxy.
const GuestProxy = "127.0.0.1:3128"

// startTunnel starts the host's end of a neuron's egress tunnel and
// returns QEMU's end of the pair.
func startTunnel(req *lifecycle.StartRequest, id identity, allow []string) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress: a socket pair: %w", err)
	}
	vmEnd, tunnelEnd := os.NewFile(uintptr(fds[0]), "egress-vm"), os.NewFile(uintptr(fds[1]), "egress-tunnel")
	defer tunnelEnd.Close()
	args := []string{"cortex-agent", "egress-tunnel"}
	if id.cred != nil {
		// Started as root (the agent binary may sit where the neuron's uid
		// cannot reach it), it gives root up before it reads a byte.
		args = append(args, "--uid", strconv.Itoa(int(id.cred.Uid)), "--gid", strconv.Itoa(int(id.cred.Gid)))
	}
	args = append(args, "--")
	args = append(args, allow...)
	cmd := &exec.Cmd{Path: req.AgentBin, Args: args, Env: []string{}, Dir: "/",
		// Descriptor 3, confine.TunnelFD.
		Stdout: req.Log, Stderr: req.Log, ExtraFiles: []*os.File{tunnelEnd},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		vmEnd.Close()
		return nil, fmt.Errorf("egress: starting the tunnel: %w", err)
	}
	// Its owner is its QEMU (it ends with it); this reaps it should this
	// process outlive it.
	go cmd.Wait()
	return vmEnd, nil
}
