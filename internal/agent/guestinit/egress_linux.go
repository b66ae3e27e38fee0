package guestinit

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
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
	go g.serveEgressPort()
	return nil
}

// serveEgressPort attaches the egress port to the tunnel each time a host
// is connected to it.
func (g *guest) serveEgressPort() {
	dev, err := portDevice(EgressPort, 10*time.Second)
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
