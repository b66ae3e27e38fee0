package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// DefaultTimeout bounds a request that names no timeout of its own.
const DefaultTimeout = 30 * time.Second

// NoTimeout, as a Request's Timeout, waits as long as the context allows.
const NoTimeout time.Duration = -1

// maxQueuedEvents bounds the events without a body (gaps, notices) queued for
// one request; an agent that floods them is cut off.
const maxQueuedEvents = 4096

// Request is one command for the agent.
type Request struct {
	Cmd  protocol.Cmd
	Args any
	Body []byte
	// Timeout is how long to wait for the response: 0 means DefaultTimeout,
	// NoTimeout means only ctx bounds it. The agent is told, and stops too.
	Timeout time.Duration
	// Into, when big enough, receives the response body without a copy.
	Into []byte
	// File asks for the agent's answer to carry an open file
	// (protocol.CapPassFiles); the call is UNSUPPORTED where the connection
	// cannot carry one (see Conn.PassFiles).
	File bool
}

// Response is a successful response.
type Response struct {
	Data json.RawMessage
	Body []byte
	// File is the open file the agent passed, when the request asked for
	// one and the agent sent it: the caller owns it and must check what it
	// is (the agent is not trusted) and close it.
	File *os.File
}

// Decode unmarshals the response data into v.
func (r *Response) Decode(v any) error {
	if len(r.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Data, v); err != nil {
		return protocol.Errorf(protocol.CodeInternal, "agent sent a result that does not decode: %v", err)
	}
	return nil
}

// Event is stream data (or a small JSON event) for a request.
type Event struct {
	Stream string
	Offset int64
	Data   json.RawMessage
	Body   []byte
}

// Conn is an established connection to one agent, after the hello exchange.
// Requests are multiplexed on it by id; it is safe for concurrent use.
type Conn struct {
	nc net.Conn
	r  *protocol.Reader
	// files keeps the descriptors passed on a Unix socket (nil on any other
	// connection); only readLoop touches it. passFiles: see
	// HandshakeOptions.PassFiles.
	files     *protocol.FileReader
	passFiles bool
	peer      protocol.Hello
	caps      map[string]bool

	w *protocol.FrameWriter

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // set once, when the connection ends
	done    chan struct{}
}

// call is a request waiting for its response.
type call struct {
	id     uint64
	cmd    protocol.Cmd
	into   []byte
	file   bool        // the request asked for a passed file
	res    chan result // capacity 1
	stream *streamState
}

type result struct {
	resp *Response
	err  error
}

// HandshakeOptions checks the agent's hello.
type HandshakeOptions struct {
	// Neuron, when set, must equal the id in the agent's hello.
	Neuron string
	// Token, when set, must equal the agent's token (with Present, it is
	// sent to the agent instead).
	Token string
	// Secret, when set, is the neuron's per-start secret: the host's hello
	// carries a fresh nonce, and the agent must answer it with
	// protocol.AgentProof, or the connection is refused.
	Secret string
	// Present sends Token in the host's hello: the host dialled an agent
	// that listens where anyone may connect, and must prove itself.
	Present bool
	// Software names the host in its hello.
	Software string
	// Timeout bounds the exchange (default 10 s).
	Timeout time.Duration
	// PassFiles: the peer is the agent itself, on a Unix socket, with no
	// relay between: the host may ask it for open files (see
	// Conn.PassFiles). Descriptors it sends are kept from harming the
	// host either way (protocol.FileReader).
	PassFiles bool
}

// ErrNotTheAgent marks a handshake refused because of what the peer said
// (another neuron's agent, a wrong token or proof, an incompatible
// protocol), not because the connection broke — a relay whose guest was
// just restored may garble a hello and try again; a peer that is not the
// agent stays refused.
var ErrNotTheAgent = errors.New("not the neuron's agent")

type notTheAgent struct{ error }

func (e notTheAgent) Unwrap() error        { return e.error }
func (e notTheAgent) Is(target error) bool { return target == ErrNotTheAgent }

// Handshake exchanges hellos on nc and returns the connection, or closes nc
// and says why the agent was refused.
func Handshake(nc net.Conn, o HandshakeOptions) (*Conn, error) {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	protocol.TuneConn(nc)
	c := &Conn{nc: nc, w: protocol.NewFrameWriter(nc), pending: map[uint64]*call{}, done: make(chan struct{}), passFiles: o.PassFiles}
	var src io.Reader = nc
	if uc, ok := nc.(*net.UnixConn); ok {
		c.files = protocol.NewFileReader(uc)
		src = c.files
	}
	c.r = protocol.NewReader(src, protocol.MaxBody)
	if err := c.hello(o); err != nil {
		nc.Close()
		if c.files != nil {
			c.files.Close() // what a refused peer sent with its hello
		}
		return nil, err
	}
	go c.readLoop()
	return c, nil
}

