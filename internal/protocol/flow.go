package protocol

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// FrameWriter writes frames to one connection; it is safe for concurrent
// use and sends each frame with a single (vectored) write.
type FrameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewFrameWriter returns a FrameWriter on w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// Write sends one frame.
func (fw *FrameWriter) Write(h *Header, body []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	var err error
	fw.buf, err = AppendFrame(fw.buf[:0], h, len(body))
	if err != nil {
		return err
	}
	if len(body) == 0 {
		_, err = fw.w.Write(fw.buf)
		return err
	}
	bufs := net.Buffers{fw.buf, body}
	_, err = bufs.WriteTo(fw.w)
	return err
}

// ErrCreditClosed is returned by Credit.Take once the stream has ended.
var ErrCreditClosed = errors.New("stream finished")

// Credit is one direction of a stream's flow control: how many body bytes
// the sender may still send before the receiver grants more (window frames).
type Credit struct {
	mu     sync.Mutex
	n      int64
	closed bool
	notify chan struct{}
}

// NewCredit returns a credit of initial bytes (DefaultWindow when <= 0).
func NewCredit(initial int64) *Credit {
	if initial <= 0 {
		initial = DefaultWindow
	}
	return &Credit{n: initial, notify: make(chan struct{}, 1)}
}

// Add grants n more bytes.
func (c *Credit) Add(n int64) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
	c.poke()
}

// Close ends the stream: waiting and later Takes return ErrCreditClosed.
func (c *Credit) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.poke()
}

func (c *Credit) poke() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Take waits until some credit is available and takes up to want bytes.
func (c *Credit) Take(ctx context.Context, want int) (int, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, ErrCreditClosed
		}
		if c.n > 0 {
			n := min(int64(want), c.n)
			c.n -= n
			c.mu.Unlock()
			return int(n), nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.notify:
		}
	}
}
