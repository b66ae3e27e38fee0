package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/filesystem"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/filesystem/filesystemconnect"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process"
	"github.com/nsys-cortex/cortex/internal/e2b/proto/process/processconnect"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// The in-sandbox plane: envd's Connect services, served by the host over
// the neuron's channel (nothing of E2B runs in the neuron). A request
// names its sandbox by the E2b-Sandbox-Id header (or the Host,
// 49983-<id>.<domain>) and proves it with that sandbox's envd token
// (X-Access-Token); each call then asks the gate, as the native routes do.

// maxConnectMessage bounds one Connect message (a file's upload goes
// through /files, not here).
const maxConnectMessage = 4 << 20

// Tags: at most maxTags remembered (beyond, a tag is not kept: a Connect
// by it finds nothing), each at most maxTagLen bytes. A tag is forgotten
// when its command's end has been sent.
const (
	maxTags           = 10000
	maxTagsPerSandbox = 1000
	maxTagLen         = 256
)

// envdSandboxKey carries the sandbox an envd request was let in for.
type envdSandboxKey struct{}

// envdTarget is a sandbox: a neuron's id, and when that neuron was
// created (a later neuron of the id is another sandbox).
type envdTarget struct {
	id      string
	created time.Time
}

func envdSandbox(ctx context.Context) string { return envdTargetOf(ctx).id }

func envdTargetOf(ctx context.Context) envdTarget {
	t, _ := ctx.Value(envdSandboxKey{}).(envdTarget)
	return t
}

// envd serves one sandbox's envd calls.
type envd struct {
	s *Server

	mu    sync.Mutex
	tags  map[envdTarget]map[string]int // tag -> pid, by sandbox
	ntags int

	watchers watchers // the polling trio's
}

// client is the channel to the request's sandbox, once the gate allows
// action on it.
func (e *envd) client(ctx context.Context, action gate.Action, detail string) (*link.Client, envdTarget, error) {
	t := envdTargetOf(ctx)
	if t.id == "" {
		return nil, t, connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox: send E2b-Sandbox-Id and X-Access-Token"))
	}
	if bad, _ := ctx.Value(envdBadUserKey{}).(error); bad != nil {
		return nil, t, connect.NewError(connect.CodePermissionDenied, bad)
	}
	if err := e.allow(ctx, action, detail); err != nil {
		return nil, t, err
	}
	c, err := e.s.client(ctx, t.id)
	if err != nil {
		return nil, t, connectError(err)
	}
	return c, t, nil
}

// allow asks the gate about one more action of the request.
func (e *envd) allow(ctx context.Context, action gate.Action, detail string) error {
	return connectError(e.s.allow(ctx, envdSandbox(ctx), action, detail))
}

// connectError maps Cortex's error classes to Connect's codes, which the
// SDKs turn into their own exceptions.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeUnknown
	switch c := errdefs.Of(err); {
	case c.Is(errdefs.NotFound):
		code = connect.CodeNotFound
	case c.Is(errdefs.Invalid), c.Is(errdefs.PathEscape):
		code = connect.CodeInvalidArgument
	case c.Is(errdefs.Permission), c.Is(errdefs.PolicyDenied):
		code = connect.CodePermissionDenied
	case c.Is(errdefs.Unauthorized):
		code = connect.CodeUnauthenticated
	case c.Is(errdefs.Exists):
		code = connect.CodeAlreadyExists
	case c.Is(errdefs.Unavailable), c.Is(errdefs.NotRunning):
		code = connect.CodeUnavailable
	case c.Is(errdefs.Timeout):
		code = connect.CodeDeadlineExceeded
	case c.Is(errdefs.Unsupported):
		code = connect.CodeUnimplemented
	case c.Is(errdefs.TooLarge), c.Is(errdefs.Capacity), c.Is(errdefs.RateLimited):
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, err)
}