func (c *Conn) hello(o HandshakeOptions) error {
	c.nc.SetDeadline(time.Now().Add(o.Timeout))
	defer c.nc.SetDeadline(time.Time{})
	caps := []string{}
	me := protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleHost, Software: o.Software, Caps: caps,
		MaxBody: protocol.MaxBody, Window: protocol.DefaultWindow}
	if o.Present {
		me.Token = o.Token
	}
	if o.Secret != "" {
		me.Nonce = protocol.NewNonce()
	}
	var err error
	if c.peer, err = protocol.ExchangeHello(c.w, c.r, me, protocol.RoleAgent); err != nil {
		if errors.Is(err, protocol.ErrIncompatible) {
			return notTheAgent{err}
		}
		return err
	}
	if o.Neuron != "" && c.peer.Neuron != o.Neuron {
		return notTheAgent{fmt.Errorf("agent serves neuron %q, want %q", c.peer.Neuron, o.Neuron)}
	}
	if o.Token != "" && !o.Present && !tokenEqual(c.peer.Token, o.Token) {
		return notTheAgent{errors.New("agent presented a wrong token")}
	}
	if o.Secret != "" && !protocol.CheckProof(o.Secret, c.peer.Neuron, me.Nonce, c.peer.Proof) {
		if c.peer.Proof == "" {
			return notTheAgent{fmt.Errorf("the peer (%q) did not prove it is the neuron's agent: an agent older than this host "+
				"(create the neuron again; a VM image needs building again), or a process in the neuron posing as its agent", c.peer.Software)}
		}
		return notTheAgent{fmt.Errorf("the peer (%q) gave a wrong proof of being the neuron's agent: a process in the neuron posing as its agent", c.peer.Software)}
	}
	c.caps = map[string]bool{}
	for _, cp := range c.peer.Caps {
		c.caps[cp] = true
	}
	return nil
}

// Peer returns the agent's hello.
func (c *Conn) Peer() protocol.Hello { return c.peer }

// PassFiles reports whether the agent can answer with open files: it
// announced protocol.CapPassFiles, on a Unix socket that reaches it
// directly (HandshakeOptions.PassFiles).
func (c *Conn) PassFiles() bool {
	return c.passFiles && c.files != nil && c.caps[protocol.CapPassFiles]
}

// Supports reports whether the agent announced cmd.
func (c *Conn) Supports(cmd protocol.Cmd) bool { return c.caps[string(cmd)] }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended (nil while it is up).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; pending requests fail with NOT_RUNNING.
func (c *Conn) Close() error {
	c.fail(errors.New("connection closed by the host"))
	return nil
}

// fail ends the connection once, failing every pending request at once.
func (c *Conn) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = cause
	pending := c.pending
	c.pending = map[uint64]*call{}
	c.mu.Unlock()
	// Done closes before any caller learns of the failure, so whoever saw a
	// call fail never finds the connection still looking alive.
	close(c.done)
	c.nc.Close()
	err := c.notRunning()
	for _, cl := range pending {
		cl.finish(result{err: err})
	}
}

func (c *Conn) notRunning() error {
	c.mu.Lock()
	cause := c.err
	c.mu.Unlock()
	who := "the agent"
	if c.peer.Neuron != "" {
		who = "the agent of neuron " + c.peer.Neuron
	}
	return protocol.Errorf(protocol.CodeNotRunning, "%s is not connected: %v", who, cause)
}

func (c *Conn) readLoop() {
	if c.files != nil {
		defer c.files.Close()
	}
	for {
		var h protocol.Header
		n, err := c.r.ReadHeader(&h)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("agent disconnected")
			}
			c.fail(err)
			return
		}
		var file *os.File
		if h.File {
			if file, err = c.r.TakeFile(); err != nil {
				c.fail(fmt.Errorf("request %d: %w", h.ID, err))
				return
			}
		}
		cl := c.lookup(h.ID, h.Kind == protocol.KindResponse)
		if file != nil && (cl == nil || !cl.file || h.Kind != protocol.KindResponse || h.Err != nil || n > 0) {
			file.Close() // not asked for, or not with this answer
			file = nil
		}
		var body []byte
		if n > 0 {
			if cl != nil && h.Kind == protocol.KindResponse && len(cl.into) >= n {
				body = cl.into[:n]
			} else if cl != nil {
				body = make([]byte, n)
			}
			if body == nil {
				err = c.r.Discard(n) // a late answer to an abandoned request
			} else {
				err = c.r.ReadBody(body)
			}
			if err != nil {
				c.fail(err)
				if cl != nil {
					// A response call was already taken out of pending.
					cl.finish(result{err: c.notRunning()})
				}
				return
			}
		}
		if cl == nil {
			continue
		}
		switch h.Kind {
		case protocol.KindResponse:
			if h.Err != nil {
				cl.finish(result{err: h.Err.Normalize()})
			} else {
				cl.finish(result{resp: &Response{Data: h.Data, Body: body, File: file}})
			}
		case protocol.KindEvent:
			if cl.stream == nil {
				c.fail(fmt.Errorf("agent sent a stream event for request %d (%s), which streams nothing", h.ID, cl.cmd))
				return
			}
			if err := cl.stream.push(&Event{Stream: h.Stream, Offset: h.Offset, Data: h.Data, Body: body}); err != nil {
				c.fail(fmt.Errorf("request %d (%s): %w", h.ID, cl.cmd, err))
				return
			}
		case protocol.KindWindow:
			if cl.stream != nil && h.Credit > 0 {
				cl.stream.sendCredit.Add(h.Credit)
			}
		default:
			c.fail(fmt.Errorf("agent sent a %q frame, which only hosts send", h.Kind))
			return
		}
	}
}

