package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/term"
)

// terminal serves a terminal over a WebSocket: a new one (?argv=...,
// ?shell=..., ?cols=&rows=) or, with ?pid=N, an existing one, replayed from
// ?offset=. Binary frames carry input (client to server) and output;
// text frames carry TermMessage JSON. The terminal outlives the socket
// unless the client sends {"type":"close"}.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cols, err := intParam(r, "cols", 80)
	var rows int64
	if err == nil {
		rows, err = intParam(r, "rows", 24)
	}
	if err == nil && (cols < 1 || rows < 1 || cols > 1000 || rows > 1000) {
		err = badRequest("cols and rows: give a size from 1x1 to 1000x1000")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	pid, err := intParam(r, "pid", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	offset, err := intParam(r, "offset", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	var pc protocol.Command
	if pid == 0 {
		argv, shell := q["argv"], q.Get("shell")
		if len(argv) == 0 && shell == "" {
			shell = "exec $(command -v bash || command -v sh) -l" // a login shell
		}
		if pc, err = command(cortex.Command{Argv: argv, Shell: shell, Cwd: q.Get("cwd"), Env: q["env"]}); err != nil {
			writeError(w, err)
			return
		}
	}
	watch, err := boolParam(r, "watch")
	if err != nil {
		writeError(w, err)
		return
	}
	// Nothing starts before the connection is known to be a WebSocket from
	// this origin: a web page may not spawn a shell by loading a URL.
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, badRequest("this route is a WebSocket: connect with a WebSocket client (Upgrade: websocket)"))
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf("a terminal for a page of origin %q is refused", o)})
			return
		}
	}
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	ctx, done := s.streamContext(r)
	defer done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	send := func(m cortex.TermMessage) error {
		b, _ := json.Marshal(m)
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return ws.Write(wctx, websocket.MessageText, b)
	}
	fail := func(err error) {
		s.noteFailure(r, err)
		ae := apiError(err)
		b, _ := json.Marshal(cortex.TermMessage{Type: "error", Code: ae.Code, Message: ae.Message})
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		ws.Write(wctx, websocket.MessageText, b)
		wcancel()
		ws.Close(websocket.StatusInternalError, string(ae.Code))
	}
	var info *protocol.ProcInfo
	if pid == 0 {
		if info, err = c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: pc, Cols: int(cols), Rows: int(rows), Hold: !watch}); err != nil {
			fail(err)
			return
		}
	} else {
		if info, err = findProcess(r.Context(), c, r.PathValue("id"), int(pid)); err == nil && !info.Pty {
			err = badRequest("process %d is not a terminal (its output: GET .../processes/%d/output)", pid, pid)
		}
		if err != nil {
			fail(err)
			return
		}
	}
	var lock *term.WriterLock
	if !watch && s.opts.TermLocks != "" {
		if lock, err = term.LockWriter(s.opts.TermLocks, r.PathValue("id"), info.ID); err != nil {
			fail(err) // another writer holds it: OWNED_ELSEWHERE, by its class
			return
		}
		defer lock.Release()
	}
	if err := send(cortex.TermMessage{Type: "started", PID: info.PID, ID: info.ID}); err != nil {
		return
	}
	// Input and control, until the client goes.
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		err := s.termInput(ctx, ws, c, info.PID, watch, lock)
		cancel(err)
	}()
	res, err := c.PtyFollow(ctx, info.PID, offset, !watch, func(stream string, off int64, p []byte) error {
		if strings.HasPrefix(stream, protocol.StreamGap) {
			return send(cortex.TermMessage{Type: "gap", Offset: off})
		}
		if len(p) == 0 {
			return nil
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return ws.Write(wctx, websocket.MessageBinary, p)
	})
	switch cause := context.Cause(ctx); {
	case err == nil:
		m := cortex.TermMessage{Type: "exit"}
		if res.Info != nil {
			m.ExitCode, m.Signal = res.Info.ExitCode, res.Info.Signal
		}
		send(m)
		ws.Close(websocket.StatusNormalClosure, "the terminal's process exited")
	case ctx.Err() != nil && errors.Is(cause, errInputFailed):
		fail(cause)
	case ctx.Err() != nil && errors.Is(cause, errStopping):
		fail(errStopping)
	case ctx.Err() != nil && errors.Is(cause, errDetached):
		ws.Close(websocket.StatusNormalClosure, "detached")
	case ctx.Err() != nil: // the client went
		ws.Close(websocket.StatusGoingAway, "")
	default:
		fail(err)
	}
	cancel(nil)
	<-inputDone
}

// errInputFailed wraps a failure to deliver the client's input.
var errInputFailed = errors.New("the terminal did not take the input")

// errDetached: the client let the terminal go ("detach"), and was told.
var errDetached = errors.New("the client detached")

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// termInput forwards the client's frames: binary is typed into the
// terminal (not for a watcher); text is a resize, a close or a detach. It
// returns why it stopped (nil: the client went). A detach releases lock
// (the writer's; nil for a watcher) before it answers "detached", so a
// client that waits for that answer may attach again at once: the close
// handshake alone would tell it the connection is gone before the
// handler has let the lock go.
func (s *Server) termInput(ctx context.Context, ws *websocket.Conn, c *link.Client, pid int, watch bool, lock *term.WriterLock) error {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return nil
		}
		if typ == websocket.MessageBinary {
			if watch {
				continue // a watcher's keys go nowhere
			}
			if err := c.PtyWrite(ctx, pid, data); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%w: %w", errInputFailed, err)
			}
			continue
		}
		var m cortex.TermMessage
		if err := json.Unmarshal(data, &m); err != nil {
			ws.Close(websocket.StatusUnsupportedData, "a text frame must be a JSON message: "+err.Error())
			return nil
		}
		switch {
		case m.Type == "resize" && !watch:
			if err := c.PtyResize(ctx, pid, m.Cols, m.Rows); err != nil && ctx.Err() == nil {
				b, _ := json.Marshal(cortex.TermMessage{Type: "error", Code: apiError(err).Code, Message: err.Error()})
				ws.Write(ctx, websocket.MessageText, b)
			}
		case m.Type == "close" && !watch:
			c.PtyClose(ctx, pid) // the output stream then ends with the exit
		case m.Type == "resize" || m.Type == "close":
			// a watcher does not steer the terminal
		case m.Type == "detach":
			lock.Release()
			b, _ := json.Marshal(cortex.TermMessage{Type: "detached"})
			ws.Write(ctx, websocket.MessageText, b)
			return errDetached
		default:
			ws.Close(websocket.StatusUnsupportedData, "unknown message type "+m.Type+": send resize, close or detach")
			return nil
		}
	}
}
