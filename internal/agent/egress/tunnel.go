package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// A tunnel carries a VM neuron's proxy connections to the host over one
// byte stream, a virtio-serial port. The guest has no network device: its
// programs connect to a listener of the guest's PID 1 on its loopback, and
// each connection there becomes a stream of a yamux session over the port.
// The host's end hands every stream to a Proxy, which decides exactly as
// it does for an nsbox neuron: the guest only carries bytes, the host
// enforces.
//
// The port outlives sessions: a VM restored from a snapshot resumes in the
// middle of the session it had with a host process that is gone, and the
// new one knows nothing of it. So a session starts with a handshake both
// ends can find in whatever bytes come before it: the guest writes a line
// of tunnelHello and a nonce, the host answers with tunnelReady and the
// same nonce, and yamux starts right after each line. An end whose session
// fails goes back to looking for a handshake line.
const (
	tunnelHello = "nsys-cortex egress hello v1 "
	tunnelReady = "nsys-cortex egress ready v1 "
	nonceLen    = 16 // hex digits
	maxLine     = 128
)

// helloRetry is how long the guest waits for the host's answer before it
// says hello again (the host missed it: it was still in a session the
// guest had given up).
var helloRetry = 3 * time.Second

// What the host's end of a tunnel holds for a guest, which may be hostile:
// a stream its proxy is done with is read and dropped until the guest
// closes it too, or for drainFor at most (then yamux resets it); a
// session with more than the proxy's connections and maxHalfClosed
// streams open is ended (the guest says hello again); streams the proxy
// has not taken yet wait in a backlog of acceptBacklog, past which yamux
// resets them (the neuron's program reads EOF), so it must hold a burst
// of a program's parallel connections while the proxy's accept loop is
// slow to run (16 reset some of 20 at once under load). So a guest holds
// at most that many receive windows (256 KiB each) of the host's memory.
const (
	drainFor      = 15 * time.Second
	maxHalfClosed = 256
	acceptBacklog = 128
)

// hostTunnelConfig is yamux's configuration at the host's end.
func hostTunnelConfig() *yamux.Config {
	c := tunnelConfig()
	c.AcceptBacklog = acceptBacklog
	c.StreamCloseTimeout = drainFor
	return c
}

// drainingListener is a session's streams as the proxy takes them: a
// stream the proxy closes is drained (drainingConn), and a session that
// holds too many streams open is ended.
type drainingListener struct {
	sess   *yamux.Session
	max    int
	drains sync.WaitGroup
}

func (l *drainingListener) Accept() (net.Conn, error) {
	st, err := l.sess.AcceptStream()
	if err != nil {
		return nil, err
	}
	if l.sess.NumStreams() > l.max {
		st.Close()
		l.sess.GoAway() // the guest opens no more streams on it, and starts another
		l.sess.Close()  // its guest holds streams open the proxy is done with
		return nil, fmt.Errorf("egress tunnel: the guest holds more than %d streams open: its session is ended", l.max)
	}
	return &drainingConn{Stream: st, drains: &l.drains}, nil
}

func (l *drainingListener) Close() error   { return l.sess.Close() }
func (l *drainingListener) Addr() net.Addr { return l.sess.Addr() }

// drainingConn is a stream whose Close also reads and drops what the
// guest still sends, so that the receive window it holds is not kept
// full in the host's memory until the guest closes its side.
type drainingConn struct {
	*yamux.Stream
	drains *sync.WaitGroup
	once   sync.Once
}

func (c *drainingConn) Close() error {
	err := c.Stream.Close() // a half-close: yamux ends it when the guest does, or at drainFor
	c.once.Do(func() {
		c.drains.Add(1)
		go func() {
			defer c.drains.Done()
			c.Stream.SetReadDeadline(time.Now().Add(drainFor))
			var buf [4 << 10]byte
			for {
				_, err := c.Stream.Read(buf[:])
				c.Stream.Shrink() // yamux keeps a frame's buffer once read: let it go
				if err != nil {
					return
				}
			}
		}()
	})
	return err
}

// tunnelConfig is yamux's configuration at both ends. No keepalives: a VM
// paused for a snapshot misses them, and the end of the stream is seen
// anyway (the VMM's exit closes it).
func tunnelConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamOpenTimeout = 30 * time.Second
	c.LogOutput = io.Discard
	return c
}

// wire is one end of the stream. Its reader goroutine either looks for a
// handshake line or feeds the current session; writes, from the handshake
// and the session, go one at a time.
type wire struct {
	rw io.ReadWriter
	// onLine is told each handshake line, by the reader; the session it
	// returns gets the bytes after the line (nil: keep looking).
	onLine func(w *wire, line string) *sessionConn

	wmu sync.Mutex

	done chan struct{} // closed when the stream ended
	err  error         // why, once done is closed
}

func newWire(rw io.ReadWriter, onLine func(*wire, string) *sessionConn) *wire {
	w := &wire{rw: rw, onLine: onLine, done: make(chan struct{})}
	go w.read()
	return w
}

