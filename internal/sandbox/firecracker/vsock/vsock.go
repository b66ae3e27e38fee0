// Package vsock is the host side of Firecracker's hybrid vsock: a guest's
// AF_VSOCK ports reached through Unix sockets on the host.
//
//   - Host-initiated: Firecracker listens on the device's Unix socket
//     (uds_path). The host connects, writes "CONNECT <port>\n" and reads
//     "OK <host port>\n"; from then on the connection is a byte stream to
//     the guest's listener on that port. A guest that does not listen (yet)
//     makes Firecracker close the connection without the OK.
//   - Guest-initiated: a guest that connects to host CID 2, port P, is
//     forwarded by Firecracker to a Unix socket the host listens on at
//     "<uds_path>_<P>".
//
// The package knows nothing of what travels on the streams.
package vsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// maxReplyLine bounds Firecracker's answer to CONNECT ("OK 1073741824\n").
const maxReplyLine = 64

// RefusedError says the guest did not take a connection: Firecracker
// closed it without an OK (nothing listens on the port yet), or answered
// something other than OK.
type RefusedError struct {
	Port  uint32
	Reply string // what came back instead of OK, if anything
	Err   error  // the read's error, if it failed
}

func (e *RefusedError) Error() string {
	switch {
	case e.Reply != "":
		return fmt.Sprintf("vsock port %d: Firecracker answered %q instead of OK", e.Port, e.Reply)
	case e.Err != nil:
		return fmt.Sprintf("vsock port %d: no OK from Firecracker (%v): nothing listens on the port in the guest yet", e.Port, e.Err)
	}
	return fmt.Sprintf("vsock port %d: refused", e.Port)
}

// Conn is a host-initiated stream to a guest port. (It wraps the Unix
// connection rather than embedding it, so that no method of the socket
// can read past the bytes that came with the OK line.)
type Conn struct {
	uc *net.UnixConn
	r  *bufio.Reader // holds what arrived right after the OK line
	// HostPort is the port Firecracker gave the host's end.
	HostPort uint32
}

var _ net.Conn = (*Conn)(nil)

// Read reads the guest's bytes, including any that came with the OK line.
func (c *Conn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.uc.Read(p)
}

// Write sends bytes to the guest.
func (c *Conn) Write(p []byte) (int, error) { return c.uc.Write(p) }

// Close ends the stream.
func (c *Conn) Close() error { return c.uc.Close() }

// CloseWrite tells the guest no more bytes come.
func (c *Conn) CloseWrite() error { return c.uc.CloseWrite() }

// LocalAddr and RemoteAddr are the Unix socket's.
func (c *Conn) LocalAddr() net.Addr  { return c.uc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.uc.RemoteAddr() }

// SetDeadline, SetReadDeadline and SetWriteDeadline are the socket's.
func (c *Conn) SetDeadline(t time.Time) error      { return c.uc.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.uc.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.uc.SetWriteDeadline(t) }

// SetReadBuffer and SetWriteBuffer size the socket's buffers.
func (c *Conn) SetReadBuffer(n int) error  { return c.uc.SetReadBuffer(n) }
func (c *Conn) SetWriteBuffer(n int) error { return c.uc.SetWriteBuffer(n) }

// Dial makes one attempt to connect to the guest's port through the hybrid
// vsock socket at uds. The context bounds the attempt, the handshake
// included.
func Dial(ctx context.Context, uds string, port uint32) (*Conn, error) {
	nc, err := protocol.DialUnix(ctx, uds)
	if err != nil {
		return nil, fmt.Errorf("vsock socket %s: %w", uds, err)
	}
	uc := nc.(*net.UnixConn)
	if d, ok := ctx.Deadline(); ok {
		uc.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	c, err := handshake(uc, port)
	stop()
	if err != nil {
		uc.Close()
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("vsock port %d: no answer from Firecracker: %w", port, ctx.Err())
		}
		return nil, err
	}
	uc.SetDeadline(time.Time{})
	return c, nil
}

func handshake(uc *net.UnixConn, port uint32) (*Conn, error) {
	if _, err := fmt.Fprintf(uc, "CONNECT %d\n", port); err != nil {
		return nil, &RefusedError{Port: port, Err: err}
	}
	r := bufio.NewReaderSize(uc, 4096)
	line, err := readLine(r)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
		return nil, &RefusedError{Port: port, Err: err}
	}
	rest, ok := strings.CutPrefix(line, "OK ")
	if !ok {
		return nil, &RefusedError{Port: port, Reply: line}
	}
	hp, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return nil, &RefusedError{Port: port, Reply: line}
	}
	return &Conn{uc: uc, r: r, HostPort: uint32(hp)}, nil
}

// readLine reads one "\n"-terminated line of at most maxReplyLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for len(b) <= maxReplyLine {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && len(b) == 0 {
				return "", io.EOF
			}
			return "", err
		}
		if c == '\n' {
			return string(b), nil
		}
		b = append(b, c)
	}
	return "", fmt.Errorf("an answer longer than %d bytes", maxReplyLine)
}

// Retryable reports whether a failed Dial may succeed later: the guest is
// not listening yet, or Firecracker (restarting, or not yet up) has no
// socket there.
func Retryable(err error) bool {
	var re *RefusedError
	return errors.As(err, &re) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded)
}

// DialRetry dials until the guest takes the connection or ctx ends (its
// deadline is the boot deadline), each attempt bounded by attempt. It
// returns the last attempt's error with the context's.
func DialRetry(ctx context.Context, uds string, port uint32, attempt time.Duration) (*Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		c, err := Dial(actx, uds, port)
		cancel()
		if err == nil {
			return c, nil
		}
		if !Retryable(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}

// ListenPath is where the host listens for guest-initiated connections to
// port on the vsock device whose socket is uds.
func ListenPath(uds string, port uint32) string {
	return uds + "_" + strconv.FormatUint(uint64(port), 10)
}

// Listen listens for guest-initiated connections to port (host CID 2) of
// the vsock device whose socket is uds. Firecracker connects as the
// jail's user, so owner, when not nil, is given the socket (mode 0600).
func Listen(uds string, port uint32, owner *[2]int) (*net.UnixListener, error) {
	path := ListenPath(uds, port)
	os.Remove(path) // a socket left by a host that is gone
	ln, err := protocol.ListenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("listening for the guest on vsock port %d: %w", port, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if owner != nil {
		if err := os.Lchown(path, owner[0], owner[1]); err != nil {
			ln.Close()
			return nil, fmt.Errorf("giving the vsock listener to uid %d: %w", owner[0], err)
		}
	}
	return ln, nil
}
