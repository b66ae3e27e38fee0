package vminit

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// startEgress listens for the guest's proxy connections on its loopback
// and carries them over the egress port to the host, which enforces the
// neuron's allow-list. Without the port (or once the host's end is gone)
// every connection is answered 502: there is no other way out.
func (g *guest) startEgress() error {
	ln, err := net.Listen("tcp", g.cfg.Egress)
	if err != nil {
		return fmt.Errorf("network: the egress proxy's listener: %w", err)
	}
	g.tunnel = &egress.GuestTunnel{Logf: g.logf}
	go func() {
		if err := g.tunnel.Serve(context.Background(), ln); err != nil {
			g.logf("egress: %v", err)
		}
	}()
	if g.cfg.EgressVsockPort == 0 {
		go g.serveEgressPort()
	} // else over vsock, once its modules are loaded
	return nil
}

// serveEgressPort attaches the egress port to the tunnel each time a host
// is connected to it.
func (g *guest) serveEgressPort() {
	dev, err := portDevice(boot.EgressPort, 10*time.Second)
	if err != nil {
		g.logf("egress: %v (no egress)", err)
		return
	}
	f, err := openPort(dev)
	if err != nil {
		g.logf("egress: %v (no egress)", err)
		return
	}
	defer f.Close()
	for {
		if err := waitHost(f); err != nil {
			g.logf("egress: %v (no egress)", err)
			return
		}
		<-g.tunnel.Attach(f)
		g.logf("egress: the host's end of the tunnel went away")
	}
}

// serveEgressVsock attaches a vsock connection to the host's port to the
// tunnel, and dials again whenever it ends (a snapshot's restore resets
// every vsock connection).
func (g *guest) serveEgressVsock(port uint32) {
	backoff := 50 * time.Millisecond
	for {
		f, err := dialVsock(unix.VMADDR_CID_HOST, port)
		if err != nil {
			time.Sleep(backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		<-g.tunnel.Attach(f)
		f.Close()
	}
}

// dialVsock connects to a vsock port (blocking), and returns the
// connection for the runtime's poller.
func dialVsock(cid, port uint32) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: cid, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock: connecting to %d:%d: %w", cid, port, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("vsock:%d:%d", cid, port)), nil
}
