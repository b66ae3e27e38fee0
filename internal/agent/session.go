//go:build linux

package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// helloTimeout bounds the handshake.
const helloTimeout = 10 * time.Second

// session serves one host connection. Requests run concurrently, each in its
// own goroutine; the session owns them and cancels them all when the
// connection ends.
type session struct {
	a    *Agent
	conn net.Conn
	r    *protocol.Reader
	peer protocol.Hello

	w *protocol.FrameWriter

	mu    sync.Mutex
	reqs  map[uint64]*request
	temps map[string]bool // temporary files of uploads not yet moved into place

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// request is one in-flight command.
type request struct {
	s      *session
	id     uint64
	cmd    protocol.Cmd
	data   json.RawMessage
	body   []byte
	ctx    context.Context
	cancel context.CancelFunc
	out    *protocol.Credit // what the host lets us send on this request's streams
	in     *inbox           // stdin frames from the host, when the command takes them
	after  []func()         // run once the response is written
}

// serve runs the session until the connection ends or ctx is cancelled.
func (a *Agent) serve(ctx context.Context, conn net.Conn) error {
	protocol.TuneConn(conn)
	s := &session{a: a, conn: conn, r: protocol.NewReader(conn, protocol.MaxBody), w: protocol.NewFrameWriter(conn), reqs: map[uint64]*request{}}
	s.ctx, s.cancel = context.WithCancel(ctx)
	defer s.cancel()
	defer a.track(conn)()
	stop := context.AfterFunc(s.ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()

	if err := s.handshake(); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	a.sessionCount.Add(1)
	defer a.sessionCount.Add(-1)
	err := s.readLoop()
	s.cancel()
	conn.Close()
	s.wg.Wait()
	s.dropTemps()
	return err
}

// trackTemp records an upload's temporary file; untrackTemp forgets it once
// it has been moved into place.
func (s *session) trackTemp(abs string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.temps == nil {
		s.temps = map[string]bool{}
	}
	s.temps[abs] = true
}

func (s *session) untrackTemp(abs string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.temps, abs)
}

// dropTemps removes the temporary files of uploads the host abandoned (its
// connection ended before they were moved into place).
func (s *session) dropTemps() {
	s.mu.Lock()
	temps := s.temps
	s.temps = nil
	s.mu.Unlock()
	for p := range temps {
		if _, err := s.a.fs.remove(p, false); err != nil && !protocol.HasCode(err, protocol.CodeNotFound) {
			s.a.logf("removing the abandoned upload %s: %v", p, err)
		}
	}
}

func (s *session) handshake() error {
	conn := s.conn
	conn.SetDeadline(time.Now().Add(helloTimeout))
	defer conn.SetDeadline(time.Time{})
	who := s.a.ident.Load()
	caps := make([]string, 0, len(protocol.Commands()))
	for _, c := range protocol.Commands() {
		caps = append(caps, string(c))
	}
	if s.passFiles() {
		caps = append(caps, protocol.CapPassFiles)
	}
	hello := protocol.Hello{
		Protocol: protocol.Version(), Role: protocol.RoleAgent, Software: "cortex-agent " + s.a.cfg.Version,
		Caps: caps, Neuron: who.id, PID: s.a.pid,
		MaxBody: protocol.MaxBody, Window: protocol.DefaultWindow,
	}
	// The host speaks first either way: its hello holds the nonce this
	// agent proves its secret against (and, to an agent that listens where
	// anyone may connect, the host's token, checked before this agent says
	// anything).
	var err error
	s.peer, err = protocol.AnswerHello(s.w, s.r, hello, protocol.RoleHost, func(peer protocol.Hello, me *protocol.Hello) error {
		if s.a.cfg.Listen != "" {
			if check := s.a.cfg.TokenCheck; check != nil {
				if err := check(peer.Token); err != nil {
					return fmt.Errorf("a host with a wrong token: %w", err)
				}
			} else if subtle.ConstantTimeCompare([]byte(peer.Token), []byte(s.a.cfg.Token)) != 1 {
				return errors.New("a host with a wrong token")
			}
		}
		if who.secret != "" && peer.Nonce != "" {
			me.Proof = protocol.AgentProof(who.secret, who.id, peer.Nonce)
		}
		return nil
	})
	return err
}

func (s *session) readLoop() error {
	for {
		var h protocol.Header
		n, err := s.r.ReadHeader(&h)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return nil
			}
			return err
		}
		var body []byte
		release := func() {}
		if n > 0 {
			if h.Kind == protocol.KindRequest {
				body, release = getBuf(n) // given back when the request is done
			} else {
				body = make([]byte, n)
			}
			if err := s.r.ReadBody(body); err != nil {
				return err
			}
		}
		switch h.Kind {
		case protocol.KindRequest:
			s.start(&h, body, release)
		case protocol.KindCancel:
			if req := s.lookup(h.ID); req != nil {
				req.cancel()
			}
		case protocol.KindWindow:
			if req := s.lookup(h.ID); req != nil && h.Credit > 0 {
				req.out.Add(h.Credit)
			}
		case protocol.KindInput:
			if req := s.lookup(h.ID); req != nil && req.in != nil {
				if err := req.in.put(body, h.EOF); err != nil {
					return fmt.Errorf("request %d: %w", h.ID, err)
				}
			}
		default:
			// A host never sends responses, events or a second hello; ignoring
			// them keeps a confused host from breaking other requests.
			s.a.logf("ignoring %q frame from host", h.Kind)
		}
	}
}

