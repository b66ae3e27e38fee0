package link

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Caller sends requests to an agent: a *Conn, or a *Link (which uses its
// current connection).
type Caller interface {
	Call(ctx context.Context, req *Request) (*Response, error)
	Stream(ctx context.Context, req *Request) (*Stream, error)
}

// Client is the typed API of the channel: one method per command.
type Client struct {
	c Caller
	// view, when set, lets large files under it be copied by the host
	// directly (see HostView).
	view *HostView
}

// NewClient returns a Client that sends through c.
func NewClient(c Caller) *Client { return &Client{c: c} }

// Client returns a typed client for the link.
func (l *Link) Client() *Client { return &Client{c: l, view: l.options().HostView} }

// Closed reports whether the client's link was closed: its neuron was
// destroyed (a restore or a restart replaces it), or this process let go
// of it. A new Connect gives a working client then; a closed one answers
// every request NOT_RUNNING. A client over one connection never reports
// closed (its requests fail once that connection ends).
func (c *Client) Closed() bool {
	l, ok := c.c.(*Link)
	if !ok {
		return false
	}
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// call sends a request and decodes its result into out (which may be nil).
func (c *Client) call(ctx context.Context, cmd protocol.Cmd, args any, body []byte, out any) (*Response, error) {
	resp, err := c.c.Call(ctx, &Request{Cmd: cmd, Args: args, Body: body})
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := resp.Decode(out); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// execGrace is how much longer than a command's own timeout the host waits
// for the agent to report it timed out.
const execGrace = 5 * time.Second

// ExecRequest runs a command to completion.
type ExecRequest struct {
	protocol.Command
	// Stdin, when set, is the command's input; otherwise it reads /dev/null.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive output as it comes; output not
	// sent to a writer is returned in the result (up to MaxOutput).
	Stdout, Stderr io.Writer
	// Timeout kills the command's process group after this long. 0 means
	// DefaultTimeout; NoTimeout means only ctx bounds the command.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr kept in the result.
	MaxOutput int64
}

// ExecResult is how a command ended, with the output not streamed to writers.
type ExecResult struct {
	protocol.ExecResult
	Stdout []byte
	Stderr []byte
}

// Exec runs a command. A non-zero exit status is a result, not an error;
// errors are failures to run it at all (NOT_RUNNING, BAD_REQUEST, ...).
func (c *Client) Exec(ctx context.Context, r *ExecRequest) (*ExecResult, error) {
	args := protocol.ExecArgs{Command: r.Command, MaxOutput: r.MaxOutput}
	req := &Request{Cmd: protocol.CmdExec, Args: &args, Timeout: NoTimeout}
	switch {
	case r.Timeout == 0:
		args.TimeoutMs = DefaultTimeout.Milliseconds()
		req.Timeout = DefaultTimeout + execGrace
	case r.Timeout > 0:
		args.TimeoutMs = max(1, r.Timeout.Milliseconds())
		req.Timeout = r.Timeout + execGrace
	}
	var stdinStream io.Reader
	if r.Stdin != nil {
		if small, ok := smallInput(r.Stdin); ok {
			args.Stdin, req.Body = protocol.StdinBody, small
		} else {
			args.Stdin, stdinStream = protocol.StdinStream, r.Stdin
		}
	}
	if r.Stdout == nil && r.Stderr == nil && stdinStream == nil {
		resp, err := c.c.Call(ctx, req)
		if err != nil {
			return nil, err
		}
		res := &ExecResult{}
		if err := resp.Decode(&res.ExecResult); err != nil {
			return nil, err
		}
		if res.StdoutLen < 0 || res.StderrLen < 0 || res.StdoutLen+res.StderrLen != int64(len(resp.Body)) {
			return nil, protocol.Errorf(protocol.CodeInternal, "exec: agent reported %d+%d output bytes but sent %d",
				res.StdoutLen, res.StderrLen, len(resp.Body))
		}
		res.Stdout, res.Stderr = resp.Body[:res.StdoutLen], resp.Body[res.StdoutLen:]
		return res, nil
	}
	args.Stream = true
	return c.execStream(ctx, req, r, stdinStream)
}

// smallInput reads a reader that knows its length when it fits in one frame.
func smallInput(r io.Reader) ([]byte, bool) {
	l, ok := r.(interface{ Len() int })
	if !ok || l.Len() > protocol.ChunkSize {
		return nil, false
	}
	b, err := io.ReadAll(r)
	return b, err == nil
}

func (c *Client) execStream(ctx context.Context, req *Request, r *ExecRequest, stdin io.Reader) (*ExecResult, error) {
	s, err := c.c.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if stdin != nil {
		// The pump ends when the input ends or the command finishes; a Read
		// that blocks forever (a terminal nobody types into) is left to end
		// with its reader.
		go pumpStdin(s, stdin)
	}
	limit := r.MaxOutput
	if limit <= 0 {
		limit = protocol.DefaultMaxOutput
	}
	var outBuf, errBuf capBuffer
	outBuf.limit, errBuf.limit = limit, limit
	var stdout, stderr io.Writer = &outBuf, &errBuf
	if r.Stdout != nil {
		stdout = r.Stdout
	}
	if r.Stderr != nil {
		stderr = r.Stderr
	}
	var writeErr error
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		w := stdout
		if ev.Stream == protocol.StreamStderr {
			w = stderr
		}
		if _, err := w.Write(ev.Body); err != nil && writeErr == nil {
			writeErr = err // keep reading: the command must not block on its output
		}
	}
	resp, err := s.Result()
	if err != nil {
		return nil, err
	}
	res := &ExecResult{Stdout: outBuf.Bytes(), Stderr: errBuf.Bytes()}
	if err := resp.Decode(&res.ExecResult); err != nil {
		return nil, err
	}
	res.StdoutTruncated = res.StdoutTruncated || outBuf.truncated
	res.StderrTruncated = res.StderrTruncated || errBuf.truncated
	return res, writeErr
}

func pumpStdin(s *Stream, r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if s.Send(buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			s.CloseSend()
			return
		}
	}
}

// capBuffer keeps the first limit bytes written to it.
type capBuffer struct {
	bytes.Buffer
	limit     int64
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.limit - int64(b.Len()); int64(len(p)) > room {
		p = p[:max(0, room)]
		b.truncated = true
	}
	b.Buffer.Write(p)
	return n, nil
}

// Health asks the agent how it is.
func (c *Client) Health(ctx context.Context) (*protocol.HealthResult, error) {
	var h protocol.HealthResult
	_, err := c.call(ctx, protocol.CmdHealth, struct{}{}, nil, &h)
	return &h, err
}

// Usage is Health with the system's use as the agent sees it
// (HealthResult.Usage, nil from an agent too old to say).
func (c *Client) Usage(ctx context.Context) (*protocol.HealthResult, error) {
	var h protocol.HealthResult
	_, err := c.call(ctx, protocol.CmdHealth, &protocol.HealthArgs{Usage: true}, nil, &h)
	return &h, err
}

// Shutdown asks the agent to end every process it started and exit.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	_, err := c.call(ctx, protocol.CmdShutdown, &protocol.ShutdownArgs{GraceMs: grace.Milliseconds()}, nil, nil)
	return err
}