// lookup finds the call for id; a response also removes it.
func (c *Conn) lookup(id uint64, remove bool) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.pending[id]
	if remove && cl != nil {
		delete(c.pending, id)
	}
	return cl
}

func (cl *call) finish(r result) {
	select {
	case cl.res <- r:
	default: // already finished
		if r.resp != nil && r.resp.File != nil {
			r.resp.File.Close()
		}
	}
	if cl.stream != nil {
		cl.stream.wake()
	}
}

// write sends one frame; safe for concurrent use.
func (c *Conn) write(h *protocol.Header, body []byte) error { return c.w.Write(h, body) }

// start registers a call and sends its request frame.
func (c *Conn) start(req *Request, stream *streamState) (*call, time.Duration, error) {
	if !c.caps[string(req.Cmd)] {
		return nil, 0, protocol.Errorf(protocol.CodeUnsupported, "the agent (%s, protocol %s) does not support %q",
			c.peer.Software, c.peer.Protocol, req.Cmd)
	}
	if req.File && (stream != nil || !c.PassFiles()) {
		return nil, 0, protocol.Errorf(protocol.CodeUnsupported, "%s: this connection to the agent cannot pass files", req.Cmd)
	}
	var data json.RawMessage
	if req.Args != nil {
		var err error
		if data, err = json.Marshal(req.Args); err != nil {
			return nil, 0, protocol.Errorf(protocol.CodeBadRequest, "%s: arguments do not encode: %v", req.Cmd, err)
		}
	}
	if len(req.Body) > c.peer.MaxBody && c.peer.MaxBody > 0 {
		return nil, 0, protocol.Errorf(protocol.CodeTooLarge, "%s: body of %d bytes exceeds the agent's limit of %d", req.Cmd, len(req.Body), c.peer.MaxBody)
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, 0, c.notRunning()
	}
	c.nextID++
	cl := &call{id: c.nextID, cmd: req.Cmd, into: req.Into, file: req.File, res: make(chan result, 1), stream: stream}
	c.pending[cl.id] = cl
	c.mu.Unlock()
	h := &protocol.Header{Kind: protocol.KindRequest, ID: cl.id, Cmd: req.Cmd, Data: data}
	if timeout > 0 {
		h.TimeoutMs = max(1, timeout.Milliseconds())
	}
	if err := c.write(h, req.Body); err != nil {
		c.lookup(cl.id, true)
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			return nil, 0, protocol.Errorf(protocol.CodeTooLarge, "%s: %v", req.Cmd, err)
		}
		c.fail(fmt.Errorf("writing to the agent: %w", err))
		return nil, 0, c.notRunning()
	}
	return cl, timeout, nil
}

// abandon forgets a call and tells the agent to stop working on it. It
// reports false when the response is already being delivered: the caller
// must then take it from cl.res (its body may be landing in cl.into).
func (c *Conn) abandon(cl *call) bool {
	if c.lookup(cl.id, true) == nil {
		return false
	}
	c.write(&protocol.Header{Kind: protocol.KindCancel, ID: cl.id}, nil) // a dead connection needs no cancel
	return true
}

// Call sends a request and waits for its response.
func (c *Conn) Call(ctx context.Context, req *Request) (*Response, error) {
	cl, timeout, err := c.start(req, nil)
	if err != nil {
		return nil, err
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case r := <-cl.res:
		return r.resp, r.err
	case <-timer:
		if !c.abandon(cl) {
			r := c.landing(cl)
			return r.resp, r.err
		}
		return nil, protocol.Errorf(protocol.CodeTimeout, "%s: no answer from the agent within %s", req.Cmd, timeout)
	case <-ctx.Done():
		if !c.abandon(cl) {
			r := c.landing(cl)
			return r.resp, r.err
		}
		return nil, ctxError(req.Cmd, ctx)
	}
}

// stallTimeout bounds how long a response whose header has arrived may take
// to deliver its body before the agent is taken for stuck.
const stallTimeout = 10 * time.Second

// landing waits for a response that is already being read; an agent that
// stops in the middle of a frame loses its connection rather than hanging
// the caller past its deadline.
func (c *Conn) landing(cl *call) result {
	t := time.NewTimer(stallTimeout)
	defer t.Stop()
	select {
	case r := <-cl.res:
		return r
	case <-t.C:
		c.fail(errors.New("the agent stopped in the middle of a frame"))
		return <-cl.res
	}
}

// ctxError reports why ctx ended: a deadline is a TIMEOUT, a cancellation
// keeps context.Canceled in the chain.
func ctxError(cmd protocol.Cmd, ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return protocol.Errorf(protocol.CodeTimeout, "%s: deadline exceeded", cmd)
	}
	return fmt.Errorf("%s: %w", cmd, ctx.Err())
}
