//go:build linux

package agent

import (
	"reflect"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// attachChunk is the most output one event carries.
const attachChunk = 256 << 10

func (a *Agent) procStart(req *request) (any, []byte, error) {
	var args protocol.ProcStartArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.procs.start(&args.Command, args.Stdin, args.RingBytes)
	if err != nil {
		return nil, nil, err
	}
	info := p.info()
	return &info, nil, nil
}

func (a *Agent) ptySpawn(req *request) (any, []byte, error) {
	var args protocol.PtySpawnArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.procs.startPty(&args.Command, args.Cols, args.Rows, args.RingBytes, args.Hold)
	if err != nil {
		return nil, nil, err
	}
	info := p.info()
	return &info, nil, nil
}

// getKind fetches a process and checks it is (or is not) a PTY.
func (a *Agent) getKind(req *request, pid int, wantPty bool) (*proc, error) {
	p, err := a.procs.get(pid)
	if err != nil {
		return nil, err
	}
	if wantPty && !p.isPty {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "%s: process %d is not a PTY (use the proc_* commands)", req.cmd, pid)
	}
	return p, nil
}

func (a *Agent) procInput(req *request) (any, []byte, error) {
	var args protocol.ProcInputArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.getKind(req, args.PID, req.cmd == protocol.CmdPtyWrite)
	if err != nil {
		return nil, nil, err
	}
	if err := p.write(req.ctx, req.body, args.EOF); err != nil {
		return nil, nil, err
	}
	return struct{}{}, nil, nil
}

func (a *Agent) procSignal(req *request) (any, []byte, error) {
	var args protocol.ProcSignalArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	sig, err := parseSignal(args.Signal)
	if err != nil {
		return nil, nil, err
	}
	p, err := a.procs.get(args.PID)
	if err != nil {
		return nil, nil, err
	}
	if err := p.signalGroup(sig); err != nil {
		return nil, nil, err
	}
	return struct{}{}, nil, nil
}

func (a *Agent) procList(req *request) (any, []byte, error) {
	a.procs.mu.Lock()
	ps := make([]*proc, 0, len(a.procs.order))
	for _, pid := range a.procs.order {
		ps = append(ps, a.procs.procs[pid])
	}
	a.procs.mu.Unlock()
	res := &protocol.ProcListResult{Processes: make([]protocol.ProcInfo, 0, len(ps))}
	for _, p := range ps {
		res.Processes = append(res.Processes, p.info())
	}
	return res, nil, nil
}

// attachStream is one output stream being replayed.
type attachStream struct {
	name string
	r    *ring
	off  int64
	eof  bool
	// pc, when set, paces the ring's writer to this reader (a terminal's
	// output is held back rather than lost while an attachment follows).
	pc *pacer
}

func (a *Agent) procAttach(req *request) (any, []byte, error) {
	var args protocol.ProcAttachArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.procs.get(args.PID)
	if err != nil {
		return nil, nil, err
	}
	streams := []*attachStream{{name: protocol.StreamStdout, r: p.out, off: args.StdoutOffset}}
	if p.isPty {
		streams[0].name = protocol.StreamOutput
	} else {
		streams = append(streams, &attachStream{name: protocol.StreamStderr, r: p.errOut, off: args.StderrOffset})
	}
	if err := replay(req, streams, args.Follow); err != nil {
		return nil, nil, err
	}
	info := p.info()
	return &info, nil, nil
}

// replay sends what the rings hold from each stream's offset; with follow it
// keeps going until every stream has ended (the process exited and its
// output was drained) or the request is cancelled.
func replay(req *request, streams []*attachStream, follow bool) error {
	var burst int64 // what the last round of sends carried
	for {
		progressed, sent := false, int64(0)
		wake := make([]<-chan struct{}, 0, len(streams))
		for _, s := range streams {
			wake = append(wake, s.r.Wait())
			data, start, eof := s.r.ReadFrom(s.off, attachChunk)
			if start > s.off {
				if err := req.event(protocol.StreamGap, protocol.GapEvent{Stream: s.name, From: s.off, To: start}); err != nil {
					return err
				}
			}
			if len(data) > 0 {
				if err := req.send(s.name, start, data); err != nil {
					return err
				}
				progressed, sent = true, sent+int64(len(data))
			}
			s.off = start + int64(len(data))
			s.eof = eof
			if s.pc != nil {
				s.r.advance(s.pc, s.off)
			}
		}
		if progressed {
			burst = sent
			continue
		}
		done := true
		for _, s := range streams {
			done = done && s.eof
		}
		if done || !follow {
			return nil
		}
		if err := waitAny(req, wake); err != nil {
			return err
		}
		gather(req, streams, burst)
	}
}

// A follower woken while output streams waits a moment for more before it
// sends (gatherWait, while less than gatherMin is there): a program that
// writes fast writes a PTY's 4 KiB at a time, and each event costs a hop
// through the channel on both sides, where one larger event costs about
// the same. Output streams when the last round of sends carried at least
// streamBurst, or the wake found at least streamReady waiting (a PTY read
// of a fast writer is near 4 KiB); an echo or a prompt is neither, and
// goes at once. Measured (docs/benchmarks.md): gathering at every wake
// for 300 µs held each echo about 1 ms (a short timer fires late here):
// 1.44 ms p50 against 0.24 now; 64 MiB through a PTY went from 0.69-0.84
// of the raw read in the same runs to 0.81-0.87.
const (
	gatherMin   = 64 << 10
	gatherWait  = time.Millisecond
	streamBurst = 16 << 10
	streamReady = 2 << 10
)