// ProcStart starts a background process.
func (c *Client) ProcStart(ctx context.Context, args *protocol.ProcStartArgs) (*protocol.ProcInfo, error) {
	var info protocol.ProcInfo
	_, err := c.call(ctx, protocol.CmdProcStart, args, nil, &info)
	return &info, err
}

// ProcInput writes to a background process's stdin; eof closes it.
func (c *Client) ProcInput(ctx context.Context, pid int, data []byte, eof bool) error {
	_, err := c.call(ctx, protocol.CmdProcInput, &protocol.ProcInputArgs{PID: pid, EOF: eof}, data, nil)
	return err
}

// ProcSignal signals a background process's (or PTY's) process group.
func (c *Client) ProcSignal(ctx context.Context, pid int, signal string) error {
	_, err := c.call(ctx, protocol.CmdProcSignal, &protocol.ProcSignalArgs{PID: pid, Signal: signal}, nil, nil)
	return err
}

// ProcList lists background processes and PTYs.
func (c *Client) ProcList(ctx context.Context) ([]protocol.ProcInfo, error) {
	var res protocol.ProcListResult
	_, err := c.call(ctx, protocol.CmdProcList, struct{}{}, nil, &res)
	return res.Processes, err
}

// OutputFunc receives process output: the stream name, the offset of p's
// first byte in that stream, and the bytes. A gap (output lost to the
// ring's bound) arrives as stream "gap" with p nil and off the resume point.
type OutputFunc func(stream string, off int64, p []byte) error