// tag remembers that tag names pid in sandbox t. At maxTags, the tags of
// commands that have ended and of sandboxes that are gone are dropped
// first (a stream the client dropped never forgets its tag itself); a
// tag beyond that is not kept.
func (e *envd) tag(ctx context.Context, t envdTarget, tag string, pid int) {
	e.mu.Lock()
	full := e.ntags >= maxTags || len(e.tags[t]) >= maxTagsPerSandbox
	e.mu.Unlock()
	if full {
		e.sweepTags(ctx)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ntags >= maxTags || len(e.tags[t]) >= maxTagsPerSandbox {
		return
	}
	m := e.tags[t]
	if m == nil {
		m = map[string]int{}
		e.tags[t] = m
	}
	if _, ok := m[tag]; !ok {
		e.ntags++
	}
	m[tag] = pid
}

// untag forgets tag, if it still names pid.
func (e *envd) untag(t envdTarget, tag string, pid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.tags[t]; m != nil && m[tag] == pid {
		delete(m, tag)
		e.ntags--
		if len(m) == 0 {
			delete(e.tags, t)
		}
	}
}

// sweepTags drops the tags of commands that have ended, and of sandboxes
// that are no longer the neuron they were.
func (e *envd) sweepTags(ctx context.Context) {
	e.mu.Lock()
	targets := make([]envdTarget, 0, len(e.tags))
	for t := range e.tags {
		targets = append(targets, t)
	}
	e.mu.Unlock()
	ctx = link.Quiet(ctx) // housekeeping: it wakes no paused sandbox
	for _, t := range targets {
		running := map[int]bool{}
		gone := !e.s.envdCreated(ctx, t.id).Equal(t.created)
		if !gone {
			c, err := e.s.client(ctx, t.id)
			if err != nil {
				continue // it may be paused: its tags wait
			}
			procs, err := c.ProcList(ctx)
			if err != nil {
				continue
			}
			for _, p := range procs {
				running[p.PID] = p.Running
			}
		}
		e.mu.Lock()
		for tag, pid := range e.tags[t] {
			if gone || !running[pid] {
				delete(e.tags[t], tag)
				e.ntags--
			}
		}
		if len(e.tags[t]) == 0 {
			delete(e.tags, t)
		}
		e.mu.Unlock()
	}
}

// pidOf resolves a selector to a pid.
func (e *envd) pidOf(t envdTarget, sel *process.ProcessSelector) (int, error) {
	switch {
	case sel == nil:
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("no process selector"))
	case sel.GetTag() != "":
		e.mu.Lock()
		pid, ok := e.tags[t][sel.GetTag()]
		e.mu.Unlock()
		if !ok {
			return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process tagged %q", sel.GetTag()))
		}
		return pid, nil
	case sel.GetPid() > 0:
		return int(sel.GetPid()), nil
	}
	return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("a process selector names a pid or a tag"))
}

func commandOf(cfg *process.ProcessConfig) (protocol.Command, error) {
	if cfg == nil || cfg.GetCmd() == "" {
		return protocol.Command{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	c := protocol.Command{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Cwd: cfg.GetCwd()}
	for k, v := range cfg.GetEnvs() {
		if !protocol.ValidEnvName(k) {
			return c, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("envs: %q is not a variable name", k))
		}
		c.Env = append(c.Env, k+"="+v)
	}
	slices.Sort(c.Env)
	return c, c.Validate()
}

// endEvent is how E2B reports an exit.
func endEvent(info *protocol.ProcInfo) *process.ProcessEvent {
	end := &process.ProcessEvent_EndEvent{ExitCode: int32(info.ExitCode), Exited: info.Signal == "", Status: fmt.Sprintf("exit status %d", info.ExitCode)}
	if info.Signal != "" {
		end.ExitCode = -1
		end.Status = "signal: " + strings.ToLower(strings.TrimPrefix(info.Signal, "SIG"))
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
}

func dataEvent(stream string, p []byte) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	switch stream {
	case protocol.StreamStderr:
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: slices.Clone(p)}
	case "pty":
		d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: slices.Clone(p)}
	default:
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: slices.Clone(p)}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

