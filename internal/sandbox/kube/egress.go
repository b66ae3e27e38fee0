package kube

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// A kube neuron's network egress. The namespace's NetworkPolicies let a
// neuron pod reach nothing, not even the cluster's DNS; its programs'
// proxy variables name its agent's listener on the pod's loopback
// (EgressListen), and the agent carries each connection made there over
// an egress_tunnel request of the channel a host already holds. That
// host serves the neuron's allow-list (the pod's AnnotationEgress) with
// the enforcing proxy nsbox and the VM modes run: it resolves names from
// its own resolver, refuses its own addresses to a name rule, and dials
// from the host's pod. So what a neuron reaches is decided outside it, by
// the same code as everywhere, over a connection the host authenticated,
// and no NetworkPolicy is ever wider than "nothing".
//
// Every host that links to the neuron keeps trying to hold its tunnel;
// the agent gives it to one at a time, so when that host goes (a replica
// restarted), another that links to the neuron takes it within
// egressRetry. A neuron no host links to has no way out until one does:
// its connections are answered 502.

// tunnelConns caps the connections a neuron's proxy serves at once: each
// holds at most a stream's receive window (256 KiB) of the host's memory
// while the proxy works on it.
const tunnelConns = 64

// egressRetry is how long a host waits to ask for a tunnel another host
// holds, or one that failed, again.
var egressRetry = 5 * time.Second

// holdEgress holds neuron id's egress tunnel over l, serving rules on it,
// until l is closed. It is started with the link, and the Manager's
// Close waits for it.
func (m *Manager) holdEgress(id string, l *link.Link, rules []string) {
	defer m.egress.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	logf := m.logf
	// One proxy for the neuron, whatever tunnels come and go: its
	// resolver read once, its log's rate the neuron's.
	plan, err := confine.PlanEgress(rules)
	if err != nil {
		logf("neuron %s: egress: %v: the neuron reaches nothing", id, err)
		return
	}
	p := plan.Proxy(func(format string, args ...any) { m.logf("neuron %s: %s", id, fmt.Sprintf(format, args...)) })
	p.MaxConns = tunnelConns
	said := ""
	say := func(format string, args ...any) { // each change of trouble once
		if s := fmt.Sprintf(format, args...); s != said {
			said = s
			logf("neuron %s: egress: %s", id, s)
		}
	}
	for ctx.Err() == nil {
		if _, err := l.WaitConnected(ctx); err != nil {
			return
		}
		conn, err := l.Client().EgressTunnel(ctx)
		switch {
		case err == nil:
			said = ""
			began := time.Now()
			err = p.ServeTunnel(ctx, conn)
			if err != nil {
				say("the tunnel ended: %v", err)
			}
			if time.Since(began) >= egressRetry {
				continue // a tunnel that ran a while is asked for again at once
			}
			// One that ended at once (an agent that ends it, again and
			// again) waits, as a refusal does: no host spins on it.
		case protocol.HasCode(err, protocol.CodeNotFound), protocol.HasCode(err, protocol.CodeUnsupported):
			say("its agent serves no egress tunnel (%v): the neuron reaches nothing", err)
			return
		case protocol.HasCode(err, protocol.CodeBadRequest):
			// Another host holds it (another replica): ask again later,
			// should that host go.
		default:
			if ctx.Err() == nil {
				say("asking for the tunnel: %v", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(egressRetry):
		}
	}
}

// logf is where the Manager says what goes wrong beside a request (the
// host's log: the cluster's logs of its pod).
func (m *Manager) logf(format string, args ...any) {
	if m.Logf != nil {
		m.Logf(format, args...)
		return
	}
	log.Printf(format, args...)
}
