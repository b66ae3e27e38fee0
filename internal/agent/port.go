package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// portDialTimeout bounds the connect to a port in the neuron.
const portDialTimeout = 5 * time.Second

// portDial connects to a port on the neuron's own loopback and carries the
// connection over the request's streams (protocol.PortDialArgs): the
// neuron's network namespace is the agent's, so the host reaches the
// neuron's servers without any route from the neuron to the host.
func (a *Agent) portDial(req *request) (any, []byte, error) {
	var args protocol.PortDialArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if args.Port < 1 || args.Port > 65535 {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "port %d: give 1-65535", args.Port)
	}
	if req.in == nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "port_dial without an input stream")
	}
	defer req.in.abort()
	conn, err := dialLoopback(req.ctx, args.Port)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	if err := req.event(protocol.StreamConnected, struct{}{}); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(req.ctx)
	// A host that gives up (or a session that ends) ends a read that waits.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	sent := make(chan int64, 1)
	go func() { sent <- pumpPort(ctx, req, conn) }()
	var got int64
	buf := make([]byte, protocol.ChunkSize)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if err := req.send(protocol.StreamStdout, got, buf[:n]); err != nil {
				break // the host is gone, or gave up
			}
			got += int64(n)
		}
		if rerr != nil {
			break // the neuron's side ended (or the request was cancelled)
		}
	}
	cancel()
	conn.Close() // ends a write the pump is blocked in
	return protocol.PortDialResult{Sent: <-sent, Received: got}, nil, nil
}

// pumpPort writes the host's input to conn until the host's EOF (then it
// half-closes conn) or ctx ends, granting credit as it goes; it returns
// the bytes written.
func pumpPort(ctx context.Context, req *request, conn net.Conn) int64 {
	var n int64
	for {
		p, err := req.in.next(ctx)
		if errors.Is(err, io.EOF) {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return n
		}
		if err != nil {
			return n
		}
		w, werr := conn.Write(p)
		n += int64(w)
		if werr != nil || req.grant(len(p)) != nil {
			return n
		}
	}
}

// dialLoopback connects to port on 127.0.0.1, else on ::1.
func dialLoopback(ctx context.Context, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: portDialTimeout}
	p := strconv.Itoa(port)
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return conn, nil
	}
	if conn6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", p)); err6 == nil {
		return conn6, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, protocol.Errorf(protocol.CodeNotFound, "nothing listens on port %d in the neuron (127.0.0.1 and ::1): %v", port, err)
}
