package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	var req cortex.StartRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	pc, err := command(req.Command)
	if err != nil {
		return nil, err
	}
	if req.RingBytes < 0 || req.RingBytes > protocol.MaxRingBytes {
		return nil, badRequest("ringBytes: %d; give 0 (the default, %d) up to %d", req.RingBytes, protocol.DefaultRingBytes, protocol.MaxRingBytes)
	}
	return func(c *link.Client) (int, any, error) {
		info, err := c.ProcStart(r.Context(), &protocol.ProcStartArgs{Command: pc, Stdin: req.Stdin, RingBytes: req.RingBytes})
		return http.StatusCreated, info, err
	}, nil
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	return func(c *link.Client) (int, any, error) {
		list, err := c.ProcList(r.Context())
		if list == nil {
			list = []protocol.ProcInfo{}
		}
		return http.StatusOK, struct {
			Processes []protocol.ProcInfo `json:"processes"`
		}{list}, err
	}, nil
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	pid, err := pidParam(r)
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		p, err := findProcess(r.Context(), c, r.PathValue("id"), pid)
		return http.StatusOK, p, err
	}, nil
}

// processOutput streams a process's output as SSE: what its replay buffer
// holds from the offsets asked, then (follow, the default) what comes,
// until it exits; the last event is "end" with the process's state.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	pid, err := pidParam(r)
	if err != nil {
		return nil, err
	}
	args := &protocol.ProcAttachArgs{PID: pid, Follow: true}
	if args.StdoutOffset, err = intParam(r, "stdoutOffset", 0); err == nil {
		args.StderrOffset, err = intParam(r, "stderrOffset", 0)
	}
	if err == nil && r.URL.Query().Get("follow") != "" {
		args.Follow, err = boolParam(r, "follow")
	}
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		// An unknown process is a plain error answer; after this check the
		// stream starts at once (a quiet process may say nothing for long).
		if err := s.asTerminal(r.Context(), c, r.PathValue("id"), pid, gate.TerminalOpen, "GET process output"); err != nil {
			return 0, nil, err
		}
		s.streamOutput(w, r, c, args)
		return 0, nil, nil
	}, nil
}

// streamOutput answers a process's output, from args, as SSE.
func (s *Server) streamOutput(w http.ResponseWriter, r *http.Request, c *link.Client, args *protocol.ProcAttachArgs) {
	sse, ok := newSSE(w)
	if !ok {
		return
	}
	ctx, done := s.streamContext(r)
	defer done()
	info, err := c.ProcAttach(ctx, args, func(stream string, off int64, p []byte) error {
		if g, isGap := strings.CutPrefix(stream, protocol.StreamGap+":"); isGap {
			return sse.event("gap", cortex.Gap{Stream: g, To: off})
		}
		return sse.event(stream, cortex.EncodeChunk(off, p))
	})
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx) // the client went, or the daemon stops
		}
		s.noteFailure(r, err)
		sse.fail(err)
		return
	}
	sse.event("end", info)
}

// findProcess returns the state of process pid of neuron id.
func findProcess(ctx context.Context, c *link.Client, id string, pid int) (*protocol.ProcInfo, error) {
	list, err := c.ProcList(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].PID == pid {
			return &list[i], nil
		}
	}
	return nil, cortex.APIError{Code: cortex.CodeNotFound, Message: fmt.Sprintf("no process %d in neuron %s (GET .../processes lists them)", pid, id)}
}

// asTerminal asks the gate for action as well when process pid is a
// terminal: the process routes must not give a terminal's output, input
// or signals to a key without the terminals scope.
func (s *Server) asTerminal(ctx context.Context, c *link.Client, id string, pid int, action gate.Action, detail string) error {
	p, err := findProcess(ctx, c, id, pid)
	if err != nil || !p.Pty {
		return err
	}
	return s.allow(ctx, id, action, detail+" (a terminal)")
}

func (s *Server) processInput(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	pid, err := pidParam(r)
	if err != nil {
		return nil, err
	}
	eof, err := boolParam(r, "eof")
	if err != nil {
		return nil, err
	}
	// Only a type no web form can send (a cross-site page cannot type
	// into a process without a CORS preflight, which is never granted).
	if ct := r.Header.Get("Content-Type"); !isMediaType(ct, "application/octet-stream") {
		return nil, badRequest("the input must be sent as Content-Type: application/octet-stream, not %q", ct)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInputBody))
	if err != nil {
		return nil, err
	}
	return func(c *link.Client) (int, any, error) {
		if err := s.asTerminal(r.Context(), c, r.PathValue("id"), pid, gate.TerminalInput, "POST process input"); err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, c.ProcInput(r.Context(), pid, data, eof)
	}, nil
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	pid, err := pidParam(r)
	if err != nil {
		return nil, err
	}
	var req cortex.SignalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	if req.Signal == "" {
		return nil, badRequest("signal: name one, e.g. TERM, KILL, INT or HUP")
	}
	return func(c *link.Client) (int, any, error) {
		if err := s.asTerminal(r.Context(), c, r.PathValue("id"), pid, gate.TerminalControl, "POST process signal"); err != nil {
			return 0, nil, err
		}
		return http.StatusNoContent, nil, c.ProcSignal(r.Context(), pid, req.Signal)
	}, nil
}
