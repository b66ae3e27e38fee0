package cortex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// TerminalOptions start a terminal, or attach to one with PID.
type TerminalOptions struct {
	Command    // what to run (default: a login shell)
	Cols, Rows int
	// PID attaches to the running terminal PID instead of starting one,
	// replaying its output from Offset (the number of bytes of it already
	// received: Terminal.Offset of an earlier attachment).
	PID    int
	Offset int64
	// Watch attaches read-only: input and resizes are not sent, and the
	// terminal may have a writer elsewhere.
	Watch bool
}

// Terminal is a terminal in a neuron over a WebSocket: Read its output,
// Write its input. It keeps running when the connection closes, unless
// Kill ends it.
type Terminal struct {
	// PID is the terminal's process id in the neuron (for attaching
	// again); ID its terminal id.
	PID int
	ID  string

	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	offset int64 // of the next output byte
	buf    []byte
	exit   *TermMessage
	err    error
	msgs   chan []byte
	done   chan struct{}

	closeOnce sync.Once
	closeErr  error
	closing   chan struct{} // closed by Close: output is dropped from then
	detached  chan struct{} // closed when the daemon says it let go
}

// Terminal opens a terminal.
func (n *NeuronClient) Terminal(ctx context.Context, o TerminalOptions) (*Terminal, error) {
	q := url.Values{}
	for _, a := range o.Argv {
		q.Add("argv", a)
	}
	for _, e := range o.Env {
		q.Add("env", e)
	}
	if o.Shell != "" {
		q.Set("shell", o.Shell)
	}
	if o.Cwd != "" {
		q.Set("cwd", o.Cwd)
	}
	if o.Cols > 0 {
		q.Set("cols", strconv.Itoa(o.Cols))
	}
	if o.Rows > 0 {
		q.Set("rows", strconv.Itoa(o.Rows))
	}
	if o.PID > 0 {
		q.Set("pid", strconv.Itoa(o.PID))
		q.Set("offset", strconv.FormatInt(o.Offset, 10))
	}
	if o.Watch {
		q.Set("watch", "true")
	}
	u := *n.c.base
	u.Path += n.prefix + "/terminal"
	u.RawQuery = q.Encode()
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	h := http.Header{}
	if n.c.token != "" {
		h.Set("Authorization", "Bearer "+n.c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: n.c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 1 && resp.StatusCode/100 != 2 {
			defer resp.Body.Close()
			resp.Request = &http.Request{Method: "GET", URL: &u}
			return nil, responseError(resp)
		}
		return nil, fmt.Errorf("opening the terminal: %w", err)
	}
	ws.SetReadLimit(4 << 20)
	tctx, cancel := context.WithCancel(context.Background())
	t := &Terminal{ws: ws, ctx: tctx, cancel: cancel, msgs: make(chan []byte, 64), done: make(chan struct{}),
		closing: make(chan struct{}), detached: make(chan struct{})}
	// The first message says which process it is.
	typ, data, err := ws.Read(ctx)
	var m TermMessage
	if err == nil && typ == websocket.MessageText {
		err = json.Unmarshal(data, &m)
	}
	if err != nil || m.Type != "started" {
		ws.CloseNow()
		cancel()
		switch {
		case err == nil && m.Type == "error":
			return nil, APIError{Code: m.Code, Message: m.Message, Status: m.Code.HTTPStatus()}.Typed()
		case err == nil:
			err = fmt.Errorf("the daemon sent %q before the terminal started", m.Type)
		}
		return nil, fmt.Errorf("opening the terminal: %w", err)
	}
	t.PID, t.ID, t.offset = m.PID, m.ID, o.Offset
	go t.readLoop()
	return t, nil
}

// readLoop moves output frames to Read, and keeps the exit message.
func (t *Terminal) readLoop() {
	defer close(t.done)
	defer close(t.msgs)
	// From the first output Close keeps from Read, none after it is
	// delivered or counted either: what Read returns, and Offset counts,
	// stays one unbroken run of the output (a select with both cases
	// ready picks either, so without this some later frames got through
	// after one was dropped, and Offset fell behind what Read returned).
	held := false
	for {
		typ, data, err := t.ws.Read(t.ctx)
		if err != nil {
			t.mu.Lock()
			if t.exit == nil && t.err == nil && websocket.CloseStatus(err) != websocket.StatusNormalClosure && !t.isClosing() {
				t.err = err // not the end of a connection Close ends
			}
			t.mu.Unlock()
			return
		}
		if typ == websocket.MessageBinary {
			// Count only what Read can still return: Offset is where to
			// attach again without losing output.
			if held = held || t.isClosing(); held {
				continue // nobody reads it now; not counted
			}
			select {
			case t.msgs <- data:
				t.mu.Lock()
				t.offset += int64(len(data))
				t.mu.Unlock()
			case <-t.closing:
				held = true
			case <-t.ctx.Done():
				return
			}
			continue
		}
		var m TermMessage
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		t.mu.Lock()
		switch m.Type {
		case "gap":
			// Output before it is gone; after Close, output was not
			// lost but left unread, and nothing more is delivered.
			if held = held || t.isClosing(); !held {
				t.offset = m.Offset
			}
		case "exit":
			t.exit = &m
		case "error":
			t.err = APIError{Code: m.Code, Message: m.Message, Status: m.Code.HTTPStatus()}.Typed()
		case "detached":
			select {
			case <-t.detached: // said twice
			default:
				close(t.detached)
			}
		}
		t.mu.Unlock()
	}
}

// Read reads the terminal's output; io.EOF once it has exited (or the
// connection closed).
func (t *Terminal) Read(p []byte) (int, error) {
	if len(t.buf) == 0 {
		data, ok := <-t.msgs
		if !ok {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.err != nil {
				return 0, t.err
			}
			return 0, io.EOF
		}
		t.buf = data
	}
	n := copy(p, t.buf)
	t.buf = t.buf[n:]
	return n, nil
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.ws.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *Terminal) control(m TermMessage) error {
	b, _ := json.Marshal(m)
	return t.ws.Write(t.ctx, websocket.MessageText, b)
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(cols, rows int) error {
	return t.control(TermMessage{Type: "resize", Cols: cols, Rows: rows})
}

// Kill ends the terminal's process; Wait then returns its exit.
func (t *Terminal) Kill() error { return t.control(TermMessage{Type: "close"}) }

// Offset is how many bytes of the terminal's output this attachment has
// received (counting from the terminal's start): the Offset to attach
// again from without repeating any.
func (t *Terminal) Offset() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.offset
}

// Wait waits until the terminal's process exits and returns its exit
// status and signal. Output must be consumed meanwhile (Read, io.Copy, or
// Discard): Wait does not read it.
func (t *Terminal) Wait() (exitCode int, signal string, err error) {
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil {
		if t.err == nil {
			t.err = fmt.Errorf("the connection closed before the terminal exited")
		}
		return 0, "", t.err
	}
	return t.exit.ExitCode, t.exit.Signal, nil
}

// Discard reads and drops the output from now on (for a caller that only
// waits for the exit).
func (t *Terminal) Discard() {
	go func() {
		for range t.msgs {
		}
	}()
}

// isClosing says whether Close has begun.
func (t *Terminal) isClosing() bool {
	select {
	case <-t.closing:
		return true
	default:
		return false
	}
}

// detachWait bounds how long Close waits for the daemon to let the
// terminal go before it closes the connection regardless.
const detachWait = 5 * time.Second

// Close closes the connection; the terminal keeps running (attach again
// with its PID). It first tells the daemon to let the terminal go and
// waits until it has, so that when Close returns the terminal has no
// writer left of this attachment's: attaching again at once is not
// refused (OWNED_ELSEWHERE). A daemon that does not answer within
// detachWait, or says nothing of it, is closed on regardless.
func (t *Terminal) Close() error {
	t.closeOnce.Do(func() {
		close(t.closing)
		ctx, cancel := context.WithTimeout(t.ctx, detachWait)
		b, _ := json.Marshal(TermMessage{Type: "detach"})
		if t.ws.Write(ctx, websocket.MessageText, b) == nil {
			select {
			case <-t.detached:
				// The daemon closes the connection next.
				select {
				case <-t.done:
				case <-ctx.Done():
				}
			case <-t.done:
			case <-ctx.Done():
			}
		}
		expired := errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		select {
		case <-t.done: // the daemon closed it
			t.ws.CloseNow()
		default:
			if expired { // a daemon that has not answered in detachWait: no second wait
				t.closeErr = t.ws.CloseNow()
			} else {
				t.closeErr = t.ws.Close(websocket.StatusNormalClosure, "")
			}
		}
		t.cancel()
		<-t.done
	})
	return t.closeErr
}
