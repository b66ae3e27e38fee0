package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// drainGrace is how long output is still collected after a command exits
// while something it left behind keeps its stdout or stderr open.
const drainGrace = 200 * time.Millisecond

func (a *Agent) exec(req *request) (any, []byte, error) {
	var args protocol.ExecArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if req.in != nil {
		defer req.in.abort()
	}
	switch args.Stdin {
	case protocol.StdinNone, protocol.StdinBody, protocol.StdinStream:
	default:
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "exec: stdin must be \"\", \"body\" or \"stream\", not %q", args.Stdin)
	}
	limit := args.MaxOutput
	switch {
	case limit < 0:
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "exec: negative maxOutput")
	case !args.Stream && limit == 0:
		limit = protocol.DefaultMaxOutput
	case !args.Stream && limit > protocol.MaxExecOutput:
		return nil, nil, protocol.Errorf(protocol.CodeTooLarge, "exec: maxOutput %d exceeds %d; use stream for more", limit, protocol.MaxExecOutput)
	}
	started := time.Now()
	cmd, err := a.prepare(&args.Command)
	var nr *notRunnable
	if errors.As(err, &nr) {
		return a.notRunnableResult(req, &args, nr, started)
	}
	if err != nil {
		return nil, nil, err
	}

	ctx := req.ctx
	if args.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(args.TimeoutMs)*time.Millisecond)
		defer cancel()
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, err
	}
	defer outR.Close()
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	var inW *os.File
	switch args.Stdin {
	case protocol.StdinBody:
		cmd.Stdin = bytes.NewReader(req.body)
	case protocol.StdinStream:
		var inR *os.File
		if inR, inW, err = os.Pipe(); err != nil {
			outW.Close()
			errW.Close()
			return nil, nil, err
		}
		cmd.Stdin = inR
		defer inR.Close()
		defer inW.Close()
	}

	err = a.reaper.startChild(cmd.Start, func() int { return cmd.Process.Pid })
	outW.Close()
	errW.Close()
	if err != nil {
		return a.notRunnableResult(req, &args, &notRunnable{code: 126, msg: err.Error()}, started)
	}
	pid := cmd.Process.Pid
	stopKill := context.AfterFunc(ctx, func() { syscall.Kill(-pid, syscall.SIGKILL) })
	if inW != nil {
		pumpCtx, stopPump := context.WithCancel(ctx)
		pumped := make(chan struct{})
		go func() { defer close(pumped); pumpInput(pumpCtx, req, inW) }()
		defer func() { stopPump(); inW.Close(); <-pumped }()
	}

	stdout := &capture{req: req, stream: protocol.StreamStdout, live: args.Stream, limit: limit}
	stderr := &capture{req: req, stream: protocol.StreamStderr, live: args.Stream, limit: limit}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout.drain(outR) }()
	go func() { defer wg.Done(); stderr.drain(errR) }()

	waitErr := cmd.Wait()
	a.reaper.forget(pid)
	stopKill()
	// Output normally ends with the process; if a descendant still holds the
	// pipes, stop reading after a short grace instead of hanging.
	if !waitTimeout(&wg, drainGrace) {
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		wg.Wait()
	}
	if waitErr != nil && cmd.ProcessState == nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "exec: waiting for %s: %v", args.Argv, waitErr)
	}
	if req.ctx.Err() != nil {
		// The host cancelled or gave up; nobody reads the result.
		return nil, nil, req.ctx.Err()
	}
	res := &protocol.ExecResult{PID: pid, DurationUs: time.Since(started).Microseconds(),
		StdoutLen: stdout.n, StderrLen: stderr.n, StdoutTruncated: stdout.truncated, StderrTruncated: stderr.truncated}
	res.ExitCode, res.Signal = exitStatus(cmd.ProcessState)
	res.TimedOut = ctx.Err() != nil
	if args.Stream {
		if stdout.err != nil || stderr.err != nil {
			return nil, nil, errors.Join(stdout.err, stderr.err)
		}
		return res, nil, nil
	}
	return res, append(stdout.buf.Bytes(), stderr.buf.Bytes()...), nil
}

// notRunnableResult reports a program that could not start as the shell
// would: exit code 127 or 126 and the reason on stderr.
func (a *Agent) notRunnableResult(req *request, args *protocol.ExecArgs, nr *notRunnable, started time.Time) (any, []byte, error) {
	msg := []byte(nr.msg + "\n")
	res := &protocol.ExecResult{ExitCode: nr.code, StderrLen: int64(len(msg)), DurationUs: time.Since(started).Microseconds()}
	if args.Stream {
		if err := req.send(protocol.StreamStderr, 0, msg); err != nil {
			return nil, nil, err
		}
		return res, nil, nil
	}
	return res, msg, nil
}

// pumpInput copies the host's stdin frames into the command, granting the
// host credit for each chunk consumed.
func pumpInput(ctx context.Context, req *request, w *os.File) {
	defer w.Close() // the command sees EOF
	for {
		p, err := req.in.next(ctx)
		if err != nil {
			return
		}
		_, werr := w.Write(p)
		if werr != nil {
			return // the command closed its stdin; the rest is dropped
		}
		if req.grant(len(p)) != nil {
			return
		}
	}
}

// capture collects (or streams) one output pipe, keeping at most limit bytes.
type capture struct {
	req       *request
	stream    string
	live      bool
	limit     int64 // 0: unlimited (live only)
	buf       bytes.Buffer
	n         int64 // bytes kept or sent
	truncated bool
	err       error // the first failure to send, live only
}

func (c *capture) drain(r io.Reader) {
	p := make([]byte, 64<<10)
	for {
		k, err := r.Read(p)
		if k > 0 {
			c.take(p[:k])
		}
		if err != nil {
			return
		}
	}
}

func (c *capture) take(p []byte) {
	if c.limit > 0 && c.n+int64(len(p)) > c.limit {
		p = p[:c.limit-c.n]
		c.truncated = true
	}
	if len(p) == 0 {
		return
	}
	if !c.live {
		c.buf.Write(p)
		c.n += int64(len(p))
		return
	}
	if c.err != nil {
		return // keep draining so the command never blocks on a full pipe
	}
	if err := c.req.send(c.stream, c.n, p); err != nil {
		c.err = err
		return
	}
	c.n += int64(len(p))
}

// waitTimeout waits for wg up to d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
