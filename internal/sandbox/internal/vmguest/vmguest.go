// Package vmguest is what the microVM backends (qemu, firecracker) share
// about the guest they boot from the same image: its environment, and the
// host's end of its network egress (see internal/agent/egress's tunnel).
package vmguest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The guest agent's identity: the unprivileged boot.VMAgentUser, or
// root where the guest's config says so (boot.VMConfig.Root; no create
// option grants it yet: docs/security.md).
const (
	Home     = boot.VMAgentHome
	RootHome = "/root"
)

// Proxy is where a VM neuron's programs find the egress proxy: a listener
// of the guest's PID 1 on the guest's loopback.
const Proxy = "127.0.0.1:3128"

// Env is the agent's environment inside the VM: the mode's own variables,
// the proxy's with network egress, and only what the operator granted by
// name on top. root says the agent runs as the guest's root.
func Env(id string, network sandbox.Network, granted []string, root bool) []string {
	home, user := Home, boot.VMAgentUser
	if root {
		home, user = RootHome, "root"
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home, "USER=" + user, "LOGNAME=" + user, "SHELL=/bin/sh", "LANG=C.UTF-8", "TMPDIR=/tmp",
		"NSYS_CORTEX_NEURON=" + id,
	}
	if network.Mode == sandbox.NetworkEgress {
		env = append(env, sandbox.ProxyEnv(Proxy, id)...)
	}
	return sandbox.AgentEnv(nil, append(env, granted...)...)
}

// Tunnel is the host's end of a VM neuron's egress: "cortex-agent
// egress-tunnel", which serves nsbox's enforcing proxy (the allow-list,
// the host's resolver read once, the host's own addresses refused to name
// rules) on every stream the guest opens, and ends with the VMM.
type Tunnel struct {
	AgentBin string   // the static cortex-agent on the host
	Log      *os.File // the neuron's log: the proxy's decisions
	Allow    []string // the allow-list
	// Cred, when set, is the identity the tunnel takes: started as root
	// (the agent binary may sit where that uid cannot reach it), it gives
	// root up before it reads a byte from the guest.
	Cred *syscall.Credential
	// Stream is the tunnel's one stream (a socket pair's end whose other
	// end is the VMM's: the tunnel ends when it closes). Or Listen is a
	// Unix socket the VMM connects to once per guest connection, and VMM
	// the process whose end ends the tunnel.
	Stream *os.File
	Listen string
	VMM    int
	// Stats, when set, is the file where the tunnel reports what it let
	// through (lifecycle.EgressStatsFile).
	Stats *os.File
	// MaxConns, when set, caps the connections the proxy serves at once
	// (each holds a stream's window of its memory while it works).
	MaxConns int
	// Secrets, when set, is boot.EgressTunnelSecrets' encoding: the
	// process reads it from a pipe (never its arguments or environment,
	// which other processes of its uid may read).
	Secrets []byte
}

// Start starts the tunnel. Its owner is the VMM (it ends with it); a
// goroutine of this process reaps it should this process outlive it.
func (t Tunnel) Start() error {
	cmd, err := t.start()
	if err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}

// Run starts the tunnel for a caller that owns it: end kills it (if it
// has not ended) and reaps it.
func (t Tunnel) Run() (end func(), err error) {
	cmd, err := t.start()
	if err != nil {
		return nil, err
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}, nil
}

// start starts the tunnel's process.
func (t Tunnel) start() (*exec.Cmd, error) {
	args := []string{"cortex-agent", "egress-tunnel"}
	if t.Cred != nil {
		args = append(args, "--uid", strconv.Itoa(int(t.Cred.Uid)), "--gid", strconv.Itoa(int(t.Cred.Gid)))
	}
	var files []*os.File
	switch {
	case t.Stream != nil && t.Listen == "":
		files = []*os.File{t.Stream} // boot.EgressTunnelFD
	case t.Stream == nil && t.Listen != "" && t.VMM > 0:
		args = append(args, "--listen", t.Listen, "--pid", strconv.Itoa(t.VMM))
	default:
		return nil, errors.New("egress tunnel: a stream, or a socket to listen on and the VMM's pid")
	}
	if t.MaxConns > 0 {
		args = append(args, "--max-conns", strconv.Itoa(t.MaxConns))
	}
	if t.Stats != nil {
		args = append(args, "--stats-fd", strconv.Itoa(3+len(files)))
		files = append(files, t.Stats)
	}
	var secrets *os.File
	if t.Secrets != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("egress: a pipe for the secrets: %w", err)
		}
		defer r.Close()
		secrets = w
		args = append(args, "--secrets-fd", strconv.Itoa(3+len(files)))
		files = append(files, r)
	}
	args = append(append(args, "--"), t.Allow...)
	cmd := &exec.Cmd{Path: t.AgentBin, Args: args, Env: []string{}, Dir: "/",
		Stdout: t.Log, Stderr: t.Log, ExtraFiles: files, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		if secrets != nil {
			secrets.Close()
		}
		return nil, fmt.Errorf("egress: starting the tunnel: %w", err)
	}
	if secrets != nil {
		// The process reads them whole before it serves; should it end
		// first, the write fails with EPIPE and the goroutine ends.
		go func() {
			secrets.Write(t.Secrets)
			secrets.Close()
		}()
	}
	return cmd, nil
}

// Network is the network policy of a VM neuron of mode that asked for n:
// none, or egress with its allow-list (enforced on the host, through the
// tunnel). Full network is refused: a VM has no network device and is
// never bridged to the host's network.
func Network(mode string, n sandbox.Network) (sandbox.Network, error) {
	if err := sandbox.CheckNetwork(n); err != nil {
		return sandbox.Network{}, err
	}
	switch n.Mode {
	case sandbox.NetworkFull:
		return sandbox.Network{}, &sandbox.UnenforceableError{Mode: mode, Policy: "network full",
			Reason: "a " + mode + " neuron has no network device, and this mode never bridges a VM to the host's network: " +
				"use network egress with an allow-list (enforced on the host), or --mode nsbox/docker for full network"}
	case sandbox.NetworkEgress:
		return sandbox.Network{Mode: sandbox.NetworkEgress, Allow: slices.Clone(n.Allow)}, nil
	}
	return sandbox.Network{Mode: sandbox.NetworkNone}, nil
}

// Pending holds, by neuron id, what the next start of a neuron does
// instead of a boot (the snapshot a Restore loads): the create that Restore
// runs finds it in the runtime's Start. The zero value is ready.
type Pending[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

// Get returns neuron id's pending start, or nil.
func (p *Pending[T]) Get(id string) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

// Set makes v neuron id's pending start; nil removes it.
func (p *Pending[T]) Set(id string, v *T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v == nil {
		delete(p.m, id)
		return
	}
	if p.m == nil {
		p.m = map[string]*T{}
	}
	p.m[id] = v
}