// ProcAttach replays a process's output from the given offsets; with Follow
// it streams until the process exits. It returns the process's state.
func (c *Client) ProcAttach(ctx context.Context, args *protocol.ProcAttachArgs, out OutputFunc) (*protocol.ProcInfo, error) {
	var info protocol.ProcInfo
	err := c.follow(ctx, protocol.CmdProcAttach, args, out, &info)
	return &info, err
}

// follow runs a streaming request that delivers output events.
func (c *Client) follow(ctx context.Context, cmd protocol.Cmd, args any, out OutputFunc, result any) error {
	s, err := c.c.Stream(ctx, &Request{Cmd: cmd, Args: args, Timeout: NoTimeout})
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		ev, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if ev.Stream == protocol.StreamGap {
			var g protocol.GapEvent
			if jerr := (&Response{Data: ev.Data}).Decode(&g); jerr == nil {
				err = out(protocol.StreamGap+":"+g.Stream, g.To, nil)
			}
		} else {
			err = out(ev.Stream, ev.Offset, ev.Body)
		}
		if err != nil {
			return err
		}
	}
	resp, err := s.Result()
	if err != nil {
		return err
	}
	return resp.Decode(result)
}

// PtySpawn starts a process on a new PTY.
func (c *Client) PtySpawn(ctx context.Context, args *protocol.PtySpawnArgs) (*protocol.ProcInfo, error) {
	var info protocol.ProcInfo
	_, err := c.call(ctx, protocol.CmdPtySpawn, args, nil, &info)
	return &info, err
}

// PtyWrite types data into a PTY.
func (c *Client) PtyWrite(ctx context.Context, pid int, data []byte) error {
	_, err := c.call(ctx, protocol.CmdPtyWrite, &protocol.ProcInputArgs{PID: pid}, data, nil)
	return err
}

// PtyRead reads a PTY's output from an offset, waiting up to args.WaitMs.
func (c *Client) PtyRead(ctx context.Context, args *protocol.PtyReadArgs) (*protocol.PtyReadResult, []byte, error) {
	a := *args
	a.Follow = false
	var res protocol.PtyReadResult
	resp, err := c.call(ctx, protocol.CmdPtyRead, &a, nil, &res)
	if err != nil {
		return nil, nil, err
	}
	return &res, resp.Body, nil
}

// PtyFollow streams a PTY's output from offset until its process exits.
// With pace, the terminal's output is held back while this reader is
// behind (the writer's attachment); without, a slow reader sees gaps.
func (c *Client) PtyFollow(ctx context.Context, pid int, offset int64, pace bool, out OutputFunc) (*protocol.PtyReadResult, error) {
	var res protocol.PtyReadResult
	err := c.follow(ctx, protocol.CmdPtyRead, &protocol.PtyReadArgs{PID: pid, Offset: offset, Follow: true, Pace: pace}, out, &res)
	return &res, err
}

// PtyResize sets a PTY's size.
func (c *Client) PtyResize(ctx context.Context, pid, cols, rows int) error {
	_, err := c.call(ctx, protocol.CmdPtyResize, &protocol.PtyResizeArgs{PID: pid, Cols: cols, Rows: rows}, nil, nil)
	return err
}

// PtyClose hangs up a PTY and reports how its process ended.
func (c *Client) PtyClose(ctx context.Context, pid int) (*protocol.ProcInfo, error) {
	var info protocol.ProcInfo
	_, err := c.call(ctx, protocol.CmdPtyClose, &protocol.ProcRef{PID: pid}, nil, &info)
	return &info, err
}

// Adopt makes an agent that serves no neuron yet (a warm pod of kube
// mode's pool) neuron id's, with env over the environment of every
// command it starts (protocol.CmdAdopt). An agent older than protocol 1.5
// answers UNSUPPORTED.
func (c *Client) Adopt(ctx context.Context, id string, env []string) error {
	_, err := c.call(ctx, protocol.CmdAdopt, &protocol.AdoptArgs{Neuron: id, Env: env}, nil, nil)
	return err
}
