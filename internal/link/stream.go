package link

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// streamState is the host end of a request's streams: events queued for the
// consumer (bounded by the credit granted to the agent) and the credit the
// agent grants for input.
type streamState struct {
	mu        sync.Mutex
	queue     []*Event
	allowance int64 // bytes the agent may still send before we grant more
	consumed  int64 // bytes taken by the consumer since the last grant
	bare      int   // queued events without a body
	window    int64
	notify    chan struct{}

	sendCredit *protocol.Credit
}

func newStreamState(agentWindow int64) *streamState {
	return &streamState{allowance: protocol.DefaultWindow, window: protocol.DefaultWindow,
		notify: make(chan struct{}, 1), sendCredit: protocol.NewCredit(agentWindow)}
}

func (st *streamState) wake() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// push queues an event from the reader; it never blocks.
func (st *streamState) push(ev *Event) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := int64(len(ev.Body))
	if n > st.allowance {
		return fmt.Errorf("agent sent %d bytes beyond the stream window", n-st.allowance)
	}
	if n == 0 {
		if st.bare >= maxQueuedEvents {
			return fmt.Errorf("agent queued more than %d events without data", maxQueuedEvents)
		}
		st.bare++
	}
	st.allowance -= n
	st.queue = append(st.queue, ev)
	st.wake()
	return nil
}

// pop takes the next event and reports how much credit to grant back.
func (st *streamState) pop() (*Event, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.queue) == 0 {
		return nil, 0
	}
	ev := st.queue[0]
	st.queue[0] = nil
	st.queue = st.queue[1:]
	n := int64(len(ev.Body))
	if n == 0 {
		st.bare--
		return ev, 0
	}
	st.consumed += n
	if st.consumed < st.window/4 {
		return ev, 0
	}
	grant := st.consumed
	st.consumed = 0
	st.allowance += grant
	return ev, grant
}

// Stream is a request whose response is preceded by events (exec output,
// process attach) and which may take input (stdin).
type Stream struct {
	c        *Conn
	cl       *call
	st       *streamState
	ctx      context.Context
	cancel   context.CancelFunc
	finished bool
	res      result
	sendMu   sync.Mutex
	sendOff  int64
	// onDone, when set, is called once the stream is over.
	onDone func()
}

// Stream sends a request whose events are read with Recv.
func (c *Conn) Stream(ctx context.Context, req *Request) (*Stream, error) {
	st := newStreamState(c.peer.Window)
	cl, timeout, err := c.start(req, st)
	if err != nil {
		return nil, err
	}
	s := &Stream{c: c, cl: cl, st: st}
	if timeout > 0 {
		s.ctx, s.cancel = context.WithTimeout(ctx, timeout)
	} else {
		s.ctx, s.cancel = context.WithCancel(ctx)
	}
	return s, nil
}

// Recv returns the next event, or io.EOF once the request has finished and
// every event before its response was returned; Result then tells how it
// finished.
func (s *Stream) Recv() (*Event, error) {
	for {
		if ev, grant := s.st.pop(); ev != nil {
			if grant > 0 {
				// A failed grant means the connection is gone: the next Recv says so.
				s.c.write(&protocol.Header{Kind: protocol.KindWindow, ID: s.cl.id, Credit: grant}, nil)
			}
			return ev, nil
		}
		if s.finished {
			return nil, io.EOF
		}
		select {
		case r := <-s.cl.res:
			s.finish(r)
			continue // events queued before the response come first
		default:
		}
		select {
		case <-s.st.notify:
		case r := <-s.cl.res:
			s.finish(r)
		case <-s.ctx.Done():
			if !s.c.abandon(s.cl) {
				s.finish(s.c.landing(s.cl))
				continue
			}
			s.finish(result{err: s.ctxErr()})
		}
	}
}

func (s *Stream) ctxErr() error {
	if s.ctx.Err() == context.DeadlineExceeded {
		return protocol.Errorf(protocol.CodeTimeout, "%s: no answer from the agent in time", s.cl.cmd)
	}
	return fmt.Errorf("%s: %w", s.cl.cmd, s.ctx.Err())
}

func (s *Stream) finish(r result) {
	if !s.finished {
		s.finished, s.res = true, r
		s.cancel()
		s.st.sendCredit.Close()
		if s.onDone != nil {
			s.onDone()
		}
	}
}

// Result returns the final response, once Recv has returned io.EOF.
func (s *Stream) Result() (*Response, error) {
	if !s.finished {
		return nil, protocol.Errorf(protocol.CodeInternal, "stream result read before the stream ended")
	}
	return s.res.resp, s.res.err
}

// Send writes input for the request (stdin), waiting for the agent's credit.
func (s *Stream) Send(p []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for len(p) > 0 {
		n, err := s.st.sendCredit.Take(s.ctx, min(len(p), protocol.ChunkSize))
		if err != nil {
			return s.sendErr(err)
		}
		if err := s.c.write(&protocol.Header{Kind: protocol.KindInput, ID: s.cl.id, Stream: protocol.StreamStdin, Offset: s.sendOff}, p[:n]); err != nil {
			return s.c.notRunning()
		}
		s.sendOff += int64(n)
		p = p[n:]
	}
	return nil
}

func (s *Stream) sendErr(err error) error {
	if s.c.Err() != nil {
		return s.c.notRunning()
	}
	if err == protocol.ErrCreditClosed {
		return io.ErrClosedPipe // the request finished; it reads no more input
	}
	return err
}

// CloseSend ends the input.
func (s *Stream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.c.write(&protocol.Header{Kind: protocol.KindInput, ID: s.cl.id, Stream: protocol.StreamStdin, Offset: s.sendOff, EOF: true}, nil); err != nil {
		return s.c.notRunning()
	}
	return nil
}

// Close abandons the request if it has not finished.
func (s *Stream) Close() {
	if !s.finished {
		if !s.c.abandon(s.cl) {
			s.finish(s.c.landing(s.cl))
		} else {
			s.finish(result{err: fmt.Errorf("%s: stream closed", s.cl.cmd)})
		}
	}
	s.cancel()
}
