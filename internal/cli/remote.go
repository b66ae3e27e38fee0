package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// channel is what the commands do in a running neuron: the channel
// itself (*link.Client) locally, or the HTTP API through the SDK.
type channel interface {
	Exec(ctx context.Context, r *link.ExecRequest) (*link.ExecResult, error)
	ProcStart(ctx context.Context, args *protocol.ProcStartArgs) (*protocol.ProcInfo, error)
	ProcList(ctx context.Context) ([]protocol.ProcInfo, error)
	ProcAttach(ctx context.Context, args *protocol.ProcAttachArgs, out link.OutputFunc) (*protocol.ProcInfo, error)
	ProcSignal(ctx context.Context, pid int, signal string) error
	Health(ctx context.Context) (*protocol.HealthResult, error)
	WriteFileFrom(ctx context.Context, p string, r io.Reader, o *link.WriteOptions) (int64, error)
	ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error)
	Stat(ctx context.Context, p string) (*protocol.FileInfo, error)
	Lstat(ctx context.Context, p string) (*protocol.FileInfo, error)
	List(ctx context.Context, p string) ([]protocol.FileInfo, error)
	Mkdir(ctx context.Context, p string) (string, error)
	Symlink(ctx context.Context, target, p string) error
	Remove(ctx context.Context, p string, recursive bool) error
}

var _ channel = (*link.Client)(nil)
var _ channel = (*remoteChannel)(nil)

// apiClient returns the SDK client of the daemon the CLI is pointed at
// (--api, NSYS_CORTEX_API_URL, api.url), or nil to work locally.
func (a *App) apiClient() (*cortex.Client, error) {
	if a.api != nil || a.apiURL == "" && a.apiChecked {
		return a.api, nil
	}
	a.apiChecked = true
	url := a.apiURL
	if url == "" {
		cfg, err := a.loadConfig()
		if err != nil {
			return nil, err
		}
		url = cfg.String("api.url")
	}
	if url == "" {
		return nil, nil
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	token := cfg.String("api.token")
	if token == "" {
		// A daemon of this home made its own token: read it.
		if lay, err := layout.FromEnv(); err == nil {
			if token, err = localToken(lay, false); err != nil {
				return nil, err
			}
		}
	}
	c, err := cortex.New(url, cortex.WithToken(token))
	if err != nil {
		return nil, err
	}
	if a.kubePortForward.set {
		// The daemon's neurons are the daemon's: its own configuration
		// says how it reaches their pods.
		fmt.Fprintf(a.Stderr, "nsys-cortex: --kube-port-forward does nothing for the daemon at %s: set kube.port_forward where it runs\n", url)
	}
	a.api = c
	return c, nil
}

// stateOf is the local form of the API's view of a neuron.
func stateOf(n *cortex.Neuron) *sandbox.State {
	st := &sandbox.State{ID: n.ID, Mode: n.Mode, Status: sandbox.Status(n.Status), PID: n.PID, Workdir: n.Workdir,
		CreatedAt: n.CreatedAt, AgentVersion: n.AgentVersion}
	if n.Owner != nil {
		st.Owner = &sandbox.Owner{PID: n.Owner.PID, Command: n.Owner.Command, Since: n.Owner.Since}
	}
	if p := n.Policy; p != nil {
		st.Policy = &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkMode(p.Network.Mode), Allow: p.Network.Allow},
			Limits: sandbox.Limits(p.Limits), Image: p.Image, NestedUserns: p.NestedUserns}
		for _, s := range p.Secrets {
			st.Policy.Secrets = append(st.Policy.Secrets, sandbox.SecretPolicy{Name: s.Name, Hosts: s.Hosts})
		}
	}
	st.Lifecycle = sandbox.Lifecycle{Labels: labels.Set(n.Labels).Clone(), Deadline: n.Deadline, PausedAt: n.PausedAt,
		Timeout: time.Duration(n.TimeoutMs) * time.Millisecond, OnTimeout: sandbox.TimeoutAction(n.OnTimeout),
		AutoPause: time.Duration(n.AutoPauseMs) * time.Millisecond, ForkedFrom: n.ForkedFrom, ForkedAt: n.ForkedAt}
	return st
}

