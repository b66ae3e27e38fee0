//go:build linux

package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Table bounds: exited processes are forgotten oldest first beyond keepExited.
const (
	maxProcs   = 1024
	keepExited = 128
)

// procTable holds the background processes and PTYs. They belong to the
// agent, not to the request or connection that started them: they keep
// running, and their output keeps accumulating in bounded rings, while no
// host is connected.
type procTable struct {
	a       *Agent
	mu      sync.Mutex
	procs   map[int]*proc
	order   []int // pids in start order
	pending int   // slots reserved for processes being started
	wg      sync.WaitGroup
}

// proc is one background process or PTY.
type proc struct {
	pid int
	id  string // a terminal's id (PTYs only)

	// hold is the pacer that keeps a new terminal's output for its first
	// paced follow (PtySpawnArgs.Hold); holdTimer releases it if none comes.
	holdMu    sync.Mutex
	hold      *pacer
	holdTimer *time.Timer
	argv      []string
	cwd       string
	started   time.Time
	isPty     bool
	cmd       *exec.Cmd
	out       *ring // stdout, or the PTY's output
	errOut    *ring // stderr; nil for a PTY
	done      chan struct{}

	inMu  sync.Mutex // serialises input
	stdin *os.File   // pipe write end or PTY master; nil without stdin
	tty   *os.File   // PTY master

	mu       sync.Mutex
	exited   bool
	exitCode int
	signal   string
	ended    time.Time
	cols     int
	rows     int
}

func newProcTable(a *Agent) *procTable { return &procTable{a: a, procs: map[int]*proc{}} }

func (t *procTable) counts() (procs, ptys int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs {
		p.mu.Lock()
		running := !p.exited
		p.mu.Unlock()
		switch {
		case running && p.isPty:
			ptys++
		case running:
			procs++
		}
	}
	return procs, ptys
}

func (t *procTable) get(pid int) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.procs[pid]
	if p == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no process %d was started by this agent (or it was forgotten)", pid)
	}
	return p, nil
}

// reserve claims a table slot before a process starts, so a full table
// refuses the start instead of leaving an untracked process running.
func (t *procTable) reserve() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.procs)+t.pending >= maxProcs {
		t.evictExited()
	}
	if len(t.procs)+t.pending >= maxProcs {
		return protocol.Errorf(protocol.CodeTooLarge, "too many processes (%d); end some first", maxProcs)
	}
	t.pending++
	return nil
}

func (t *procTable) unreserve() {
	t.mu.Lock()
	t.pending--
	t.mu.Unlock()
}

// add records a started process in the slot reserve claimed.
func (t *procTable) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending--
	if old := t.procs[p.pid]; old != nil {
		t.moveAside(old)
	}
	t.procs[p.pid] = p
	t.order = append(t.order, p.pid)
	t.evictExited()
}

// moveAside re-keys an ended terminal read back from disk whose pid a new
// process now has: it keeps its id, and a negative pid of its own that
// addresses it (t.mu held).
func (t *procTable) moveAside(old *proc) {
	key := -1
	for t.procs[key] != nil {
		key--
	}
	for i, pid := range t.order {
		if pid == old.pid {
			t.order[i] = key
		}
	}
	delete(t.procs, old.pid)
	old.pid = key
	t.procs[key] = old
}

// evictExited forgets the oldest exited processes beyond keepExited.
// t.mu is held.
func (t *procTable) evictExited() {
	var exited []int
	for _, pid := range t.order {
		q := t.procs[pid]
		q.mu.Lock()
		if q.exited {
			exited = append(exited, pid)
		}
		q.mu.Unlock()
	}
	for _, pid := range exited[:max(0, len(exited)-keepExited)] {
		delete(t.procs, pid)
		t.order = slices.DeleteFunc(t.order, func(x int) bool { return x == pid })
	}
}

func ringSize(n int) (int, error) {
	switch {
	case n == 0:
		return protocol.DefaultRingBytes, nil
	case n < 0 || n > protocol.MaxRingBytes:
		return 0, protocol.Errorf(protocol.CodeBadRequest, "ringBytes %d is outside 1..%d", n, protocol.MaxRingBytes)
	}
	return n, nil
}

// start starts a background process with pipes.
func (t *procTable) start(c *protocol.Command, withStdin bool, ringBytes int) (p *proc, err error) {
	size, err := ringSize(ringBytes)
	if err != nil {
		return nil, err
	}
	if err := t.reserve(); err != nil {
		return nil, err
	}
	defer func() {
		if p == nil {
			t.unreserve()
		}
	}()
	cmd, err := t.a.prepare(c)
	if err != nil {
		return nil, runnableError(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	var inR, inW *os.File
	if withStdin {
		if inR, inW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, err
		}
		cmd.Stdin = inR
	}
	err = t.a.reaper.startChild(cmd.Start, func() int { return cmd.Process.Pid })
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		return nil, protocol.Errorf(protocol.CodePermission, "starting %v: %v", cmd.Args, err)
	}
	p = &proc{pid: cmd.Process.Pid, argv: cmd.Args, cwd: cmd.Dir, started: time.Now(), cmd: cmd,
		out: newRing(size), errOut: newRing(size), done: make(chan struct{}), stdin: inW}
	t.run(p, []*os.File{outR, errR}, []*ring{p.out, p.errOut})
	t.add(p)
	return p, nil
}