func (s *session) lookup(id uint64) *request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[id]
}

// start registers the request and runs it in its own goroutine; release
// gives back the body's buffer once the request is done.
func (s *session) start(h *protocol.Header, body []byte, release func()) {
	s.a.commands.Add(1)
	var ctx context.Context
	var cancel context.CancelFunc
	if h.TimeoutMs > 0 {
		// The host gives up at this deadline; stop working for it then too.
		ctx, cancel = context.WithTimeout(s.ctx, time.Duration(h.TimeoutMs)*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(s.ctx)
	}
	req := &request{s: s, id: h.ID, cmd: h.Cmd, data: h.Data, body: body, ctx: ctx, cancel: cancel,
		out: protocol.NewCredit(s.peer.Window)}
	if h.Cmd == protocol.CmdExec && takesStdinStream(h.Data) || h.Cmd == protocol.CmdPortDial || h.Cmd == protocol.CmdEgress {
		req.in = newInbox(protocol.DefaultWindow)
	}
	s.mu.Lock()
	if _, dup := s.reqs[h.ID]; dup || h.ID == 0 {
		s.mu.Unlock()
		cancel()
		release()
		s.respond(h.ID, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "request id %d is zero or already in use", h.ID))
		return
	}
	s.reqs[h.ID] = req
	s.mu.Unlock()
	s.wg.Add(1)
	s.a.workers.run(func() {
		defer s.wg.Done()
		defer func() {
			cancel()
			s.mu.Lock()
			delete(s.reqs, h.ID)
			s.mu.Unlock()
		}()
		result, rbody, err := s.a.dispatch(req)
		if pf, ok := result.(*passedFile); ok {
			s.respondFile(h.ID, pf)
		} else {
			s.respond(h.ID, result, rbody, err)
		}
		release()
		for _, f := range req.after {
			f()
		}
	})
}

// respond sends the final response of a request.
func (s *session) respond(id uint64, result any, body []byte, err error) {
	h := &protocol.Header{Kind: protocol.KindResponse, ID: id}
	if err != nil {
		h.Err = toWireError(err)
		// Stopping: Stop was called, or the session's context ended (Run's
		// was cancelled: SIGTERM). A request cancelled then was cancelled by
		// the agent going away, not by the host: the neuron went away under
		// the command, whichever of this answer and the hang-up comes first.
		stopping := s.ctx.Err() != nil
		select {
		case <-s.a.stopped:
			stopping = true
		default:
		}
		if stopping && errors.Is(err, context.Canceled) {
			h.Err = protocol.Errorf(protocol.CodeNotRunning, "the agent stopped while this ran")
		}
		body = nil
	} else if result != nil {
		data, merr := json.Marshal(result)
		if merr != nil {
			h.Err = protocol.Errorf(protocol.CodeInternal, "encoding result: %v", merr)
			body = nil
		} else {
			h.Data = data
		}
	}
	werr := s.write(h, body)
	if errors.Is(werr, protocol.ErrFrameTooLarge) {
		// Nothing was written: answer with an error that fits instead.
		werr = s.write(&protocol.Header{Kind: protocol.KindResponse, ID: id,
			Err: protocol.Errorf(protocol.CodeTooLarge, "the result does not fit in a frame (%v); ask for less at a time", werr)}, nil)
	}
	if werr != nil && s.ctx.Err() == nil {
		s.a.logf("writing response %d: %v", id, werr)
		s.conn.Close()
	}
}

// passFiles reports whether this session can answer with open files
// (protocol.CapPassFiles): only on a Unix socket.
func (s *session) passFiles() bool {
	_, ok := s.conn.(*net.UnixConn)
	return ok
}

// passedFile is a result whose response carries an open file (see
// protocol.CapPassFiles); respondFile closes it once sent.
type passedFile struct {
	res any
	f   *os.File
}