// remoteFind finds a neuron by id or by a unique prefix of a generated id.
func remoteFind(ctx context.Context, c *cortex.Client, ref string, prefixes bool) (*sandbox.State, error) {
	if err := ids.Validate(ref); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	n, err := c.Get(ctx, ref)
	if err == nil {
		return stateOf(n), nil
	}
	if !errdefs.IsNotFound(err) || !prefixes || len(ref) < 3 {
		return nil, err
	}
	all, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	var match []string
	var found *cortex.Neuron
	for i := range all {
		if ids.Generated(all[i].ID) && strings.HasPrefix(all[i].ID, ref) {
			match, found = append(match, all[i].ID), &all[i]
		}
	}
	switch len(match) {
	case 0:
		return nil, &sandbox.NotFoundError{ID: ref}
	case 1:
		return stateOf(found), nil
	}
	return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("%q matches several neurons: %s", ref, strings.Join(match, ", "))}
}

// remoteChannel is a neuron's channel over the HTTP API.
type remoteChannel struct {
	n *cortex.NeuronClient
}

// maxRemoteStdin bounds the stdin an exec over the API carries (it
// travels in the request, read to its end first).
const maxRemoteStdin = 512 << 10

func (r *remoteChannel) Exec(ctx context.Context, req *link.ExecRequest) (*link.ExecResult, error) {
	er := &cortex.ExecRequest{Command: cortex.Command{Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Env: req.Env},
		MaxOutput: req.MaxOutput}
	switch {
	case req.Timeout == link.NoTimeout:
		er.TimeoutMs = -1
	case req.Timeout > 0:
		er.TimeoutMs = max(1, req.Timeout.Milliseconds())
	}
	if req.Stdin != nil {
		in, err := io.ReadAll(io.LimitReader(req.Stdin, maxRemoteStdin+1))
		if err != nil {
			return nil, err
		}
		if len(in) > maxRemoteStdin {
			return nil, fmt.Errorf("over the API, exec takes at most %d KiB of stdin: copy larger input in with cp, or give -n", maxRemoteStdin>>10)
		}
		er.Stdin, er.StdinBase64 = cortex.Encoded(in)
	}
	res := &link.ExecResult{}
	if req.Stdout == nil && req.Stderr == nil {
		out, err := r.n.Exec(ctx, er)
		if err != nil {
			return nil, err
		}
		res.Stdout, res.Stderr = out.Output()
		fill(res, out)
		return res, nil
	}
	s, err := r.n.ExecStream(ctx, er)
	if err != nil {
		return nil, err
	}
	stdout, stderr := req.Stdout, req.Stderr
	var ob, eb bytes.Buffer
	if stdout == nil {
		stdout = &ob
	}
	if stderr == nil {
		stderr = &eb
	}
	last, err := s.Copy(stdout, stderr)
	if err != nil {
		return nil, err
	}
	res.Stdout, res.Stderr = ob.Bytes(), eb.Bytes()
	fill(res, last.Result)
	return res, nil
}

func fill(res *link.ExecResult, out *cortex.ExecResult) {
	res.ExitCode, res.Signal, res.TimedOut = out.ExitCode, out.Signal, out.TimedOut
	res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	res.DurationUs = out.DurationMs * 1000
}

func (r *remoteChannel) ProcStart(ctx context.Context, args *protocol.ProcStartArgs) (*protocol.ProcInfo, error) {
	return r.n.Start(ctx, &cortex.StartRequest{Command: cortex.Command{Argv: args.Argv, Shell: args.Shell, Cwd: args.Cwd, Env: args.Env},
		Stdin: args.Stdin, RingBytes: args.RingBytes})
}

func (r *remoteChannel) ProcList(ctx context.Context) ([]protocol.ProcInfo, error) {
	return r.n.Processes(ctx)
}