// read owns reading the stream, until it ends.
func (w *wire) read() {
	buf := make([]byte, 64<<10)
	var line []byte
	var session *sessionConn
	for {
		n, err := w.rw.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			if session != nil {
				n, ok := session.feed(data)
				if ok {
					break
				}
				// The session ended: what it did not take may hold the
				// next handshake.
				session, data = nil, data[n:]
				continue
			}
			// Bytes before a handshake line are the remains of a session
			// that ended, and are dropped.
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				line = appendTail(line, data)
				break
			}
			line = appendTail(line, data[:i])
			data = data[i+1:]
			if l := handshakeLine(line); l != "" {
				session = w.onLine(w, l)
			}
			line = line[:0]
		}
		if err != nil {
			if session != nil {
				session.end(err)
			}
			w.err = err
			close(w.done)
			return
		}
	}
}

// handshakeLine is the handshake at the end of line, if there is one
// (bytes before it are a session's remains).
func handshakeLine(line []byte) string {
	i := max(bytes.LastIndex(line, []byte(tunnelHello)), bytes.LastIndex(line, []byte(tunnelReady)))
	if i < 0 {
		return ""
	}
	return string(line[i:])
}

// appendTail appends b to line, keeping at most a handshake line's worth.
func appendTail(line, b []byte) []byte {
	line = append(line, b...)
	if len(line) > maxLine {
		line = append(line[:0], line[len(line)-maxLine:]...)
	}
	return line
}

func (w *wire) write(b []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.rw.Write(b)
}

// newSession is a session's view of the stream.
func (w *wire) newSession() *sessionConn {
	pr, pw := io.Pipe()
	return &sessionConn{w: w, pr: pr, pw: pw}
}

// sessionConn is the stream as one yamux session sees it: it reads what
// the reader fed it, and once closed it neither reads nor writes, so a
// session that ended cannot write into the next one's bytes.
type sessionConn struct {
	w      *wire
	pr     *io.PipeReader
	pw     *io.PipeWriter
	mu     sync.Mutex
	closed bool
}

// feed hands data to the session: false, and how much it took, when the
// session has ended.
func (s *sessionConn) feed(data []byte) (int, bool) {
	n, err := s.pw.Write(data)
	return n, err == nil
}

// end tells the session the stream ended.
func (s *sessionConn) end(err error) { s.pw.CloseWithError(err) }

func (s *sessionConn) Read(b []byte) (int, error) { return s.pr.Read(b) }

func (s *sessionConn) Write(b []byte) (int, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, io.ErrClosedPipe
	}
	return s.w.write(b)
}

func (s *sessionConn) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.pr.Close()
}

// ServeTunnel is the host's end of a VM neuron's tunnel on rw: it answers
// each session the guest starts and serves the proxy on every stream of
// it. It returns when rw ends (the VMM is gone: nil on EOF) or ctx does,
// with every connection it served closed.
func (p *Proxy) ServeTunnel(ctx context.Context, rw io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	w := newWire(rw, func(w *wire, line string) *sessionConn {
		nonce, ok := strings.CutPrefix(line, tunnelHello)
		if !ok || !validNonce(nonce) {
			return nil
		}
		s := w.newSession()
		if _, err := w.write([]byte(tunnelReady + nonce + "\n")); err != nil {
			return nil
		}
		sess, err := yamux.Server(s, hostTunnelConfig())
		if err != nil {
			s.Close()
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ln := &drainingListener{sess: sess, max: p.maxConns() + maxHalfClosed}
			p.Serve(ctx, ln) // ends with the session, or with ctx
			sess.Close()
			ln.drains.Wait() // each ends with its stream: the session's end
		}()
		return s
	})
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	cancel()
	rw.Close()
	<-w.done
	wg.Wait()
	if errors.Is(w.err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return w.err
}

func validNonce(s string) bool {
	if len(s) != nonceLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// GuestTunnel is the guest's end of the tunnel: it carries each
// connection its listener accepts as a stream to the host's proxy.
type GuestTunnel struct {
	// Logf, when set, is told what goes wrong.
	Logf func(format string, args ...any)

	hs sync.Mutex // one handshake at a time

	mu      sync.Mutex
	w       *wire
	sess    *yamux.Session
	want    string // the nonce of the hello awaiting an answer
	answers chan *sessionConn
}

// Attach makes rw the tunnel's stream (again, after it ended: a virtio
// port reaches EOF while no host is connected). It returns a channel
// closed when rw ends.
func (t *GuestTunnel) Attach(rw io.ReadWriter) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess != nil {
		t.sess.Close()
		t.sess = nil
	}
	w := newWire(rw, t.answered)
	t.w = w
	return w.done
}

// answered takes the host's answer to the hello awaiting one.
func (t *GuestTunnel) answered(w *wire, line string) *sessionConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != w || t.want == "" || line != tunnelReady+t.want {
		return nil
	}
	t.want = ""
	s := w.newSession()
	t.answers <- s // buffered: one hello awaits at a time
	return s
}