// respondFile sends the final response of a request with pf's file.
func (s *session) respondFile(id uint64, pf *passedFile) {
	defer pf.f.Close()
	data, err := json.Marshal(pf.res)
	if err != nil {
		s.respond(id, nil, nil, protocol.Errorf(protocol.CodeInternal, "encoding result: %v", err))
		return
	}
	if err := s.w.WriteFile(&protocol.Header{Kind: protocol.KindResponse, ID: id, Data: data}, pf.f); err != nil && s.ctx.Err() == nil {
		s.a.logf("writing response %d: %v", id, err)
		s.conn.Close()
	}
}

// write sends one frame; safe for concurrent use.
func (s *session) write(h *protocol.Header, body []byte) error { return s.w.Write(h, body) }

// send streams data on one of the request's streams, waiting for credit.
func (r *request) send(stream string, off int64, data []byte) error {
	return r.sendCtx(r.ctx, stream, off, data)
}

// sendCtx is send with ctx (one that ends with the request's, or sooner)
// bounding the wait for credit.
func (r *request) sendCtx(ctx context.Context, stream string, off int64, data []byte) error {
	for len(data) > 0 {
		n, err := r.out.Take(ctx, len(data))
		if err != nil {
			return err
		}
		if err := r.s.write(&protocol.Header{Kind: protocol.KindEvent, ID: r.id, Stream: stream, Offset: off}, data[:n]); err != nil {
			return err
		}
		data = data[n:]
		off += int64(n)
	}
	return nil
}

// event sends a small JSON event that needs no credit.
func (r *request) event(stream string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.s.write(&protocol.Header{Kind: protocol.KindEvent, ID: r.id, Stream: stream, Data: data}, nil)
}

// grant gives the host credit for n more input bytes.
func (r *request) grant(n int) error {
	return r.s.write(&protocol.Header{Kind: protocol.KindWindow, ID: r.id, Credit: int64(n)}, nil)
}

// maxBody is the largest body the host accepts.
func (r *request) maxBody() int64 {
	if m := r.s.peer.MaxBody; m > 0 && m < protocol.MaxBody {
		return int64(m)
	}
	return protocol.MaxBody
}

// decode unmarshals the request's arguments into v.
func (r *request) decode(v any) error {
	if len(r.data) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.data, v); err != nil {
		return protocol.Errorf(protocol.CodeBadRequest, "%s: bad arguments: %v", r.cmd, err)
	}
	return nil
}

// inbox queues input frames for a request, bounded by the credit granted.
type inbox struct {
	mu      sync.Mutex
	chunks  [][]byte
	queued  int
	limit   int
	eof     bool
	notify  chan struct{}
	aborted bool
}

func newInbox(limit int) *inbox { return &inbox{limit: limit, notify: make(chan struct{}, 1)} }

func (b *inbox) put(p []byte, eof bool) error {
	b.mu.Lock()
	defer func() {
		b.mu.Unlock()
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}()
	if b.aborted {
		return nil // the consumer is gone; drop silently
	}
	if b.queued+len(p) > b.limit {
		return fmt.Errorf("host sent %d input bytes beyond the window", b.queued+len(p)-b.limit)
	}
	if len(p) > 0 {
		b.chunks = append(b.chunks, p)
		b.queued += len(p)
	}
	b.eof = b.eof || eof
	return nil
}

// next returns the next chunk, or io.EOF after the host's EOF.
func (b *inbox) next(ctx context.Context) ([]byte, error) {
	for {
		b.mu.Lock()
		if len(b.chunks) > 0 {
			p := b.chunks[0]
			b.chunks = slices.Delete(b.chunks, 0, 1)
			b.queued -= len(p)
			b.mu.Unlock()
			return p, nil
		}
		eof := b.eof
		b.mu.Unlock()
		if eof {
			return nil, io.EOF
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.notify:
		}
	}
}

// abort drops whatever is queued and everything that arrives later.
func (b *inbox) abort() {
	b.mu.Lock()
	b.aborted = true
	b.chunks = nil
	b.queued = 0
	b.mu.Unlock()
}

// takesStdinStream peeks at exec arguments for stdin: "stream".
func takesStdinStream(data json.RawMessage) bool {
	var a struct {
		Stdin string `json:"stdin"`
	}
	return json.Unmarshal(data, &a) == nil && a.Stdin == protocol.StdinStream
}

// toWireError maps any error onto the closed set of codes.
func toWireError(err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return protocol.Errorf(protocol.CodeTimeout, "%v", err)
	case errors.Is(err, context.Canceled):
		return protocol.Errorf(protocol.CodeTimeout, "cancelled: %v", err)
	}
	return fsError(err)
}