// startPty starts a process on a new pseudo-terminal.
func (t *procTable) startPty(c *protocol.Command, cols, rows, ringBytes int, hold bool) (p *proc, err error) {
	size, err := ringSize(ringBytes)
	if err != nil {
		return nil, err
	}
	if err := t.reserve(); err != nil {
		return nil, err
	}
	defer func() {
		if p == nil {
			t.unreserve()
		}
	}()
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	if cols < 1 || rows < 1 || cols > 10000 || rows > 10000 {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "pty size %dx%d is out of range", cols, rows)
	}
	cmd, err := t.a.prepare(c)
	if err != nil {
		return nil, runnableError(err)
	}
	if !hasEnv(cmd.Env, "TERM") {
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
	}
	// A PTY's process leads its own session; the kernel hangs it up when the
	// master closes, and kills it if the agent dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	var tty *os.File
	err = t.a.reaper.startChild(func() error {
		var serr error
		tty, serr = pty.StartWithAttrs(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}, cmd.SysProcAttr)
		return serr
	}, func() int { return cmd.Process.Pid })
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "pty: starting %v: %v", cmd.Args, err)
	}
	p = &proc{pid: cmd.Process.Pid, id: newTermID(), argv: cmd.Args, cwd: cmd.Dir, started: time.Now(), cmd: cmd, isPty: true,
		out: newRing(size), done: make(chan struct{}), stdin: tty, tty: tty, cols: cols, rows: rows}
	if hold {
		// Registered before the first byte can be written.
		p.hold = p.out.pace(0)
		p.holdTimer = time.AfterFunc(protocol.HoldFor, func() {
			if pc := p.takeHold(); pc != nil {
				p.out.unpace(pc)
			}
		})
	}
	t.run(p, []*os.File{tty}, []*ring{p.out})
	t.add(p)
	t.a.terms.keep(p, &t.wg)
	return p, nil
}

func runnableError(err error) error {
	var nr *notRunnable
	if errors.As(err, &nr) {
		return nr.wireError()
	}
	return err
}

func hasEnv(env []string, key string) bool { return envValue(env, key) != "" }

// run starts the goroutines that copy p's output into its rings and wait
// for it to exit. The table owns them; killAll waits for them.
func (t *procTable) run(p *proc, outs []*os.File, rings []*ring) {
	var readers sync.WaitGroup
	drainers := make([]*drainer, len(outs))
	for i, f := range outs {
		drainers[i] = newDrainer(f)
		readers.Add(1)
		go func(d *drainer, r *ring) {
			defer readers.Done()
			d.run(func(b []byte) { r.Write(b) }) // EOF, or EIO once a PTY's last holder is gone
		}(drainers[i], rings[i])
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.cmd.Wait()
		t.a.reaper.forget(p.pid)
		code, sig := exitStatus(p.cmd.ProcessState)
		for _, d := range drainers {
			d.exited()
		}
		readers.Wait()
		p.inMu.Lock()
		for _, f := range outs {
			f.Close()
		}
		if p.stdin != nil && p.stdin != p.tty {
			p.stdin.Close()
		}
		p.stdin = nil
		p.inMu.Unlock()
		p.mu.Lock()
		p.exited, p.exitCode, p.signal, p.ended = true, code, sig, time.Now()
		p.mu.Unlock()
		for _, r := range rings {
			r.Close()
		}
		close(p.done)
	}()
}

func (p *proc) info() protocol.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := protocol.ProcInfo{PID: p.pid, ID: p.id, Argv: p.argv, Cwd: p.cwd, Pty: p.isPty, Started: p.started.UTC(),
		Running: !p.exited, ExitCode: p.exitCode, Signal: p.signal, StdoutEnd: p.out.End(), Cols: p.cols, Rows: p.rows}
	if p.exited {
		pi.Ended = p.ended.UTC()
	}
	if p.errOut != nil {
		pi.StderrEnd = p.errOut.End()
	}
	return pi
}

// takeHold hands the spawn-time pacer over (nil if there is none, or it
// was taken or released).
func (p *proc) takeHold() *pacer {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	pc := p.hold
	p.hold = nil
	if p.holdTimer != nil {
		p.holdTimer.Stop()
	}
	return pc
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}

// signal sends sig to the process's whole group.
func (p *proc) signalGroup(sig syscall.Signal) error {
	if !p.running() {
		pi := p.info()
		return protocol.Errorf(protocol.CodeNotFound, "process %d already exited (code %d); nothing to signal", p.pid, pi.ExitCode)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return protocol.Errorf(protocol.CodePermission, "signal %d to process %d: %v", sig, p.pid, err)
	}
	return nil
}

// write feeds data to the process's stdin (or PTY), giving up when ctx ends.
func (p *proc) write(ctx context.Context, data []byte, eof bool) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		if !p.running() {
			return protocol.Errorf(protocol.CodeNotFound, "process %d has exited", p.pid)
		}
		return protocol.Errorf(protocol.CodeBadRequest, "process %d was started without stdin (or its stdin was closed)", p.pid)
	}
	// Cancellation interrupts a write the process does not read; the
	// watcher is gone before the deadline is cleared for the next write.
	f := p.stdin
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			f.SetWriteDeadline(time.Now())
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		<-watched
		f.SetWriteDeadline(time.Time{})
	}()
	if len(data) > 0 {
		if _, err := p.stdin.Write(data); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return protocol.Errorf(protocol.CodeBadRequest, "writing to process %d: %v", p.pid, err)
		}
	}
	if eof {
		if p.isPty {
			_, err := p.stdin.Write([]byte{4}) // ^D, the terminal's end of input
			return err
		}
		p.stdin.Close()
		p.stdin = nil
	}
	return nil
}

// killAll ends every process: SIGTERM to each group, SIGKILL after grace,
// then waits for the table's goroutines.
func (t *procTable) killAll(grace time.Duration) {
	t.mu.Lock()
	for _, p := range t.procs {
		if p.tty != nil {
			p.inMu.Lock()
			p.tty.Close() // hang up
			p.inMu.Unlock()
		}
	}
	t.mu.Unlock()
	t.a.reaper.endAll(grace)
	t.wg.Wait()
}
