package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
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
	c, ok := s.connect(w, r)
	if !ok {
		return
	}
	var info *protocol.ProcInfo
	if pid == 0 {
		if info, err = c.PtySpawn(r.Context(), &protocol.PtySpawnArgs{Command: pc, Cols: int(cols), Rows: int(rows)}); err != nil {
			s.fail(w, r, err)
			return
		}
	} else {
		info = &protocol.ProcInfo{PID: int(pid)}
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	send := func(m cortex.TermMessage) error {
		b, _ := json.Marshal(m)
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return ws.Write(wctx, websocket.MessageText, b)
	}
	if err := send(cortex.TermMessage{Type: "started", PID: info.PID}); err != nil {
		return
	}
	// Input and control, until the client goes.
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		defer cancel()
		s.termInput(ctx, ws, c, info.PID)
	}()
	res, err := c.PtyFollow(ctx, info.PID, offset, func(_ string, _ int64, p []byte) error {
		if len(p) == 0 {
			return nil
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return ws.Write(wctx, websocket.MessageBinary, p)
	})
	switch {
	case err == nil:
		m := cortex.TermMessage{Type: "exit"}
		if res.Info != nil {
			m.ExitCode, m.Signal = res.Info.ExitCode, res.Info.Signal
		}
		send(m)
		ws.Close(websocket.StatusNormalClosure, "the terminal's process exited")
	case ctx.Err() != nil: // the client went (or the daemon stops)
		ws.Close(websocket.StatusGoingAway, "")
	default:
		s.noteFailure(r, err)
		ae := apiError(err)
		send(cortex.TermMessage{Type: "error", Code: ae.Code, Message: ae.Message})
		ws.Close(websocket.StatusInternalError, ae.Code)
	}
	cancel()
	<-inputDone
}

// termInput forwards the client's frames: binary is typed into the
// terminal; text is a resize or a close.
func (s *Server) termInput(ctx context.Context, ws *websocket.Conn, c *link.Client, pid int) {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			if err := c.PtyWrite(ctx, pid, data); err != nil {
				return
			}
			continue
		}
		var m cortex.TermMessage
		if err := json.Unmarshal(data, &m); err != nil {
			ws.Close(websocket.StatusUnsupportedData, "a text frame must be a JSON message: "+err.Error())
			return
		}
		switch m.Type {
		case "resize":
			if err := c.PtyResize(ctx, pid, m.Cols, m.Rows); err != nil && !errors.Is(err, context.Canceled) {
				b, _ := json.Marshal(cortex.TermMessage{Type: "error", Code: apiError(err).Code, Message: err.Error()})
				ws.Write(ctx, websocket.MessageText, b)
			}
		case "close":
			c.PtyClose(ctx, pid) // the output stream then ends with the exit
		default:
			ws.Close(websocket.StatusUnsupportedData, "unknown message type "+m.Type+": send resize or close")
			return
		}
	}
}
