package link

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// DialPort connects to port on the neuron's own loopback, through the
// channel (protocol.PortDialArgs): the returned net.Conn's writes reach
// the neuron's server, its reads are what the server sends. It needs no
// route between the neuron and the host. Nothing listening on the port
// is a NOT_FOUND error; an agent without port_dial, UNSUPPORTED. ctx
// bounds the connect; the connection lasts until Close (or until either
// side ends it).
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return c.dialStream(ctx, &Request{Cmd: protocol.CmdPortDial, Args: &protocol.PortDialArgs{Port: port}, Timeout: NoTimeout},
		fmt.Sprintf("neuron:%d", port), fmt.Sprintf("port %d in the neuron", port))
}

// EgressTunnel makes a stream the neuron's egress tunnel
// (protocol.CmdEgress): the returned net.Conn carries the tunnel's
// sessions, which the caller serves with the neuron's proxy. An agent
// with no egress listener answers NOT_FOUND; one whose tunnel another
// host holds, BAD_REQUEST. ctx bounds the request's start.
func (c *Client) EgressTunnel(ctx context.Context) (net.Conn, error) {
	return c.dialStream(ctx, &Request{Cmd: protocol.CmdEgress, Args: struct{}{}, Timeout: NoTimeout},
		"neuron:egress", "the neuron's egress tunnel")
}

// dialStream starts req, a request whose streams carry a connection once
// the agent says StreamConnected; remote and what name it.
func (c *Client) dialStream(ctx context.Context, req *Request, remote, what string) (net.Conn, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s, err := c.c.Stream(life, req)
	if err != nil {
		cancel()
		return nil, err
	}
	// The first event says the connection is made; an error ends the
	// request instead.
	stop := context.AfterFunc(ctx, cancel)
	ev, err := s.Recv()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err == io.EOF {
		_, err = s.Result()
		if err == nil {
			err = protocol.Errorf(protocol.CodeInternal, "%s ended before it connected", req.Cmd)
		}
	}
	if err != nil {
		s.Close()
		cancel()
		return nil, err
	}
	if ev.Stream != protocol.StreamConnected {
		s.Close()
		cancel()
		return nil, protocol.Errorf(protocol.CodeInternal, "%s: the agent sent %q before it connected", req.Cmd, ev.Stream)
	}
	return &portConn{s: s, remote: remote, what: what, cancel: cancel}, nil
}

// portConn is a connection over a request's streams: to a port in a
// neuron (port_dial), or its egress tunnel.
type portConn struct {
	s      *Stream
	remote string             // its RemoteAddr
	what   string             // what it is, for errors
	cancel context.CancelFunc // ends the stream's context: a Recv waiting returns

	mu      sync.Mutex
	pending []byte // the rest of the last event's body
	readErr error
	closed  bool
}

func (p *portConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.pending) == 0 {
		if p.readErr != nil {
			return 0, p.readErr
		}
		ev, err := p.s.Recv()
		if err == io.EOF {
			p.readErr = io.EOF
			continue
		}
		if err != nil {
			p.readErr = err
			continue
		}
		if ev.Stream == protocol.StreamStdout {
			p.pending = ev.Body
		}
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

func (p *portConn) Write(b []byte) (int, error) {
	if err := p.s.Send(b); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			return 0, fmt.Errorf("%s: the connection was closed", p.what)
		}
		return 0, err
	}
	return len(b), nil
}

// CloseWrite half-closes: the neuron's server reads EOF.
func (p *portConn) CloseWrite() error { return p.s.CloseSend() }

// Close ends the connection: the agent closes its end in the neuron.
// Safe while a Read or a Write waits (they return).
func (p *portConn) Close() error {
	p.cancel()
	p.mu.Lock() // a Read in Recv has returned
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.s.Close()
		if p.readErr == nil {
			p.readErr = net.ErrClosed
		}
	}
	return nil
}

func (p *portConn) LocalAddr() net.Addr  { return portAddr("host") }
func (p *portConn) RemoteAddr() net.Addr { return portAddr(p.remote) }

// Deadlines are not kept: a port connection ends with its context or Close.
func (p *portConn) SetDeadline(time.Time) error      { return nil }
func (p *portConn) SetReadDeadline(time.Time) error  { return nil }
func (p *portConn) SetWriteDeadline(time.Time) error { return nil }

type portAddr string

func (a portAddr) Network() string { return "cortex" }
func (a portAddr) String() string  { return string(a) }
