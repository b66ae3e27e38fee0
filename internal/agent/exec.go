//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
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
	case !args.Stream && limit > min(protocol.MaxExecOutput, (req.maxBody()-(1<<20))/2):
		return nil, nil, protocol.Errorf(protocol.CodeTooLarge, "exec: maxOutput %d exceeds %d; use stream for more",
			limit, min(protocol.MaxExecOutput, (req.maxBody()-(1<<20))/2))
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

	if !args.Stream && args.Stdin == protocol.StdinNone && pidfdPolls() {
		return a.execCollected(ctx, req, &args, cmd, limit, started)
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
	// Stdin, when there is any, is a pipe fed by our own goroutine (never
	// os/exec's copier, whose end Wait would wait for): once the command
	// exits, closing our end stops the feeding even if a descendant holds
	// the other end and never reads.
	var inR, inW *os.File
	if args.Stdin != protocol.StdinNone {
		if inR, inW, err = os.Pipe(); err != nil {
			outW.Close()
			errW.Close()
			return nil, nil, err
		}
		cmd.Stdin = inR
	}

	err = a.reaper.startChild(cmd.Start, func() int { return cmd.Process.Pid })
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		if inW != nil {
			inW.Close()
		}
		return a.notRunnableResult(req, &args, &notRunnable{code: 126, msg: err.Error()}, started)
	}
	pid := cmd.Process.Pid
	stopKill := context.AfterFunc(ctx, func() { syscall.Kill(-pid, syscall.SIGKILL) })
	if inW != nil {
		feedCtx, stopFeed := context.WithCancel(ctx)
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			defer inW.Close() // the command sees EOF
			if args.Stdin == protocol.StdinBody {
				inW.Write(req.body) // a command that stops reading ends this write with EPIPE
				return
			}
			pumpInput(feedCtx, req, inW)
		}()
		defer func() { stopFeed(); inW.Close(); <-fed }()
	}

	stdout := &capture{req: req, stream: protocol.StreamStdout, live: args.Stream, limit: limit}
	stderr := &capture{req: req, stream: protocol.StreamStderr, live: args.Stream, limit: limit}
	outD, errD := newDrainer(outR), newDrainer(errR)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout.truncated = outD.run(stdout.take) || stdout.truncated }()
	go func() { defer wg.Done(); stderr.truncated = errD.run(stderr.take) || stderr.truncated }()

	waitErr := cmd.Wait()
	a.reaper.forget(pid)
	stopKill()
	outD.exited()
	errD.exited()
	wg.Wait()
	return a.execResult(ctx, req, &args, cmd, waitErr, stdout, stderr, started)
}

// execResult is exec's reply once cmd has been waited for.
func (a *Agent) execResult(ctx context.Context, req *request, args *protocol.ExecArgs, cmd *exec.Cmd, waitErr error, stdout, stderr *capture, started time.Time) (any, []byte, error) {
	pid := cmd.Process.Pid
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

// drainer reads one output pipe of a process to its end. While the process
// runs it reads for as long as there is output. Once the process has exited
// it reads only what keeps coming: a read that waits drainGrace for data
// ends it (something the process left behind holds the pipe open), and so
// does more than postExitCap bytes (something left behind keeps writing).
// Time spent handing data on (waiting for the host's credit) never counts.
type drainer struct {
	f    *os.File
	done atomic.Bool
}

// postExitCap bounds what is still read after the process has exited:
// generous for what sat in the pipe, small for a runaway descendant.
const postExitCap = 1 << 20

func newDrainer(f *os.File) *drainer { return &drainer{f: f} }

// exited says the process has exited: reads from now on are bounded.
func (d *drainer) exited() {
	d.done.Store(true)
	d.f.SetReadDeadline(time.Now().Add(drainGrace))
}

// run reads until the end and hands every chunk to sink. It reports
// whether output was cut off after the process exited.
func (d *drainer) run(sink func([]byte)) (cut bool) {
	buf := make([]byte, 64<<10)
	var after int
	for {
		if d.done.Load() {
			d.f.SetReadDeadline(time.Now().Add(drainGrace))
		}
		n, err := d.f.Read(buf)
		if n > 0 {
			if d.done.Load() {
				if after += n; after > postExitCap {
					return true
				}
			}
			sink(buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The deadline fired before this goroutine got to look at the
			// pipe again (a busy machine: it ran late), so the read says
			// "timeout" with data waiting: take what sits in the pipe now,
			// without waiting, so output the process wrote before it
			// exited is never lost.
			return d.rest(buf, sink, after)
		}
		if err != nil {
			return false // EOF, or nothing more within the grace period
		}
	}
}

// rest reads what the pipe holds now, without waiting, up to
// postExitCap in all after the exit (after: what was read since).
func (d *drainer) rest(buf []byte, sink func([]byte), after int) (cut bool) {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return false
	}
	d.f.SetReadDeadline(time.Time{}) // a passed deadline fails even a read that would not wait
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // one try: EAGAIN is "nothing now", not "wait"
		}); err != nil || rerr != nil || n <= 0 {
			return false
		}
		if after += n; after > postExitCap {
			return true
		}
		sink(buf[:n])
	}
}
