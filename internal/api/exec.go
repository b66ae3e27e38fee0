package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// connect returns the client of the request's neuron, or answers the error.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) (*link.Client, bool) {
	c, err := s.client(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return c, true
}

// neuronCall is a route's work on the request's neuron, run on its
// client: it returns the answer, out as JSON with status (no body when out
// is nil). A call that streams writes its answer itself and returns
// status 0.
type neuronCall func(c *link.Client) (status int, out any, err error)

// onNeuron adapts a route on a running neuron: prepare reads and checks
// the request (its error is answered before the neuron is connected to)
// and returns the call; the call runs on the neuron's client, and its
// answer, or its error through the one table, is written. A neuron found
// stopped is forgotten.
func (s *Server) onNeuron(prepare func(w http.ResponseWriter, r *http.Request) (neuronCall, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		call, err := prepare(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		c, ok := s.connect(w, r)
		if !ok {
			return
		}
		status, out, err := call(c)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case status == 0: // answered by the call
		case out == nil:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, out)
		}
	}
}

// fail answers err; a neuron that stopped is forgotten.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.noteFailure(r, err)
	writeError(w, err)
}

func (s *Server) noteFailure(r *http.Request, err error) {
	if errdefs.IsNotRunning(err) {
		s.forget(r.PathValue("id"))
	}
}

// command checks a command's shape.
func command(c cortex.Command) (protocol.Command, error) {
	pc := protocol.Command{Argv: c.Argv, Shell: c.Shell, Cwd: c.Cwd, Env: c.Env}
	if err := pc.Validate(); err != nil {
		return pc, badRequest("%v", err)
	}
	return pc, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	stream, err := boolParam(r, "stream")
	if err != nil {
		return nil, err
	}
	var req cortex.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, err
	}
	pc, err := command(req.Command)
	if err != nil {
		return nil, err
	}
	lr := &link.ExecRequest{Command: pc, MaxOutput: req.MaxOutput}
	switch {
	case req.TimeoutMs == -1:
		lr.Timeout = link.NoTimeout
	case req.TimeoutMs < 0:
		return nil, badRequest("timeoutMs: %d; give a positive number of milliseconds, 0 for the default (30000) or -1 for none", req.TimeoutMs)
	default:
		lr.Timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	if req.MaxOutput < 0 {
		return nil, badRequest("maxOutput: %d is negative", req.MaxOutput)
	}
	switch {
	case req.Stdin != "" && req.StdinBase64 != "":
		return nil, badRequest("give stdin or stdinBase64, not both")
	case req.StdinBase64 != "":
		in, err := base64.StdEncoding.DecodeString(req.StdinBase64)
		if err != nil {
			return nil, badRequest("stdinBase64: %v", err)
		}
		lr.Stdin = bytes.NewReader(in)
	case req.Stdin != "":
		lr.Stdin = bytes.NewReader([]byte(req.Stdin))
	}
	if !stream {
		return func(c *link.Client) (int, any, error) {
			res, err := c.Exec(r.Context(), lr)
			if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, execResult(res, res.Stdout, res.Stderr), nil
		}, nil
	}
	return func(c *link.Client) (int, any, error) {
		sse, ok := newSSE(w)
		if !ok {
			return 0, nil, nil
		}
		lr.Stdout = sse.output("stdout")
		lr.Stderr = sse.output("stderr")
		res, err := c.Exec(r.Context(), lr)
		if err != nil {
			s.noteFailure(r, err)
			sse.fail(err)
			return 0, nil, nil
		}
		sse.event("exit", execResult(res, nil, nil))
		return 0, nil, nil
	}, nil
}

func execResult(res *link.ExecResult, stdout, stderr []byte) cortex.ExecResult {
	out := cortex.ExecResult{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		DurationMs: res.Duration().Milliseconds()}
	out.Stdout, out.StdoutBase64 = cortex.Encoded(stdout)
	out.Stderr, out.StderrBase64 = cortex.Encoded(stderr)
	return out
}

// sseWriter writes Server-Sent Events, one at a time, each flushed.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	id int64
}

func newSSE(w http.ResponseWriter) (*sseWriter, bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	if err := s.rc.Flush(); err != nil {
		return nil, false
	}
	return s, true
}

// event sends one event whose data is v as JSON.
func (s *sseWriter) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id++
	if _, err := fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", s.id, name, data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// fail ends the stream with an error event.
func (s *sseWriter) fail(err error) {
	ae := apiError(err)
	s.event("error", cortex.APIError{Code: ae.Code, Message: ae.Message})
}

// output returns a writer that sends what it is given as events.
func (s *sseWriter) output(stream string) *sseOutput { return &sseOutput{s: s, stream: stream} }

type sseOutput struct {
	s      *sseWriter
	stream string
	off    int64
}

func (o *sseOutput) Write(p []byte) (int, error) {
	if err := o.s.event(o.stream, cortex.EncodeChunk(o.off, p)); err != nil {
		return 0, err
	}
	o.off += int64(len(p))
	return len(p), nil
}

// pidParam reads the {pid} path value.
func pidParam(r *http.Request) (int, error) {
	v := r.PathValue("pid")
	pid, err := strconv.Atoi(v)
	if err != nil || pid <= 0 {
		return 0, badRequest("process id %q: give the pid the process was started with", v)
	}
	return pid, nil
}