// follow streams pid's output and its end to send, from the start. The
// key the request acts as is looked at again every readmitEvery: a stream
// ends with its key.
func (e *envd) follow(ctx context.Context, c *link.Client, pid int, pty bool, sendEvent func(*process.ProcessEvent) error) error {
	var info *protocol.ProcInfo
	var err error
	checked := time.Now()
	readAction := gate.ProcessRead
	if pty {
		readAction = gate.TerminalOpen
	}
	send := func(ev *process.ProcessEvent) error {
		if time.Since(checked) >= readmitEvery {
			if err := e.stillAdmitted(ctx, readAction); err != nil {
				return err
			}
			checked = time.Now()
		}
		return sendEvent(ev)
	}
	if pty {
		var res *protocol.PtyReadResult
		res, err = c.PtyFollow(ctx, pid, 0, false, func(stream string, _ int64, p []byte) error {
			if stream == protocol.StreamGap {
				return nil
			}
			return send(dataEvent("pty", p))
		})
		if res != nil {
			info = res.Info
		}
	} else {
		info, err = c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: pid, Follow: true}, func(stream string, _ int64, p []byte) error {
			if stream == protocol.StreamGap || len(p) == 0 {
				return nil
			}
			return send(dataEvent(stream, p))
		})
	}
	if err != nil {
		return connectError(err)
	}
	if info == nil {
		return connect.NewError(connect.CodeInternal, errors.New("the process ended without a status"))
	}
	return send(endEvent(info))
}

// readmitEvery is how often an open output stream looks at its key again.
const readmitEvery = 5 * time.Second

// stillAdmitted reports an error when the key an envd request acts as has
// been removed (or made again) since the request began, or may no longer
// do action on the sandbox (its scopes, or its selector against the
// sandbox's labels now).
func (e *envd) stillAdmitted(ctx context.Context, action gate.Action) error {
	k, _ := ctx.Value(keyCtx{}).(*apikey.Key)
	if k == nil || e.s.opts.Keys == nil {
		return nil
	}
	now, err := e.s.opts.Keys.Named(k.Name)
	if err != nil || now == nil || now.Hash != k.Hash {
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("key %s was removed: its envd token is void", k.Name))
	}
	p := now.Principal()
	p.Name += " via e2b-envd"
	return connectError(e.s.allow(context.WithValue(ctx, principalKey{}, p), envdSandbox(ctx), action, "an open envd stream, looked at again"))
}

// onProcess finds process pid and asks the gate for action on it, or for
// terminal when it is a PTY: what a request may do to a process depends
// on what the process is, not on how the request calls it.
func (e *envd) onProcess(ctx context.Context, c *link.Client, t envdTarget, pid int, action, terminal gate.Action, detail string) (*protocol.ProcInfo, error) {
	p, err := findProcess(ctx, c, t.id, pid)
	if err != nil {
		return nil, connectError(err)
	}
	if p.Pty {
		action = terminal
	}
	return p, e.allow(ctx, action, detail)
}

func (e *envd) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	// A PTY is a terminal, as the native API's: its scope is terminals.
	pty := req.Msg.Pty != nil
	action := gate.ProcessStart
	if pty {
		action = gate.TerminalOpen
	}
	c, t, err := e.client(ctx, action, "envd Process.Start")
	if err != nil {
		return err
	}
	cmd, err := commandOf(req.Msg.GetProcess())
	if err != nil {
		return connectError(err)
	}
	if len(req.Msg.GetTag()) > maxTagLen {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a tag of %d bytes: at most %d", len(req.Msg.GetTag()), maxTagLen))
	}
	var info *protocol.ProcInfo
	if pty {
		size := req.Msg.GetPty().GetSize()
		info, err = c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: cmd, Cols: int(size.GetCols()), Rows: int(size.GetRows())})
	} else {
		info, err = c.ProcStart(ctx, &protocol.ProcStartArgs{Command: cmd, Stdin: req.Msg.Stdin == nil || req.Msg.GetStdin()})
	}
	if err != nil {
		return connectError(err)
	}
	if tag := req.Msg.GetTag(); tag != "" {
		e.tag(ctx, t, tag, info.PID)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(info.PID)}}}); err != nil {
		return err
	}
	err = e.follow(ctx, c, info.PID, pty, send)
	if tag := req.Msg.GetTag(); tag != "" {
		// Ended, its tag names nothing any more (and the map does not grow
		// with every tagged command a sandbox ever ran). A stream the
		// client dropped leaves a command that runs on, and its tag.
		ended := err == nil
		if !ended {
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			p, ferr := findProcess(qctx, c, t.id, info.PID)
			cancel()
			ended = ferr == nil && !p.Running
		}
		if ended {
			e.untag(t, tag, info.PID)
		}
	}
	return err
}

