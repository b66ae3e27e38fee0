// Package process runs each neuron's agent as a plain child process of the
// host: the development mode of seed 000. It is NOT a security boundary —
// commands run as the operator and can read whatever the operator can — so
// it refuses to create neurons unless NSYS_CORTEX_ALLOW_INSECURE_DEV=1. Its
// only protections are a scrubbed environment and file operations confined
// to the neuron's workspace.
//
// Its overlay holds home/ (the commands' $HOME), home/workspace (the
// workdir, and the root of file operations) and tmp/ ($TMPDIR); the common
// lifecycle (internal/sandbox/internal/lifecycle) does the rest.
//
// Its in-neuron half is the ordinary agent alone (internal/agent, started
// as cmd/cortex-agent with --channel-dir): there is no PID 1 of the
// neuron's and nothing confines it; the agent serves the channel and
// keeps file operations beneath the workspace.
package process

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Mode is this backend's name.
const Mode = "process"

// Backend registers process mode.
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: 0, Isolating: false,
		New:       func(env sandbox.Env) (sandbox.Manager, error) { return New(env), nil },
		SelfCheck: SelfCheck,
	}
}

// New returns a process-mode manager.
func New(env sandbox.Env) *lifecycle.Manager { return lifecycle.New(env, runtime{}) }

var _ sandbox.Manager = (*lifecycle.Manager)(nil)
var _ sandbox.OrphanCleaner = (*lifecycle.Manager)(nil)

var _ lifecycle.ChannelGrouper = runtime{}

// runtime is process mode's part of the lifecycle.
type runtime struct{}

func (runtime) Mode() string { return Mode }

// ChannelGroup: process mode's channel directories are sockets/<id>
// itself, where they were before other modes had theirs in a directory of
// their own; a running agent is found there by its --channel-dir.
func (runtime) ChannelGroup() string { return "" }

// ChannelDir is where process mode keeps neuron id's channel directory.
func ChannelDir(lay layout.Layout, id string) string {
	return lay.ChannelDir(runtime{}.ChannelGroup(), id)
}

func (runtime) Allow() error {
	if !sandbox.AllowInsecure() {
		return &sandbox.UnavailableError{Mode: Mode, Reason: "process mode is not a security boundary: commands run as you " +
			"and can read your files. Set NSYS_CORTEX_ALLOW_INSECURE_DEV=1 to acknowledge that, or use an isolating mode"}
	}
	return nil
}

// DataPaths: the neuron's home, a host directory of its own, as diff
// compares it (at its path on the host, which is where the neuron sees it).
func (runtime) DataPaths(lay layout.Layout, id string) []lifecycle.DataPath {
	return []lifecycle.DataPath{{At: home(lay, id), Rel: "home"}}
}

func home(lay layout.Layout, id string) string { return filepath.Join(lay.OverlayDir(id), "home") }

func (runtime) Workdir(lay layout.Layout, id string) string {
	return filepath.Join(home(lay, id), "workspace")
}

// HostView: the agent's root is the workspace, a host directory, so the
// host copies large files there itself.
// PassesFiles: the agent dials the host's socket itself.
func (r runtime) PassesFiles() bool { return true }

func (r runtime) HostView(lay layout.Layout, id string) *link.HostView {
	w := r.Workdir(lay, id)
	return &link.HostView{Neuron: w, Host: w}
}

// Prepare makes the workspace and tmp directories. Process mode enforces no
// policy: a network or resource policy other than the defaults is refused,
// and what it runs under is the host's network with no ceilings.
func (r runtime) Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error) {
	if err := opts.Refuse(Mode, "process mode isolates nothing"); err != nil {
		return sandbox.Policy{}, err
	}
	for _, d := range []string{r.Workdir(lay, id), filepath.Join(lay.OverlayDir(id), "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return sandbox.Policy{}, err
		}
	}
	// Nothing here denies user namespaces: programs may make them where the
	// host lets its users.
	return sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkFull}, NestedUserns: true}, nil
}