func (r *remoteChannel) ProcAttach(ctx context.Context, args *protocol.ProcAttachArgs, out link.OutputFunc) (*protocol.ProcInfo, error) {
	s, err := r.n.Output(ctx, args.PID, cortex.OutputOptions{StdoutOffset: args.StdoutOffset, StderrOffset: args.StderrOffset, NoFollow: !args.Follow})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case "stdout", "stderr":
			err = out(ev.Type, ev.Chunk.Offset, ev.Chunk.Bytes())
		case "gap":
			err = out(protocol.StreamGap+":"+ev.Gap.Stream, ev.Gap.To, nil)
		case "end":
			return ev.Process, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (r *remoteChannel) ProcSignal(ctx context.Context, pid int, signal string) error {
	return r.n.Signal(ctx, pid, signal)
}

func (r *remoteChannel) Health(ctx context.Context) (*protocol.HealthResult, error) {
	return r.n.Health(ctx)
}

func (r *remoteChannel) WriteFileFrom(ctx context.Context, p string, src io.Reader, o *link.WriteOptions) (int64, error) {
	wo := &cortex.WriteOptions{}
	if o != nil {
		wo.Mode, wo.Parents = o.Mode, o.Parents
	}
	if f, ok := src.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			wo.Size = fi.Size()
		}
	}
	return r.n.WriteFile(ctx, p, src, wo)
}

func (r *remoteChannel) ReadFileTo(ctx context.Context, p string, w io.Writer) (int64, error) {
	return r.n.Download(ctx, p, w)
}

func (r *remoteChannel) Stat(ctx context.Context, p string) (*protocol.FileInfo, error) {
	return r.n.Stat(ctx, p)
}

func (r *remoteChannel) Lstat(ctx context.Context, p string) (*protocol.FileInfo, error) {
	return r.n.Lstat(ctx, p)
}

func (r *remoteChannel) List(ctx context.Context, p string) ([]protocol.FileInfo, error) {
	return r.n.List(ctx, p)
}

func (r *remoteChannel) Mkdir(ctx context.Context, p string) (string, error) {
	return r.n.Mkdir(ctx, p)
}

func (r *remoteChannel) Symlink(ctx context.Context, target, p string) error {
	return r.n.Symlink(ctx, target, p)
}

func (r *remoteChannel) Remove(ctx context.Context, p string, recursive bool) error {
	return r.n.Remove(ctx, p, recursive)
}

// pty runs command on a PTY wired to this terminal, through the channel
// or through the daemon's terminal WebSocket.
// It returns the command's exit status and the signal that ended it.
func (a *App) pty(ctx context.Context, c channel, neuron string, command protocol.Command, timeout time.Duration) (int, string, error) {
	switch c := c.(type) {
	case *link.Client:
		return a.runPty(ctx, c, neuron, command, timeout)
	case *remoteChannel:
		return a.runPtyRemote(ctx, c.n, command, timeout)
	}
	return 0, "", fmt.Errorf("no terminal over %T", c)
}

// runPtyRemote is runPty over the API's terminal WebSocket.
func (a *App) runPtyRemote(ctx context.Context, n *cortex.NeuronClient, command protocol.Command, timeout time.Duration) (int, string, error) {
	cols, rows, fd := a.ptySetup(&command)
	// Opened even when ctx ends meanwhile, then ended: a cancelled command
	// leaves no terminal running.
	octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	t, err := n.Terminal(octx, cortex.TerminalOptions{Command: cortex.Command{Argv: command.Argv, Shell: command.Shell,
		Cwd: command.Cwd, Env: command.Env}, Cols: cols, Rows: rows})
	ocancel()
	if err != nil {
		return 0, "", spawnError(err)
	}
	defer t.Close()
	if ctx.Err() != nil {
		t.Discard()
		t.Kill()
		t.Wait()
		return 0, "", ctx.Err()
	}
	restore, err := a.rawTerminal(func(w, h int) { t.Resize(w, h) })
	if err != nil {
		t.Kill()
		return 0, "", err
	}
	defer restore()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			k, err := a.Stdin.Read(buf)
			if k > 0 {
				if _, werr := t.Write(buf[:k]); werr != nil {
					return
				}
			}
			if err != nil {
				if fd < 0 {
					t.Write([]byte{4}) // ^D: end of input
				}
				return
			}
		}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(a.Stdout, t); copied <- err }()
	select {
	case err := <-copied:
		if err != nil {
			return 0, "", err
		}
		code, sig, err := t.Wait()
		return code, sig, err
	case <-ctx.Done():
		t.Kill() // leave no shell running behind an interrupted session
		return 0, "", ctx.Err()
	case <-expired:
		t.Kill()
		if fd >= 0 {
			fmt.Fprint(a.Stdout, "\r\n")
		}
		fmt.Fprintf(a.Stderr, "nsys-cortex: the command ran past --timeout %s and was killed\n", timeout)
		return ExitTimeout, "", nil
	}
}

