package firecracker

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/vsock"
)

// A bridge carries one host process's channel to a neuron's agent. The
// lifecycle's link listens on a private socket in the channel directory,
// as for every backend; the bridge dials the agent through the VM's
// hybrid vsock (CONNECT <AgentVsockPort>), then dials the link's socket
// and relays bytes both ways (the hellos, then everything else). When
// either side ends it dials again: the VM restarted, a snapshot reset the
// vsock transport, or the guest was not listening yet. It stops when the
// link's socket is gone (the link was closed).
//
// (The relay exists because link.Dial speaks TCP only: a link that dials
// a net.Conn of the backend's choosing would make it unnecessary.)
type bridge struct {
	id    string // the neuron's
	set   *bridgeSet
	uds   string // the VM's vsock socket on the host
	local string // the link's socket

	mu    sync.Mutex
	held  int           // > 0 while a snapshot is taken: do not dial
	relay []net.Conn    // the connection pair being relayed
	wake  chan struct{} // signalled when held drops to 0, or the VM starts
}

func newBridge(uds, local string) *bridge {
	return &bridge{uds: uds, local: local, wake: make(chan struct{}, 1)}
}

// maxBackoff is the longest wait between attempts.
const maxBackoff = 10 * time.Millisecond

// attemptTimeout bounds one CONNECT: Firecracker answers at once, but a
// device the guest has not activated yet may leave it unanswered.
const attemptTimeout = time.Second

// run dials and relays until the link's socket is gone or stop ends.
func (b *bridge) run(stop context.Context) {
	backoff := 2 * time.Millisecond
	for stop.Err() == nil {
		if _, err := os.Lstat(b.local); err != nil {
			return // the link is closed
		}
		if b.isHeld() {
			select {
			case <-b.wake:
			case <-stop.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		ctx, cancel := context.WithTimeout(stop, attemptTimeout)
		vc, err := vsock.Dial(ctx, b.uds, AgentVsockPort)
		cancel()
		if err != nil {
			// A refused attempt costs a connect and a line: try often, so
			// that the agent is reached within milliseconds of listening.
			b.setErr(err)
			select {
			case <-stop.Done():
			case <-b.wake: // the VM is up (or back): try now
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		if b.isHeld() { // a snapshot began while this attempt was under way
			vc.Close()
			continue
		}
		backoff = 2 * time.Millisecond
		lc, err := protocol.DialUnix(context.Background(), b.local)
		if err != nil {
			vc.Close()
			return // the link is gone
		}
		b.setErr(nil)
		b.serve(stop, lc, vc)
	}
}

// serve relays one connection pair until either side ends.
func (b *bridge) serve(stop context.Context, lc net.Conn, vc *vsock.Conn) {
	defer context.AfterFunc(stop, func() { lc.Close(); vc.Close() })()
	b.mu.Lock()
	b.relay = []net.Conn{lc, vc}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.relay = nil
		b.mu.Unlock()
		lc.Close()
		vc.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { io.Copy(vc, lc); vc.CloseWrite(); done <- struct{}{} }()
	go func() {
		io.Copy(lc, vc)
		if uc, ok := lc.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	lc.Close()
	vc.Close()
	<-done
}

func (b *bridge) setErr(err error) {
	if b.set != nil && err != nil {
		b.set.noteErr(b.id, err)
	}
}

func (b *bridge) isHeld() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held > 0
}

// hold ends the connection being relayed and stops dialling until
// release: the vsock transport is about to be reset.
func (b *bridge) hold() {
	b.mu.Lock()
	b.held++
	relay := b.relay
	b.mu.Unlock()
	for _, c := range relay {
		c.Close()
	}
}

// release lets the bridge dial again.
func (b *bridge) release() {
	b.mu.Lock()
	if b.held > 0 {
		b.held--
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// bridgeSet is the bridges of this process, per neuron. It owns their
// goroutines: each ends with its link, and wait ends them all.
type bridgeSet struct {
	mu     sync.Mutex
	by     map[string]map[*bridge]struct{}
	errs   map[string]error // the last failure to reach each neuron's agent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *bridgeSet) start(id string, b *bridge) {
	b.id, b.set = id, s
	s.mu.Lock()
	if s.by == nil {
		s.by = map[string]map[*bridge]struct{}{}
	}
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	stop := s.ctx
	if s.by[id] == nil {
		s.by[id] = map[*bridge]struct{}{}
	}
	s.by[id][b] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		b.run(stop)
		s.mu.Lock()
		delete(s.by[id], b)
		if len(s.by[id]) == 0 {
			delete(s.by, id)
		}
		s.mu.Unlock()
	}()
}

// kick makes neuron id's bridges try at once (its VM has just started).
func (s *bridgeSet) kick(id string) {
	for _, b := range s.of(id) {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// wait stops every bridge and waits for them (their links are closed by
// then); bridges started later run afresh.
func (s *bridgeSet) wait() {
	s.mu.Lock()
	cancel := s.cancel
	s.ctx, s.cancel = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

func (s *bridgeSet) of(id string) []*bridge {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*bridge
	for b := range s.by[id] {
		out = append(out, b)
	}
	return out
}

func (s *bridgeSet) noteErr(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]error{}
	}
	s.errs[id] = err
}

// lastErr is why a bridge of neuron id last failed to reach its agent
// (kept after the bridge is gone, for the boot error that follows).
func (s *bridgeSet) lastErr(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[id]
}

// forget drops what is known of neuron id's failures (a create starts).
func (s *bridgeSet) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.errs, id)
}
