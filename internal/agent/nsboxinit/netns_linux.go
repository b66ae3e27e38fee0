package nsboxinit

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// planEgress is the plan of cfg's egress, made before the root is built
// (see confine.EgressPlan).
func planEgress(cfg *boot.NsboxConfig) (*confine.EgressPlan, error) {
	if cfg.Egress == nil || cfg.Egress.Listen == "" {
		return nil, fmt.Errorf("network: egress without an allow-list or a proxy address")
	}
	plan, err := confine.PlanEgress(cfg.Egress.Allow)
	if err != nil || len(cfg.Egress.Secrets) == 0 {
		return plan, err
	}
	if err := plan.WithSecrets(cfg.Egress.Secrets, cfg.Egress.UpstreamCAs); err != nil {
		return nil, err
	}
	// The proxy holds the values now; the configuration, which lives as
	// long as this process, keeps none.
	cfg.Egress.Secrets = nil
	return plan, nil
}

// netns is a network namespace with only a loopback, held by one locked
// OS thread: the neuron's. This process, and so the proxy's outgoing
// connections, stay in the host's; everything forked on that thread starts
// in the neuron's.
type netns struct {
	calls chan func()
}

// newNetNS makes the neuron's network namespace and opens listen in it.
func newNetNS(listen string) (*netns, net.Listener, error) {
	ns := &netns{calls: make(chan func())}
	type result struct {
		ln  net.Listener
		err error
	}
	ready := make(chan result, 1)
	go func() {
		// Never unlocked: the thread is the namespace's, and should this
		// goroutine return, the runtime ends the thread with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- result{err: fmt.Errorf("network: a namespace for the neuron: %w", err)}
			return
		}
		if err := confine.LoopbackUp(); err != nil {
			ready <- result{err: fmt.Errorf("network: bringing up lo: %w", err)}
			return
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			ready <- result{err: fmt.Errorf("network: the egress proxy's listener: %w", err)}
			return
		}
		ready <- result{ln: ln}
		for f := range ns.calls {
			f()
		}
	}()
	r := <-ready
	return ns, r.ln, r.err
}

// do runs f on the namespace's thread.
func (ns *netns) do(f func()) {
	done := make(chan struct{})
	ns.calls <- func() { f(); close(done) }
	<-done
}

// startEgress makes the neuron's network namespace, serves the proxy in it,
// and returns how to start a process there. With statsFD (the host's
// NsboxEgressStatsFD), the proxy reports what it let through there.
func startEgress(plan *confine.EgressPlan, listen string, statsFD int, logf func(string, ...any)) (func(*boot.NsboxConfig) (*os.Process, error), error) {
	ns, ln, err := newNetNS(listen)
	if err != nil {
		return nil, err
	}
	p := plan.Proxy(logf)
	if statsFD == boot.NsboxEgressStatsFD {
		unix.CloseOnExec(statsFD) // the agent never gets it
		go p.PublishStats(context.Background(), os.NewFile(uintptr(statsFD), "egress-stats"), time.Second)
	}
	// The proxy lives as long as this process: the sandbox's life.
	go func() {
		if err := p.Serve(context.Background(), ln); err != nil {
			logf("egress proxy: %v", err)
		}
	}()
	return func(cfg *boot.NsboxConfig) (p *os.Process, err error) {
		ns.do(func() { p, err = startAgent(cfg) })
		return p, err
	}, nil
}