// create creates neuron id locally (set) or through the daemon (set nil);
// it returns why the mode was chosen.
func (a *App) create(ctx context.Context, set *sandbox.Set, id, mode string, opts sandbox.CreateOptions) (*sandbox.State, string, error) {
	if set != nil {
		m, why, err := set.Resolve(ctx, mode)
		if err != nil {
			return nil, "", err
		}
		if err := a.authorize(ctx, gate.Create, id); err != nil {
			return nil, "", err
		}
		st, err := m.Create(ctx, id, opts)
		if st == nil {
			st = &sandbox.State{ID: id, Mode: m.Mode()}
		}
		return st, why, err
	}
	api, _ := a.apiClient()
	cr, err := api.Create(ctx, &cortex.CreateRequest{ID: id, Mode: mode, Env: opts.Env, Image: opts.Image,
		Network: cortex.Network{Mode: string(opts.Network.Mode), Allow: opts.Network.Allow}, Limits: cortex.Limits(opts.Limits),
		BootTimeoutMs: opts.BootTimeout.Milliseconds(), NestedUserns: opts.NestedUserns,
		Labels: opts.Labels, TimeoutMs: ceilMs(opts.Timeout), OnTimeout: string(opts.OnTimeout), AutoPauseMs: ceilMs(opts.AutoPause),
		Secrets: secretsOf(opts.Secrets)})
	if err != nil {
		return &sandbox.State{ID: id}, "", err
	}
	st := stateOf(&cr.Neuron)
	if !cr.Started {
		return st, "", &sandbox.AlreadyRunningError{State: st}
	}
	return st, cr.ModeReason, nil
}

// list lists the neurons whose labels match sel, locally or through the
// daemon.
func (a *App) list(ctx context.Context, sel labels.Selector) ([]*sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, err
	}
	if api == nil {
		set, err := a.sandboxes()
		if err != nil {
			return nil, err
		}
		all, err := set.List(ctx)
		if err != nil {
			return nil, err
		}
		out := all[:0]
		for _, st := range all {
			if sel.Matches(st.Labels) {
				out = append(out, st)
			}
		}
		return out, nil
	}
	all, err := api.List(ctx, cortex.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.State, len(all))
	for i := range all {
		out[i] = stateOf(&all[i])
	}
	return out, nil
}

// ceilMs is d in whole milliseconds, rounded up (the wire's unit: a
// timeout of 1.5 ms is not 1 ms, and never 0).
func ceilMs(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// find finds a neuron by id or unique prefix, with a channel to it when it
// runs (nil otherwise).
func (a *App) find(ctx context.Context, ref string) (*sandbox.State, channel, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, nil, err
	}
	if api != nil {
		st, err := remoteFind(ctx, api, ref, true)
		if err != nil || st.Status != sandbox.StatusRunning {
			return st, nil, err
		}
		return st, &remoteChannel{n: api.Neuron(st.ID)}, nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, nil, err
	}
	m, st, err := set.Find(ctx, ref)
	if err != nil || st.Status != sandbox.StatusRunning {
		return st, nil, err
	}
	if c, err := m.Connect(ctx, st.ID); err == nil {
		return st, c, nil
	}
	return st, nil, nil
}

// destroy destroys neuron id (never a prefix: destroy loses data).
func (a *App) destroy(ctx context.Context, id string, wipe bool) error {
	api, err := a.apiClient()
	if err != nil {
		return err
	}
	if api != nil {
		if err := ids.Validate(id); err != nil {
			return &sandbox.InvalidError{Reason: err.Error()}
		}
		return api.Destroy(ctx, id, wipe)
	}
	set, err := a.sandboxes()
	if err != nil {
		return err
	}
	m, st, err := set.FindExact(ctx, id)
	if err != nil {
		return err
	}
	if err := a.authorize(ctx, gate.Destroy, st.ID); err != nil {
		return err
	}
	return m.Destroy(ctx, st.ID, sandbox.DestroyOptions{Wipe: wipe})
}

// secretsOf is opts' secrets as the API takes them.
func secretsOf(list []sandbox.Secret) []cortex.Secret {
	var out []cortex.Secret
	for _, s := range list {
		out = append(out, cortex.Secret{Name: s.Name, Value: s.Value, Hosts: s.Hosts})
	}
	return out
}
