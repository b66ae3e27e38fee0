package link

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// EventKind says what happened to a link's agent connection.
type EventKind int

// Link events.
const (
	Connected EventKind = iota + 1
	Disconnected
	// Refused: a peer connected but failed the handshake (wrong neuron,
	// token or protocol version); Err says why.
	Refused
)

func (k EventKind) String() string {
	switch k {
	case Connected:
		return "neuron-connected"
	case Disconnected:
		return "neuron-disconnected"
	case Refused:
		return "agent-refused"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// ConnEvent reports an agent connecting or disconnecting.
type ConnEvent struct {
	Kind   EventKind
	Neuron string
	Peer   protocol.Hello
	Err    error // why it disconnected
}

// Options configure a Link.
type Options struct {
	// Neuron is the id the agent must announce.
	Neuron string
	// Token, when set, must be presented by the agent (a listening link)
	// or is presented to it (a dialling one).
	Token string
	// TokenFunc, when set, gives a dialling link the token to present,
	// asked before every dial: a token that expires (kube mode's pod
	// tokens, internal/podtoken). It takes Token's place.
	TokenFunc func() (string, error)
	// Secret, when set, is the neuron's per-start secret: every agent
	// connection must prove it holds it (see HandshakeOptions.Secret).
	Secret string
	// Software names the host in its hello.
	Software string
	// OnEvent is called (from the link's goroutines, one at a time) when the
	// agent connects or disconnects.
	OnEvent func(ConnEvent)
	// Owner, when set, is given the socket and its directory, for an agent
	// that runs as another user (a sandbox's unprivileged uid).
	Owner *Owner
	// HostView, when set, is a directory of the neuron this host sees too:
	// clients copy large files there directly (see HostView).
	HostView *HostView
	// PassFiles says the agent's Unix socket reaches this host directly,
	// with no relay between that would drop the descriptors it passes:
	// clients then ask it for open files for large copies
	// (protocol.CapPassFiles).
	PassFiles bool
	// DeadAfter, when set, is how long a dialling link's connection may
	// go without a word from the agent's side (TCP's acknowledgements and
	// keepalive probes, which the peer's kernel answers) before it is
	// taken for dead and what is pending on it fails NOT_RUNNING: the
	// channel's heartbeat, for a peer that vanishes without closing (a
	// node lost). See DeadDialer.
	DeadAfter time.Duration
	// DialConn, when set, opens a dialling link's connections to the
	// address its addr function returns, in the TCP dialer's place: a
	// connection carried by something else (kube mode's port-forward
	// through the API server). DeadAfter does not apply to it.
	DialConn func(ctx context.Context, addr string) (net.Conn, error)
	// Activity, when set, is told of every request before it is sent and
	// when it ends (a stream: when it finishes or is closed); a request it
	// fails is not sent. The lifecycle uses it to resume a paused neuron
	// first and to know when one is idle.
	Activity Activity
}

// Activity sees the requests of a link (see Options.Activity).
type Activity interface {
	// Begin is called before a request is sent; end is called once when
	// it is over. An error fails the request unsent.
	Begin(ctx context.Context, cmd protocol.Cmd) (end func(), err error)
}

type quietKey struct{}

// Quiet returns a context whose requests are not activity: they neither
// resume a paused neuron (they fail NOT_RUNNING instead) nor count as use
// of it (an inspection that must not keep it awake).
func Quiet(ctx context.Context) context.Context { return context.WithValue(ctx, quietKey{}, true) }

// IsQuiet reports whether ctx was made by Quiet.
func IsQuiet(ctx context.Context) bool { q, _ := ctx.Value(quietKey{}).(bool); return q }

// Owner is a uid and gid.
type Owner struct {
	UID, GID int
}

// Link is the host end of one neuron's channel in this process: a Unix
// socket it listens on and the agent connection that arrives there. When
// the agent goes away every pending request fails at once with NOT_RUNNING
// and a neuron-disconnected event fires; an agent that connects again is
// taken up, so a restarted agent works without a new Link.
type Link struct {
	ln *net.UnixListener // nil for a dialling link
	// id holds the socket's path and the options; Rebind replaces them.
	id atomic.Pointer[linkID]
	// stopDial ends a dialling link's loop; dialErr is why its last
	// attempt failed.
	stopDial context.CancelFunc
	dialErr  error

	mu     sync.Mutex
	conn   *Conn
	ready  chan struct{} // closed while conn is set
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
	evMu   sync.Mutex // serialises OnEvent calls
}

// Listen creates the socket at path and starts accepting the agent. The
// socket appears under its final name only once it is listening, so an
// agent watching the directory can dial it as soon as it sees it.
//
// The channel directory is bound into the neuron, and a rootless neuron's
// processes share the host user's uid, so nothing here acts by name in
// it: the socket is bound, given its mode and (with Owner) its owner in a
// directory of the host's own beside it, and only then renamed into the
// channel directory (rename replaces, never follows, what is at the
// name). The channel directory stays the host's: 0700, or 0755 with Owner
// (the agent, another uid, must read it), never the agent's to write.
func Listen(path string, o Options) (*Link, error) {
	dir := filepath.Dir(path)
	mode := os.FileMode(0o700)
	if o.Owner != nil {
		mode = 0o755
	}
	// Made when it is not there, and its mode set when it differs only: a
	// chmod is a journalled write of the directory's inode, on every
	// connection of every CLI call.
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, mode); err != nil {
			return nil, fmt.Errorf("channel directory: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil || fi.Mode() != fs.ModeDir|mode {
		if err := os.Chmod(dir, mode); err != nil {
			return nil, fmt.Errorf("channel directory: %w", err)
		}
	}
	makeDoorbell(dir, o.Owner)
	stage, err := stageDir(filepath.Dir(dir))
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(stage, fmt.Sprintf("%d-%x", os.Getpid(), rnd))
	ln, err := protocol.ListenUnix(tmp)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // the socket is renamed; Close removes it by its final name
	fail := func(err error) (*Link, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if o.Owner != nil {
		if err := os.Lchown(tmp, o.Owner.UID, o.Owner.GID); err != nil {
			return fail(fmt.Errorf("giving %s to uid %d: %w", path, o.Owner.UID, err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("placing socket %s: %w", path, err))
	}
	ringAsync(dir)
	l := &Link{ln: ln, ready: make(chan struct{}), done: make(chan struct{})}
	l.id.Store(&linkID{path: path, opts: o})
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// stageDir returns the directory beside the channel directories (in
// parent, the host's) where Listen binds a socket and gives it its mode
// and owner before it renames it into a channel directory: made once, kept
// (a directory made and removed on every call cost a CLI call two
// journalled inode changes, up to half a millisecond here), one per
// effective uid (root's run on a user's home leaves the user's alone),
// and refused unless it is a directory of that uid's that no one else may
// enter.
func stageDir(parent string) (string, error) {
	p := filepath.Join(parent, fmt.Sprintf(".listen-%d", os.Geteuid()))
	if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return "", err
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	if !fi.IsDir() || uid != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory of uid %d that only it may use (%s, uid %d): remove it", p, os.Geteuid(), fi.Mode(), uid)
	}
	return p, nil
}

// linkID is who a link's agent is, and where it listens.
type linkID struct {
	path string
	opts Options
}

// Path returns the socket's path.
func (l *Link) Path() string { return l.id.Load().path }

// options returns the link's options, as Rebind last set them.
func (l *Link) options() *Options { return &l.id.Load().opts }

// Rebind gives the link a new identity: the neuron its agent announces
// and the secret it proves on connections from now on, its events and
// activity; path is where its socket is now (its channel directory was
// renamed). The connection that is up stays: its agent proved itself
// already, and was rebound too (a warm neuron claimed). Options whose
// socket owner differs are not allowed: the socket is not given anew.
func (l *Link) Rebind(path string, o Options) {
	l.id.Store(&linkID{path: path, opts: o})
}

func (l *Link) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				select {
				case <-l.done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			o := l.options()
			c, err := Handshake(nc, HandshakeOptions{Neuron: o.Neuron, Token: o.Token, Secret: o.Secret, Software: o.Software, PassFiles: o.PassFiles})
			if err != nil {
				// Handshake closed it; a refused peer gets nothing more.
				l.emit(ConnEvent{Kind: Refused, Neuron: o.Neuron, Err: err})
				return
			}
			l.install(c)
		}()
	}
}

// install makes c the current connection and watches it. While a live
// connection exists a second one is refused: the agent dials each host
// socket once, so a second caller is a stray or an impostor, and letting it
// in would hand it the channel.
func (l *Link) install(c *Conn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	if cur := l.conn; cur != nil {
		select {
		case <-cur.Done():
			// Ended; its watcher has not cleared it yet. Take the new one.
		default:
			l.mu.Unlock()
			c.Close()
			l.emit(ConnEvent{Kind: Refused, Neuron: l.options().Neuron, Peer: c.peer,
				Err: errors.New("a second connection while the agent's first is still up")})
			return
		}
	}
	l.conn = c
	select {
	case <-l.ready: // already closed for the ended connection
	default:
		close(l.ready)
	}
	l.wg.Add(1)
	l.mu.Unlock()
	l.emit(ConnEvent{Kind: Connected, Neuron: c.peer.Neuron, Peer: c.peer})
	go func() {
		defer l.wg.Done()
		<-c.Done()
		l.mu.Lock()
		if l.conn == c {
			l.conn = nil
			l.ready = make(chan struct{})
		}
		l.mu.Unlock()
		l.emit(ConnEvent{Kind: Disconnected, Neuron: c.peer.Neuron, Peer: c.peer, Err: c.Err()})
	}()
}

func (l *Link) emit(ev ConnEvent) {
	l.evMu.Lock()
	defer l.evMu.Unlock()
	if on := l.options().OnEvent; on != nil {
		on(ev)
	}
}

// Conn returns the current connection, or NOT_RUNNING when no agent is connected.
func (l *Link) Conn() (*Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c == nil {
		return nil, protocol.Errorf(protocol.CodeNotRunning, "the agent of neuron %s is not connected", l.options().Neuron)
	}
	select {
	case <-c.Done(): // ended; the watcher has not cleared it yet
		return nil, c.notRunning()
	default:
	}
	return c, nil
}

// PassFiles reports whether the agent connected now can hand this host open
// files (see Conn.PassFiles).
func (l *Link) PassFiles() bool {
	c, err := l.Conn()
	return err == nil && c.PassFiles()
}

// WaitConnected waits for an agent to connect.
func (l *Link) WaitConnected(ctx context.Context) (*Conn, error) {
	for {
		l.mu.Lock()
		c, ready, closed := l.conn, l.ready, l.closed
		l.mu.Unlock()
		if closed {
			return nil, protocol.Errorf(protocol.CodeNotRunning, "the link of neuron %s is closed", l.options().Neuron)
		}
		if c != nil {
			select {
			case <-c.Done():
				// Ended: wait for the watcher to clear it and a new one to come.
				select {
				case <-l.done:
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Millisecond):
				}
				continue
			default:
				return c, nil
			}
		}
		select {
		case <-ready:
		case <-l.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Call sends a request on the current connection.
func (l *Link) Call(ctx context.Context, req *Request) (*Response, error) {
	end, err := l.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	defer end()
	c, err := l.Conn()
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, req)
}

// Stream sends a streaming request on the current connection.
func (l *Link) Stream(ctx context.Context, req *Request) (*Stream, error) {
	end, err := l.begin(ctx, req)
	if err != nil {
		return nil, err
	}
	c, err := l.Conn()
	if err != nil {
		end()
		return nil, err
	}
	s, err := c.Stream(ctx, req)
	if err != nil {
		end()
		return nil, err
	}
	s.onDone = end
	return s, nil
}

// begin tells the link's Activity of a request.
func (l *Link) begin(ctx context.Context, req *Request) (func(), error) {
	act := l.options().Activity
	if act == nil {
		return func() {}, nil
	}
	select {
	case <-l.done:
		// Let go of: its neuron is not this link's to wake (a resume of
		// a neuron paused to disk starts it on another).
		return nil, protocol.Errorf(protocol.CodeNotRunning, "the link of neuron %s is closed", l.options().Neuron)
	default:
	}
	return act.Begin(ctx, req.Cmd)
}

// Dial returns a Link to an agent that listens (docker's tcp transport):
// it dials the address addr returns, asked again before every attempt,
// with the token in its hello, and dials again whenever the connection
// ends, until Close. Until the agent listens, attempts fail (a published
// port may accept and close at once); the caller bounds the wait with
// WaitConnected's context.
func Dial(addr func(ctx context.Context) (string, error), o Options) *Link {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Link{stopDial: cancel, ready: make(chan struct{}), done: make(chan struct{})}
	l.id.Store(&linkID{path: "tcp", opts: o})
	l.wg.Add(1)
	go l.dialLoop(ctx, addr)
	return l
}

func (l *Link) dialLoop(ctx context.Context, addr func(ctx context.Context) (string, error)) {
	defer l.wg.Done()
	backoff := 10 * time.Millisecond
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
	for ctx.Err() == nil {
		failed := func(err error) {
			l.mu.Lock()
			l.dialErr = err
			l.mu.Unlock()
			pause()
		}
		l.mu.Lock()
		if l.dialErr == nil {
			l.dialErr = errors.New("the agent's address is not known yet (the first attempt has not finished)")
		}
		l.mu.Unlock()
		a, err := addr(ctx)
		if err != nil {
			failed(fmt.Errorf("finding the agent's address: %w", err))
			continue
		}
		o := l.options()
		var nc net.Conn
		if o.DialConn != nil {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			nc, err = o.DialConn(dctx, a)
			cancel()
		} else {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			nc, err = DeadDialer(o.DeadAfter).DialContext(dctx, "tcp", a)
			cancel()
		}
		if err != nil {
			failed(err)
			continue
		}
		token := o.Token
		if o.TokenFunc != nil {
			if token, err = o.TokenFunc(); err != nil {
				nc.Close()
				failed(fmt.Errorf("making the token for %s: %w", a, err))
				continue
			}
		}
		c, err := Handshake(nc, HandshakeOptions{Neuron: o.Neuron, Token: token, Secret: o.Secret, Present: true,
			Software: o.Software, Timeout: 5 * time.Second})
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				err = fmt.Errorf("%s closed the connection at the handshake: the agent is not listening behind it yet, or refused this host's token", a)
			}
			failed(err)
			continue
		}
		l.mu.Lock()
		l.dialErr = nil
		l.mu.Unlock()
		backoff = 10 * time.Millisecond
		l.install(c)
		select {
		case <-c.Done():
		case <-ctx.Done():
		}
	}
}

// DeadDialer returns a dialer whose TCP connections end once the peer
// has not answered for about d: keepalive probes from a second of
// silence on, and (on Linux) TCP_USER_TIMEOUT d, which ends the
// connection when probes or data go unacknowledged that long. d <= 0:
// the system's defaults (minutes).
func DeadDialer(d time.Duration) *net.Dialer {
	if d <= 0 {
		return &net.Dialer{}
	}
	ms := int(d.Milliseconds())
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: max(1, int(d/time.Second))},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = setUserTimeout(int(fd), ms)
			})
			return errors.Join(err, serr)
		},
	}
}

// Dialing reports whether this link dials its agent (instead of listening).
func (l *Link) Dialing() bool { return l.ln == nil }

// DialError returns why a dialling link's last attempt failed (nil while
// connected, and for a listening link).
func (l *Link) DialError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dialErr
}

// Done is closed when the link is closed.
func (l *Link) Done() <-chan struct{} { return l.done }

// Close stops listening (or dialling), removes the socket, ends the
// connection and waits for the link's goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	c := l.conn
	close(l.done)
	l.mu.Unlock()
	var err error
	if l.ln != nil {
		err = l.ln.Close()
		os.Remove(l.Path())
	} else {
		l.stopDial()
	}
	if c != nil {
		c.Close()
	}
	l.wg.Wait()
	return err
}

func tokenEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