// gather waits up to gatherWait while output streams (burst: what the
// last round of sends carried) and the streams hold less than gatherMin
// past their offsets.
func gather(req *request, streams []*attachStream, burst int64) {
	ready, enough := int64(0), int64(gatherMin)
	for _, s := range streams {
		ready += max(0, s.r.End()-s.off)
		// A paced writer stops at a full ring: never wait for more than
		// half of the smallest one holds.
		enough = min(enough, int64(len(s.r.buf))/2)
	}
	if !gathers(ready, burst, enough) {
		return
	}
	t := time.NewTimer(gatherWait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.ctx.Done():
	}
}

// gathers says whether a follower that finds ready bytes waiting, after a
// round of sends that carried burst, waits for more (enough: what it
// sends without waiting, at most gatherMin).
func gathers(ready, burst, enough int64) bool {
	return ready < enough && (burst >= streamBurst || ready >= streamReady)
}

// waitAny blocks until one of chans is closed or the request ends.
func waitAny(req *request, chans []<-chan struct{}) error {
	cases := make([]reflect.SelectCase, 0, len(chans)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(req.ctx.Done())})
	for _, c := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	if i, _, _ := reflect.Select(cases); i == 0 {
		return req.ctx.Err()
	}
	return nil
}

func (a *Agent) ptyRead(req *request) (any, []byte, error) {
	var args protocol.PtyReadArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.getKind(req, args.PID, true)
	if err != nil {
		return nil, nil, err
	}
	if args.Follow {
		s := &attachStream{name: protocol.StreamOutput, r: p.out, off: args.Offset}
		if args.Pace {
			if s.pc = p.takeHold(); s.pc == nil {
				s.pc = p.out.pace(args.Offset)
			}
			defer p.out.unpace(s.pc)
		}
		if err := replay(req, []*attachStream{s}, true); err != nil {
			return nil, nil, err
		}
		info := p.info()
		return &protocol.PtyReadResult{Offset: args.Offset, Next: s.off, Info: &info}, nil, nil
	}
	limit := args.Max
	if limit <= 0 || limit > protocol.ChunkSize {
		limit = protocol.ChunkSize
	}
	deadline := time.Now().Add(time.Duration(args.WaitMs) * time.Millisecond)
	for {
		wake := p.out.Wait()
		data, start, eof := p.out.ReadFrom(args.Offset, limit)
		left := time.Until(deadline)
		if len(data) > 0 || eof || left <= 0 {
			info := p.info()
			return &protocol.PtyReadResult{Offset: start, Next: start + int64(len(data)), Dropped: max(0, start-args.Offset), Info: &info}, data, nil
		}
		select {
		case <-wake:
		case <-time.After(left):
		case <-req.ctx.Done():
			return nil, nil, req.ctx.Err()
		}
	}
}

func (a *Agent) ptyResize(req *request) (any, []byte, error) {
	var args protocol.PtyResizeArgs
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	if args.Cols < 1 || args.Rows < 1 || args.Cols > 10000 || args.Rows > 10000 {
		return nil, nil, protocol.Errorf(protocol.CodeBadRequest, "pty_resize: size %dx%d is out of range", args.Cols, args.Rows)
	}
	p, err := a.getKind(req, args.PID, true)
	if err != nil {
		return nil, nil, err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "pty_resize: the PTY of process %d is closed", args.PID)
	}
	if err := pty.Setsize(p.tty, &pty.Winsize{Cols: uint16(args.Cols), Rows: uint16(args.Rows)}); err != nil {
		return nil, nil, protocol.Errorf(protocol.CodeInternal, "pty_resize: %v", err)
	}
	p.mu.Lock()
	p.cols, p.rows = args.Cols, args.Rows
	p.mu.Unlock()
	a.terms.saveMeta(p)
	return struct{}{}, nil, nil
}

// ptyClose hangs up the terminal, then kills the process group if it has
// not gone within a grace period, and reports how it ended.
func (a *Agent) ptyClose(req *request) (any, []byte, error) {
	var args protocol.ProcRef
	if err := req.decode(&args); err != nil {
		return nil, nil, err
	}
	p, err := a.getKind(req, args.PID, true)
	if err != nil {
		return nil, nil, err
	}
	p.inMu.Lock()
	if p.stdin != nil {
		p.tty.Close()
		p.stdin = nil
	}
	p.inMu.Unlock()
	p.signalGroup(syscall.SIGHUP) // it may already be gone: that is the point
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		p.signalGroup(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			return nil, nil, protocol.Errorf(protocol.CodeTimeout, "pty_close: process %d did not exit after SIGKILL", args.PID)
		}
	case <-req.ctx.Done():
		return nil, nil, req.ctx.Err()
	}
	info := p.info()
	return &info, nil, nil
}