// Start runs the agent detached from the caller's session (so it outlives
// this process) with a scrubbed environment.
func (r runtime) Start(req *lifecycle.StartRequest) (*exec.Cmd, error) {
	env := sandbox.AgentEnv(os.Environ(), append([]string{
		"HOME=" + home(req.Layout, req.ID), "TMPDIR=" + filepath.Join(req.Layout.OverlayDir(req.ID), "tmp"),
		"NSYS_CORTEX_NEURON=" + req.ID, "SHELL=/bin/sh",
	}, req.Options.Env...)...)
	if !hasKey(env, "PATH") {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	secret, err := boot.SecretPipe(req.Secret)
	if err != nil {
		return nil, err
	}
	defer secret.Close()
	cmd := &exec.Cmd{
		Path: req.AgentBin,
		Args: []string{req.AgentBin, "--id", req.ID, "--channel-dir", req.SocketDir, "--root", req.Workdir,
			"--workdir", req.Workdir, "--subreaper", boot.SecretFDFlag, "3"},
		Env: env, Dir: req.Workdir, Stdout: req.Log, Stderr: req.Log, ExtraFiles: []*os.File{secret},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", req.AgentBin, err)
	}
	return cmd, nil
}

func (runtime) Released(layout.Layout, string) {}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// SelfCheck reports what process mode needs: the agent binary, and the
// operator's acknowledgement that it isolates nothing.
func SelfCheck(_ context.Context, env sandbox.Env) sandbox.Check {
	c := sandbox.Check{Mode: Mode}
	bin, err := env.AgentBinary()
	agentOK := err == nil
	detail := bin
	if err != nil {
		detail = err.Error()
	}
	c.Items = append(c.Items, sandbox.CheckItem{Name: "cortex-agent", OK: agentOK, Detail: detail})
	gate := sandbox.AllowInsecure()
	gd := "set: you acknowledged that process mode is not a security boundary"
	if !gate {
		gd = "not set: process mode runs commands as you, with your files; set NSYS_CORTEX_ALLOW_INSECURE_DEV=1 to use it"
	}
	c.Items = append(c.Items, sandbox.CheckItem{Name: sandbox.EnvAllowInsecure, OK: gate, Detail: gd})
	c.OK = agentOK && gate
	switch {
	case !agentOK:
		c.Summary = "cortex-agent not found"
	case !gate:
		c.Summary = "works here, but refuses to run until NSYS_CORTEX_ALLOW_INSECURE_DEV=1 (no isolation)"
	default:
		c.Summary = "ready (no isolation: development only)"
	}
	return c
}

var _ lifecycle.Freezer = runtime{}

// Freeze stops the agent and its commands with SIGSTOP: best effort, like
// the mode (a process that left the agent's session is not found, and a
// command may catch none of this but may be sent SIGCONT by a process of
// the operator's).
func (runtime) Freeze(_ context.Context, _ layout.Layout, id string, st *sandbox.State) error {
	return signalNeuron(id, st, syscall.SIGSTOP)
}

// Thaw continues what Freeze stopped.
func (runtime) Thaw(_ context.Context, _ layout.Layout, id string, st *sandbox.State) error {
	return signalNeuron(id, st, syscall.SIGCONT)
}

// signalNeuron sends sig to the agent and to every process of its session
// that carries the neuron's mark; twice, for what forked meanwhile.
func signalNeuron(id string, st *sandbox.State, sig syscall.Signal) error {
	if !store.Alive(st.PID, st.PIDStart) {
		return &sandbox.NotRunningError{ID: id, Reason: "its agent is gone"}
	}
	mark := "NSYS_CORTEX_NEURON=" + id
	for range 2 {
		for _, p := range store.SessionMembers(st.PID) {
			if p == st.PID || store.HasEnv(p, mark) {
				syscall.Kill(p, sig)
			}
		}
	}
	return nil
}