func (e *envd) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	c, t, err := e.client(ctx, gate.ProcessRead, "envd Process.Connect")
	if err != nil {
		return err
	}
	pid, err := e.pidOf(t, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	info, err := e.onProcess(ctx, c, t, pid, gate.ProcessRead, gate.TerminalOpen, "envd Process.Connect")
	if err != nil {
		return err
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(pid)}}}); err != nil {
		return err
	}
	return e.follow(ctx, c, pid, info.Pty, send)
}

func (e *envd) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	c, t, err := e.client(ctx, gate.ProcessRead, "envd Process.List")
	if err != nil {
		return nil, err
	}
	procs, err := c.ProcList(ctx)
	if err != nil {
		return nil, connectError(err)
	}
	tags := map[int]string{}
	e.mu.Lock()
	for tag, pid := range e.tags[t] {
		tags[pid] = tag
	}
	e.mu.Unlock()
	out := &process.ListResponse{}
	for _, p := range procs {
		if !p.Running {
			continue
		}
		pi := &process.ProcessInfo{Pid: uint32(p.PID), Config: &process.ProcessConfig{}}
		if len(p.Argv) > 0 {
			pi.Config.Cmd, pi.Config.Args = p.Argv[0], p.Argv[1:]
		}
		if p.Cwd != "" {
			cwd := p.Cwd
			pi.Config.Cwd = &cwd
		}
		if tag, ok := tags[p.PID]; ok {
			pi.Tag = &tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

// input writes in to pid (its PTY, or its stdin), once the gate allows
// it (onProcess).
func (e *envd) input(ctx context.Context, c *link.Client, pid int, in *process.ProcessInput) error {
	var err error
	switch {
	case in == nil:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no input"))
	case in.GetPty() != nil:
		err = c.PtyWrite(ctx, pid, in.GetPty())
	default:
		err = c.ProcInput(ctx, pid, in.GetStdin(), false)
	}
	return connectError(err)
}

func (e *envd) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	c, t, err := e.client(ctx, gate.Read, "envd Process.SendInput")
	if err != nil {
		return nil, err
	}
	pid, err := e.pidOf(t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := e.onProcess(ctx, c, t, pid, gate.ProcessInput, gate.TerminalInput, "envd Process.SendInput"); err != nil {
		return nil, err
	}
	if err := e.input(ctx, c, pid, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (e *envd) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	c, t, err := e.client(ctx, gate.Read, "envd Process.StreamInput")
	if err != nil {
		return nil, err
	}
	pid := 0
	inAction := gate.ProcessInput
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			if pid, err = e.pidOf(t, ev.Start.GetProcess()); err != nil {
				return nil, err
			}
			p, err := e.onProcess(ctx, c, t, pid, gate.ProcessInput, gate.TerminalInput, "envd Process.StreamInput")
			if err != nil {
				return nil, err
			}
			if p.Pty {
				inAction = gate.TerminalInput
			}
		case *process.StreamInputRequest_Data:
			if pid == 0 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start event"))
			}
			if err := e.stillAdmitted(ctx, inAction); err != nil {
				return nil, err
			}
			if err := e.input(ctx, c, pid, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (e *envd) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	c, t, err := e.client(ctx, gate.Read, "envd Process.CloseStdin")
	if err != nil {
		return nil, err
	}
	pid, err := e.pidOf(t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := e.onProcess(ctx, c, t, pid, gate.ProcessInput, gate.TerminalInput, "envd Process.CloseStdin"); err != nil {
		return nil, err
	}
	if err := c.ProcInput(ctx, pid, nil, true); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (e *envd) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	c, t, err := e.client(ctx, gate.Read, "envd Process.SendSignal")
	if err != nil {
		return nil, err
	}
	pid, err := e.pidOf(t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := e.onProcess(ctx, c, t, pid, gate.ProcessSignal, gate.TerminalControl, "envd Process.SendSignal"); err != nil {
		return nil, err
	}
	sig := "TERM"
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case process.Signal_SIGNAL_SIGTERM:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: send SIGTERM or SIGKILL", req.Msg.GetSignal()))
	}
	if err := c.ProcSignal(ctx, pid, sig); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (e *envd) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	c, t, err := e.client(ctx, gate.TerminalControl, "envd Process.Update")
	if err != nil {
		return nil, err
	}
	pid, err := e.pidOf(t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := c.PtyResize(ctx, pid, int(size.GetCols()), int(size.GetRows())); err != nil {
			return nil, connectError(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// The filesystem service.

type envdFS struct{ e *envd }

func entryOf(fi *protocol.FileInfo, p string) *filesystem.EntryInfo {
	ei := &filesystem.EntryInfo{Name: fi.Name, Path: p, Size: fi.Size, Mode: fi.Mode & 0o7777,
		Permissions: permString(fi), ModifiedTime: timestamppb.New(fi.ModTime), Owner: "user", Group: "user"}
	switch fi.Type {
	case "dir":
		ei.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		ei.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		t := fi.Target
		ei.SymlinkTarget = &t
	default:
		ei.Type = filesystem.FileType_FILE_TYPE_FILE
	}
	if ei.Name == "" {
		ei.Name = path.Base(p)
	}
	return ei
}

// permString is ls's form of fi's mode: drwxr-xr-x.
func permString(fi *protocol.FileInfo) string {
	b := []byte("-rwxrwxrwx")
	switch fi.Type {
	case "dir":
		b[0] = 'd'
	case "symlink":
		b[0] = 'l'
	}
	for i := 0; i < 9; i++ {
		if fi.Mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	return string(b)
}

func (f envdFS) stat(ctx context.Context, c *link.Client, p string) (*filesystem.EntryInfo, error) {
	fi, err := c.Lstat(ctx, p)
	if err != nil {
		return nil, connectError(err)
	}
	return entryOf(fi, p), nil
}

func (f envdFS) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	c, _, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.Stat")
	if err != nil {
		return nil, err
	}
	ei, err := f.stat(ctx, c, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: ei}), nil
}

func (f envdFS) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	c, _, err := f.e.client(ctx, gate.FileWrite, "envd Filesystem.MakeDir")
	if err != nil {
		return nil, err
	}
	p := req.Msg.GetPath()
	if ok, err := c.Exists(ctx, p); err == nil && ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s exists", p))
	}
	if _, err := c.Mkdir(ctx, p); err != nil {
		return nil, connectError(err)
	}
	ei, err := f.stat(ctx, c, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: ei}), nil
}

func (f envdFS) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	c, _, err := f.e.client(ctx, gate.FileWrite, "envd Filesystem.Move")
	if err != nil {
		return nil, err
	}
	if err := c.Move(ctx, &protocol.MoveArgs{From: req.Msg.GetSource(), To: req.Msg.GetDestination()}); err != nil {
		return nil, connectError(err)
	}
	ei, err := f.stat(ctx, c, req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: ei}), nil
}

// maxListDepth bounds ListDir's depth, and maxListEntries its answer.
const (
	maxListDepth   = 16
	maxListEntries = 100000
)

func (f envdFS) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	c, _, err := f.e.client(ctx, gate.FileRead, "envd Filesystem.ListDir")
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth %d: at most %d", depth, maxListDepth))
	}
	out := &filesystem.ListDirResponse{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := c.List(ctx, dir)
		if err != nil {
			return connectError(err)
		}
		for i := range entries {
			p := path.Join(dir, entries[i].Name)
			out.Entries = append(out.Entries, entryOf(&entries[i], p))
			if len(out.Entries) > maxListEntries {
				return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("more than %d entries under %s", maxListEntries, req.Msg.GetPath()))
			}
			if entries[i].Type == "dir" && level < depth {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(req.Msg.GetPath(), 1); err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

func (f envdFS) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	c, _, err := f.e.client(ctx, gate.FileWrite, "envd Filesystem.Remove")
	if err != nil {
		return nil, err
	}
	if err := c.Remove(ctx, req.Msg.GetPath(), true); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// envdRoutes mounts the envd plane under E2BSandboxPrefix.
func (s *Server) envdRoutes(mux *http.ServeMux) {
	e := &envd{s: s, tags: map[envdTarget]map[string]int{}}
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxConnectMessage)}
	for _, h := range []func() (string, http.Handler){
		func() (string, http.Handler) { return processconnect.NewProcessHandler(e, opts...) },
		func() (string, http.Handler) { return filesystemconnect.NewFilesystemHandler(envdFS{e}, opts...) },
	} {
		p, handler := h()
		handler = http.StripPrefix(E2BSandboxPrefix, handler)
		mux.HandleFunc(E2BSandboxPrefix+p, func(w http.ResponseWriter, r *http.Request) {
			// Its streams end when the daemon stops, as the native API's.
			ctx, done := s.streamContext(r)
			defer done()
			handler.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	mux.HandleFunc("GET "+E2BSandboxPrefix+"/health", s.envdHealth)
	mux.HandleFunc("GET "+E2BSandboxPrefix+"/envs", s.envdEnvs)
	mux.HandleFunc("GET "+E2BSandboxPrefix+"/files", s.envdDownload)
	mux.HandleFunc("POST "+E2BSandboxPrefix+"/files", s.envdUpload)
}

// envdHealth answers 204 while the sandbox's agent answers (what the SDKs'
// isRunning asks), 502 otherwise, as E2B's proxy does for a sandbox that
// is gone.
func (s *Server) envdHealth(w http.ResponseWriter, r *http.Request) {
	id := envdSandbox(r.Context())
	if err := s.allow(r.Context(), id, gate.Read, "envd /health"); err != nil {
		writeE2BFailure(w, err)
		return
	}
	ctx := link.Quiet(r.Context()) // an inspection: it wakes no paused sandbox
	c, err := s.client(ctx, id)
	if err == nil {
		_, err = c.Health(ctx)
	}
	if err != nil {
		writeE2BError(w, http.StatusBadGateway, "sandbox %s is not running: %v", id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxEnvs bounds what /envs reads of the environment (the neuron answers).
const maxEnvs = 1 << 20

// envdEnvs answers the environment a sandbox's commands start with (GET
// /envs): what env prints in it, run as any command is (so the gate asks
// for exec). The neuron's answer is untrusted: bounded, and each
// name checked.
func (s *Server) envdEnvs(w http.ResponseWriter, r *http.Request) {
	id := envdSandbox(r.Context())
	if err := s.allow(r.Context(), id, gate.Exec, "envd /envs"); err != nil {
		writeE2BFailure(w, err)
		return
	}
	c, err := s.client(r.Context(), id)
	var res *link.ExecResult
	if err == nil {
		res, err = c.Exec(r.Context(), &link.ExecRequest{Command: protocol.Command{Argv: []string{"env", "-0"}}, MaxOutput: maxEnvs, Timeout: 10 * time.Second})
	}
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("env -0 in the sandbox: exit status %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		writeE2BFailure(w, err)
		return
	}
	envs := map[string]string{}
	for _, kv := range bytes.Split(res.Stdout, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok && protocol.ValidEnvName(k) {
			envs[k] = v
		}
	}
	writeJSON(w, http.StatusOK, envs)
}
