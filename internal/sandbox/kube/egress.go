package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
)

// A kube neuron's network egress. The namespace's NetworkPolicies let a
// neuron pod reach nothing, not even the cluster's DNS; its programs'
// proxy variables name its agent's listener on the pod's loopback
// (EgressListen), and the agent carries each connection made there over
// an egress_tunnel request of the channel a host already holds. That
// host serves the neuron's allow-list (the pod's AnnotationEgress) with
// the enforcing proxy nsbox and the VM modes run, in "cortex-agent
// egress-tunnel" (confined as an agent is, as the VM modes run it): it
// resolves names from the host's resolver, refuses the host's own
// addresses to a name rule, and dials from the host's pod. So what a
// neuron reaches is decided outside it, by the same code as everywhere,
// over a connection the host authenticated, and no NetworkPolicy is ever
// wider than "nothing".
//
// Every host that links to the neuron keeps trying to hold its tunnel;
// the agent gives it to one at a time, so when that host goes (a replica
// restarted), another that links to the neuron takes it within
// egressRetry. A neuron no host links to has no way out until one does:
// its connections are answered 502.

// egressRetry is how long a host waits to ask for a tunnel another host
// holds, or one that failed or ended at once, again.
var egressRetry = 5 * time.Second

// The neuron's proxy's decisions reach the host's log at most at this
// rate (bytes a second, with a burst), whatever its tunnels do: the
// neuron makes the requests.
const (
	egressLogRate  = 16 << 10
	egressLogBurst = 256 << 10
)

// tunnelConns caps the connections a neuron's proxy serves at once: each
// holds at most a stream's receive window (256 KiB) of the proxy's
// memory while it works on it.
const tunnelConns = 64

// tunnelServer serves a neuron's allow-list on one tunnel's stream until
// either ends.
type tunnelServer func(ctx context.Context, conn net.Conn) error

// holdEgress holds neuron id's egress tunnel over l, serving rules (and
// secrets, when not nil) on it, until l is closed. It is started with the
// link, and the Manager's Close waits for it.
func (m *Manager) holdEgress(id string, l *link.Link, rules []string, secrets *boot.EgressTunnelSecrets) {
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
	serve := m.tunnel
	if serve == nil {
		s, stop, err := m.proxyProcess(id, rules, secrets)
		if err != nil {
			logf("neuron %s: egress: %v: the neuron reaches nothing", id, err)
			return
		}
		defer stop()
		serve = s
	}
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
			if err := serve(ctx, conn); err != nil {
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

// proxyProcess is how this host serves neuron id's rules on a tunnel: a
// "cortex-agent egress-tunnel" of its own for each, whose decisions go to
// the host's log through one pipe for the neuron (stop closes it, once
// the tunnels are done).
func (m *Manager) proxyProcess(id string, rules []string, secrets *boot.EgressTunnelSecrets) (tunnelServer, func(), error) {
	bin, err := m.agentBinary()
	if err != nil {
		return nil, nil, err
	}
	var sealed []byte // what each process reads on its pipe
	if secrets != nil {
		s := *secrets
		if s.UpstreamCAs, err = sandbox.UpstreamCAs(m.EgressUpstreamCA); err != nil {
			return nil, nil, err
		}
		if sealed, err = json.Marshal(s); err != nil {
			return nil, nil, err
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		m.pumpLog(id, pr)
	}()
	serve := func(ctx context.Context, conn net.Conn) error { return runTunnel(ctx, bin, pw, rules, sealed, conn) }
	stop := func() {
		pw.Close()
		<-pumped // the tunnels' processes have ended: they held its other ends
		pr.Close()
	}
	return serve, stop, nil
}

// agentBinary is the cortex-agent that runs the egress proxy.
func (m *Manager) agentBinary() (string, error) {
	if m.AgentBinary == nil {
		return "", errors.New("this host has no cortex-agent to run the egress proxy with")
	}
	bin, err := m.AgentBinary()
	if err != nil {
		return "", fmt.Errorf("the egress proxy's cortex-agent: %w", err)
	}
	return bin, nil
}

// runTunnel serves rules on conn with a "cortex-agent egress-tunnel" of
// bin, its decisions to logw, until either end is done: the agent ends
// the tunnel (the process then ends on its stream's EOF), the process
// ends, or ctx does.
func runTunnel(ctx context.Context, bin string, logw *os.File, rules []string, secrets []byte, conn net.Conn) error {
	defer conn.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("a socket pair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "egress-host"), os.NewFile(uintptr(fds[1]), "egress-tunnel")
	end, err := vmguest.Tunnel{AgentBin: bin, Log: logw, Allow: rules, Stream: theirs, MaxConns: tunnelConns, Secrets: secrets}.Run()
	theirs.Close()
	if err != nil {
		ours.Close()
		return err
	}
	// The process is this tunnel's: whatever it is stuck on, it does not
	// outlive it (its stream is gone by then, so nothing it does matters).
	defer end()
	pc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return err
	}
	proc := pc.(*net.UnixConn)
	defer proc.Close()
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(proc, conn)
		proc.CloseWrite() // the process's tunnel ends on this EOF
		done <- struct{}{}
	}()
	go func() {
		io.Copy(conn, proc)
		conn.Close()
		done <- struct{}{}
	}()
	ended := 0
	select {
	case <-done:
		ended++
	case <-ctx.Done():
	}
	conn.Close()
	proc.Close()
	for ; ended < 2; ended++ {
		<-done
	}
	return nil
}

// maxLogLine is the longest line of a neuron's proxy the host logs: what
// is past it is cut.
const maxLogLine = 1 << 10

// pumpLog writes what r says, line by line, to the host's log as neuron
// id's, at most at egressLogRate (what is over is dropped, and counted),
// until r ends: it never stops reading before, whatever comes (a line
// too long is cut), or the processes writing to r would block.
func (m *Manager) pumpLog(id string, r io.Reader) {
	defer io.Copy(io.Discard, r) // after a read error, what is left
	br := bufio.NewReaderSize(r, maxLogLine)
	tokens, last, dropped := float64(egressLogBurst), time.Now(), 0
	for {
		b, err := br.ReadSlice('\n')
		line := strings.TrimSuffix(string(b), "\n")
		if err == bufio.ErrBufferFull {
			line += " ...(cut)"
			for err == bufio.ErrBufferFull { // the rest of the line
				_, err = br.ReadSlice('\n')
			}
		}
		if err != nil && line == "" {
			return
		}
		now := time.Now()
		tokens = min(egressLogBurst, tokens+now.Sub(last).Seconds()*egressLogRate)
		last = now
		if tokens < float64(len(line)) {
			dropped++
			continue
		}
		tokens -= float64(len(line))
		if dropped > 0 {
			m.logf("neuron %s: (%d lines of its egress proxy dropped: over %d bytes a second)", id, dropped, egressLogRate)
			dropped = 0
		}
		m.logf("neuron %s: %s", id, line)
		if err != nil {
			return
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
