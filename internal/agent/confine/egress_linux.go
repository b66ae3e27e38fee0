package confine

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// egressPlan is what PID 1 needs to enforce a neuron's allow-list, made
// before the root is built: the host's resolver files are read while this
// process still sees the host's /etc, never again.
type egressPlan struct {
	cfg      *boot.NsboxEgress
	policy   *allowlist.List
	resolver *egress.Resolver
}

func planEgress(cfg *boot.NsboxConfig) (*egressPlan, error) {
	if cfg.Egress == nil || cfg.Egress.Listen == "" {
		return nil, fmt.Errorf("network: egress without an allow-list or a proxy address")
	}
	pol, err := allowlist.Parse(cfg.Egress.Allow)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	res, err := egress.SystemResolver("/etc/hosts", "/etc/resolv.conf")
	if err != nil {
		return nil, err
	}
	return &egressPlan{cfg: cfg.Egress, policy: pol, resolver: res}, nil
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
		if err := LoopbackUp(); err != nil {
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
// and returns how to start a process there.
func startEgress(plan *egressPlan, logf func(string, ...any)) (func(*boot.NsboxConfig) (*os.Process, error), error) {
	ns, ln, err := newNetNS(plan.cfg.Listen)
	if err != nil {
		return nil, err
	}
	p := plan.proxy(logf)
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

// proxy is the enforcing proxy of the plan, dialling from this process's
// network namespace, its decisions logged at a bounded rate.
func (plan *egressPlan) proxy(logf func(string, ...any)) *egress.Proxy {
	var d net.Dialer
	log := &rateLog{logf: logf, rate: decisionLogRate, burst: decisionLogBurst}
	return &egress.Proxy{Policy: plan.policy, Resolve: plan.resolver.Resolve, Dial: d.DialContext,
		HostAddrs: hostAddrs, Log: func(dec egress.Decision) { log.print(dec.String()) }}
}

// hostAddrs lists the addresses of this host's interfaces (this process is
// in the host's network namespace).
func hostAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs() // none known: only the special blocks are refused
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// The proxy's decisions go to the neuron's log on the host at most at this
// rate (bytes a second, with a burst): the neuron makes the requests, and
// must not be able to fill the host's disk with their log lines.
const (
	decisionLogRate  = 16 << 10
	decisionLogBurst = 1 << 20
)

// rateLog writes lines within a byte budget that refills at rate, and says
// how many it left out once it can write again.
type rateLog struct {
	logf        func(string, ...any)
	rate, burst float64
	now         func() time.Time // time.Now when nil
	mu          sync.Mutex
	tokens      float64
	last        time.Time
	dropped     int
}

func (l *rateLog) print(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if l.last.IsZero() {
		l.tokens = l.burst
	} else {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < float64(len(line)) {
		l.dropped++
		return
	}
	l.tokens -= float64(len(line))
	if l.dropped > 0 {
		l.logf("egress: %d decisions not logged (over %d KiB/s)", l.dropped, int(l.rate)>>10)
		l.dropped = 0
	}
	l.logf("%s", line)
}