// Reset ends the current session: the next connection starts a new one.
// After a snapshot is restored the host's end is a new process that never
// knew the session the guest resumed in.
func (t *GuestTunnel) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess != nil {
		t.sess.Close()
		t.sess = nil
	}
}

// session returns the current session, starting one when there is none.
func (t *GuestTunnel) session(ctx context.Context) (*yamux.Session, error) {
	t.hs.Lock()
	defer t.hs.Unlock()
	t.mu.Lock()
	sess, w := t.sess, t.w
	t.mu.Unlock()
	if sess != nil && !sess.IsClosed() {
		return sess, nil
	}
	if w == nil {
		return nil, errors.New("egress tunnel: no stream to the host")
	}
	for {
		var b [nonceLen / 2]byte
		rand.Read(b[:])
		nonce := hex.EncodeToString(b[:])
		answers := make(chan *sessionConn, 1)
		t.mu.Lock()
		t.want, t.answers = nonce, answers
		t.mu.Unlock()
		if _, err := w.write([]byte(tunnelHello + nonce + "\n")); err != nil {
			return nil, fmt.Errorf("egress tunnel: %w", err)
		}
		timer := time.NewTimer(helloRetry)
		select {
		case s := <-answers:
			timer.Stop()
			return t.start(w, s)
		case <-timer.C:
			// An answer may have come as the timer fired (answered
			// hands it over under t.mu): take it rather than leave the
			// reader feeding a session nobody reads.
			if s := t.giveUp(answers); s != nil {
				return t.start(w, s)
			}
			if t.Logf != nil {
				t.Logf("egress tunnel: no answer from the host in %s; saying hello again", helloRetry)
			}
		case <-w.done:
			timer.Stop()
			if s := t.giveUp(answers); s != nil {
				s.Close()
			}
			return nil, fmt.Errorf("egress tunnel: the stream to the host ended: %v", w.err)
		case <-ctx.Done():
			timer.Stop()
			if s := t.giveUp(answers); s != nil {
				s.Close() // the reader goes back to looking for a handshake
			}
			return nil, ctx.Err()
		}
	}
}

// giveUp stops waiting for the answer to the hello in flight, and returns
// one that came all the same (nil: none did, and none will be taken).
func (t *GuestTunnel) giveUp(answers chan *sessionConn) *sessionConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = ""
	select {
	case s := <-answers:
		return s
	default:
		return nil
	}
}

// start starts the session the host answered on w with s.
func (t *GuestTunnel) start(w *wire, s *sessionConn) (*yamux.Session, error) {
	sess, err := yamux.Client(s, tunnelConfig())
	if err != nil {
		s.Close()
		return nil, err
	}
	t.mu.Lock()
	current := t.w == w
	if current {
		t.sess = sess
	}
	t.mu.Unlock()
	if !current {
		sess.Close()
		return nil, errors.New("egress tunnel: the stream to the host was replaced")
	}
	return sess, nil
}

// drop ends sess when it is still the current session.
func (t *GuestTunnel) drop(sess *yamux.Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess == sess {
		t.sess = nil
	}
	sess.Close()
}

// Detach lets go of the stream Attach gave when it is still the
// tunnel's (the host's request ended): connections are answered 502 at
// once, and nothing more is written to it.
func (t *GuestTunnel) Detach(done <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w == nil || t.w.done != done {
		return
	}
	t.w = nil
	t.want = ""
	if t.sess != nil {
		t.sess.Close()
		t.sess = nil
	}
}

// Serve carries each connection ln accepts to the host's proxy, until ln
// fails or ctx ends; connections still open then are closed.
func (t *GuestTunnel) Serve(ctx context.Context, ln net.Listener) error {
	return ServeConns(ctx, ln, t.carry)
}

// carry joins one local connection to a new stream, both ways, with
// half-closes passed on.
func (t *GuestTunnel) carry(ctx context.Context, c net.Conn) {
	defer c.Close()
	sess, err := t.session(ctx)
	if err == nil {
		var st net.Conn
		if st, err = sess.Open(); err != nil {
			t.drop(sess) // the host ended it (or it failed): the next connection starts another
			err = fmt.Errorf("egress tunnel: %w", err)
		} else {
			defer st.Close()
			stop := context.AfterFunc(ctx, func() { c.Close(); st.Close() })
			defer stop()
			done := make(chan struct{})
			go func() {
				defer close(done)
				io.Copy(st, c)
				st.Close() // yamux: a half-close, the reply still comes
			}()
			io.Copy(c, st)
			closeWrite(c)
			// The far side is done: the program gets a while to finish.
			c.SetReadDeadline(time.Now().Add(defaultLinger / 4))
			<-done
			return
		}
	}
	if t.Logf != nil {
		t.Logf("%v", err)
	}
	// The answer goes after the request, which a client sends first.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(io.LimitReader(c, maxRequestHead))
	for {
		l, err := br.ReadString('\n')
		if err != nil || strings.TrimRight(l, "\r\n") == "" {
			break
		}
	}
	c.Write([]byte(response(502, "destination_unavailable", "the neuron's way to the host's egress proxy is down: "+err.Error())))
}
