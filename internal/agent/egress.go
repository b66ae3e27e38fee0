package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// egressWay is the neuron's way out where the host enforces its
// allow-list from outside (kube mode): the programs' proxy variables name
// a listener on the neuron's loopback, and the tunnel carries each
// connection made there to a host over an egress_tunnel request, whose
// proxy decides. The agent only carries bytes; with no host holding the
// tunnel every connection is answered 502.
type egressWay struct {
	tunnel egress.GuestTunnel
	mu     sync.Mutex
	held   bool // a request is the tunnel's stream
}

// checkEgressAddr refuses an egress listener anywhere but the loopback:
// it is the neuron's own way out, for its programs alone.
func checkEgressAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err == nil {
		if ip, perr := netip.ParseAddr(host); perr != nil || !ip.IsLoopback() {
			err = fmt.Errorf("%q is not a loopback address", host)
		}
	}
	if err != nil {
		return fmt.Errorf("agent: the egress listener %q: %w", addr, err)
	}
	return nil
}

// serveEgress listens on addr for the neuron's programs until ctx ends.
func (a *Agent) serveEgress(ctx context.Context, addr string) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent: the egress listener: %w", err)
	}
	a.egress.tunnel.Logf = a.logf
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.egress.tunnel.Serve(ctx, ln); err != nil && ctx.Err() == nil {
			a.logf("egress: %v", err)
		}
	}()
	return func() { ln.Close(); <-done }, nil
}

// egressTunnel serves egress_tunnel: the request becomes the tunnel's
// stream until the host ends it (or the session does).
func (a *Agent) egressTunnel(req *request) (any, []byte, error) {
	if req.in == nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "egress_tunnel without an input stream")
	}
	defer req.in.abort()
	if a.cfg.Egress == "" {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "this neuron has no egress listener (its network is none)")
	}
	w := &a.egress
	w.mu.Lock()
	if w.held {
		w.mu.Unlock()
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "another host holds this neuron's egress tunnel (one at a time)")
	}
	w.held = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.held = false
		w.mu.Unlock()
	}()
	// Writes wait for the host's credit under their own context, ended
	// with the stream: a host that stops granting and sends its EOF does
	// not keep a write, and the tunnel, waiting.
	wctx, cancel := context.WithCancel(req.ctx)
	defer cancel()
	s := &reqStream{req: req, wctx: wctx}
	// The stream is the tunnel's before the host hears "connected", so a
	// program's connection made as soon as it has is carried, not
	// answered 502; and nothing of the tunnel's is written before that
	// event (a write waits for s.mu).
	s.mu.Lock()
	done := w.tunnel.Attach(s)
	err := req.event(protocol.StreamConnected, struct{}{})
	s.mu.Unlock()
	if err != nil {
		cancel()
		w.tunnel.Detach(done) // its reader ends with the request
		return nil, nil, err
	}
	<-done // until a read fails: the host's EOF, or the request's end
	cancel()
	w.tunnel.Detach(done) // connections from now on are answered 502, none written here
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return protocol.EgressResult{Sent: s.got, Received: s.sent}, nil, nil
}

// reqStream is a request's streams as one byte stream: the host's input
// read, StreamStdout events written (with the channel's credit both ways).
type reqStream struct {
	req     *request
	wctx    context.Context // the writes' (ends with the stream)
	pending []byte          // the rest of the last input chunk
	held    int             // its length, granted back once it is read
	got     int64           // read by the reader only; under mu for the result

	mu    sync.Mutex // one write at a time: the stream's offsets
	sent  int64
	ended bool // the request answered: nothing more is its to send
}

func (s *reqStream) Read(b []byte) (int, error) {
	if len(s.pending) == 0 {
		p, err := s.req.in.next(s.req.ctx)
		if err != nil {
			return 0, err
		}
		s.pending, s.held = p, len(p)
	}
	n := copy(b, s.pending)
	s.pending = s.pending[n:]
	s.mu.Lock()
	s.got += int64(n)
	s.mu.Unlock()
	if len(s.pending) == 0 && s.held > 0 {
		held := s.held
		s.held = 0
		if err := s.req.grant(held); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *reqStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.wctx.Err() != nil {
		return 0, io.ErrClosedPipe
	}
	if err := s.req.sendCtx(s.wctx, protocol.StreamStdout, s.sent, b); err != nil {
		return 0, err
	}
	s.sent += int64(len(b))
	return len(b), nil
}
