package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// The collected exec: a command whose output comes back whole in the
// reply and which reads no stdin (what most execs are) runs in the
// request's own goroutine. Its stdout and stderr are pipes that goroutine
// reads itself, waking on poll(2) over both and the child's pidfd: no
// drainer goroutines, no netpoller registrations, no thread parked in
// waitid while others read. On this VM a wake across threads costs about
// as much as twenty system calls, and the general path (exec.go) takes
// four of them per command (docs/benchmarks.md, "Where an exec's time
// goes"). Streamed output and stdin keep the general path: there a slow
// host's credit must hold up one stream without holding up the other.

// pidfdPolls reports whether this kernel hands out a child's pidfd at
// clone and lets it be polled (Linux 5.3): the collected exec needs both.
var pidfdPolls = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// execCollected runs cmd for exec (see above); the result is exec's.
func (a *Agent) execCollected(ctx context.Context, req *request, args *protocol.ExecArgs, cmd *exec.Cmd, limit int64, started time.Time) (any, []byte, error) {
	outR, outW, err := collectPipe()
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(outR)
	errR, errW, err := collectPipe()
	if err != nil {
		outW.Close()
		return nil, nil, err
	}
	defer unix.Close(errR)
	cmd.Stdout, cmd.Stderr = outW, errW
	pidfd := -1
	attr := *cmd.SysProcAttr
	attr.PidFD = &pidfd
	cmd.SysProcAttr = &attr
	err = a.reaper.startChild(cmd.Start, func() int { return cmd.Process.Pid })
	if err != nil && pidfd < 0 {
		// A sandbox may refuse clone's CLONE_PIDFD where pidfd_open works
		// (Go's own check tries both): start it without, and collect asks
		// waitid instead. Nothing ran on a failed start.
		attr.PidFD = nil
		cmd = &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
			Stdout: outW, Stderr: errW, SysProcAttr: &attr}
		err = a.reaper.startChild(cmd.Start, func() int { return cmd.Process.Pid })
	}
	outW.Close()
	errW.Close()
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if err != nil {
		return a.notRunnableResult(req, args, &notRunnable{code: 126, msg: err.Error()}, started)
	}
	pid := cmd.Process.Pid
	stopKill := context.AfterFunc(ctx, func() { syscall.Kill(-pid, syscall.SIGKILL) })
	stdout := &capture{req: req, stream: protocol.StreamStdout, limit: limit}
	stderr := &capture{req: req, stream: protocol.StreamStderr, limit: limit}
	cut := collect(pid, pidfd, [2]int{outR, errR}, [2]func([]byte){stdout.take, stderr.take})
	stdout.truncated = stdout.truncated || cut[0]
	stderr.truncated = stderr.truncated || cut[1]
	waitErr := cmd.Wait()
	a.reaper.forget(pid)
	stopKill()
	return a.execResult(ctx, req, args, cmd, waitErr, stdout, stderr, started)
}

// collectPipe makes a pipe for a command's output: the read end this
// process's, non-blocking, for collect's poll; the write end the child's,
// blocking as a shell's would be (os.NewFile of a blocking descriptor
// leaves it off the poller).
func collectPipe() (r int, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, err
	}
	return p[0], os.NewFile(uintptr(p[1]), "|w"), nil
}

// collect reads pipes into sinks until both end, waking on poll(2) over
// them and pidfd. Once pidfd says the child has exited it reads on only
// while output keeps coming, as drainer does: a wait of drainGrace with
// nothing on either pipe ends it (something the child left behind holds
// them open), and so does more than postExitCap bytes on one. cut says,
// per pipe, whether output was dropped after the exit. Without a pidfd
// (pidfd < 0: not expected where pidfdPolls holds) it asks waitid about
// child pid every 50 ms instead.
func collect(pid, pidfd int, pipes [2]int, sinks [2]func([]byte)) (cut [2]bool) {
	var buf []byte // taken at the first wake: most commands print nothing
	release := func() {}
	defer func() { release() }()
	open := [2]bool{true, true}
	var after [2]int
	exited := false
	// quiet is when the wait for more output after the exit ends: a time,
	// not a timeout per poll, which a signal (EINTR) would start again.
	var quiet time.Time
	fds := make([]unix.PollFd, 0, 3)
	for open[0] || open[1] {
		fds = fds[:0]
		for i, fd := range pipes {
			if open[i] {
				fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
		}
		timeout := -1
		switch {
		case exited:
			if quiet.IsZero() {
				quiet = time.Now().Add(drainGrace)
			}
			timeout = max(int((time.Until(quiet)+time.Millisecond-1)/time.Millisecond), 0)
		case pidfd >= 0:
			fds = append(fds, unix.PollFd{Fd: int32(pidfd), Events: unix.POLLIN})
		default:
			timeout = 50
		}
		n, err := unix.Poll(fds, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Not expected (ENOMEM): unread pipes would leave the command
			// blocked on a full one, and its Wait with it.
			syscall.Kill(-pid, syscall.SIGKILL)
			return cut
		}
		if n == 0 && exited {
			return cut // quiet for drainGrace after the exit
		}
		if !exited && pidfd < 0 {
			var info unix.Siginfo
			exited = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil) == nil && info.Signo == int32(unix.SIGCHLD) // Linux leaves it 0 while none has exited
		}
		for _, p := range fds {
			if p.Revents == 0 {
				continue
			}
			if int(p.Fd) == pidfd {
				exited = true
				continue
			}
			i := 0
			if int(p.Fd) == pipes[1] {
				i = 1
			}
			if buf == nil {
				buf, release = getBuf(64 << 10) // a pipe's size
			}
			// What the pipe holds now, to EAGAIN; its end at EOF.
			for open[i] {
				m, err := unix.Read(pipes[i], buf)
				if errors.Is(err, unix.EINTR) {
					continue
				}
				if m <= 0 {
					// EOF, or a failed read, ends the pipe; EAGAIN waits again.
					open[i] = errors.Is(err, unix.EAGAIN)
					break
				}
				if exited {
					quiet = time.Time{} // output came: wait drainGrace from now
					if after[i] += m; after[i] > postExitCap {
						cut[i], open[i] = true, false
						break
					}
				}
				sinks[i](buf[:m])
			}
		}
	}
	return cut
}
