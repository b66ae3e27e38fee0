// Package docker runs each neuron in a hardened container of a local
// Docker daemon, driven through the docker CLI (see docs/docker.md for why
// the CLI and not the Go client). The `docker run` command line is built by
// one pure function, RunArgs, which tests pin flag by flag.
//
// The channel is a Unix socket in the neuron's channel directory, which is
// bind-mounted into the container (the unix transport), or, where the
// daemon runs in a VM and no socket can be shared (Docker Desktop), TCP to
// a port the container publishes on the host's loopback, with a token
// (the tcp transport). A neuron's home, overlays/<id>/home, is its other
// mount and what persists; the root filesystem is the image's, read-only.
//
// Its in-neuron half is the agent itself as the container's PID 1
// (internal/agent, started with boot.ConfineFlag and its secret in
// boot.SecretEnv, internal/protocol/boot): it confines itself
// (internal/agent/confine), reaps orphans (--subreaper) and serves the
// channel. The container runtime does what a PID 1 of ours does elsewhere.
package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
)

// Mode is this backend's name.
const Mode = "docker"

// Settings, from the environment.
const (
	// EnvImage names the image neurons run (default DefaultImage).
	EnvImage = "NSYS_CORTEX_DOCKER_IMAGE"
	// EnvTransport is auto (default), unix or tcp.
	EnvTransport = "NSYS_CORTEX_DOCKER_TRANSPORT"
	// EnvNetwork names the docker network of a neuron with network full
	// (default: the daemon's default network).
	EnvNetwork = "NSYS_CORTEX_DOCKER_NETWORK"
	// DefaultImage is what `nsys-cortex image build` makes.
	DefaultImage = "nsys-cortex-neuron:latest"
)

// Default ceilings of a neuron that asks for none.
const (
	DefaultMemory = 2 << 30
	DefaultPids   = 1024
	tmpBytes      = 1 << 30
)

// Backend registers docker mode.
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: 20, Isolating: true,
		New:       func(env sandbox.Env) (sandbox.Manager, error) { return New(env), nil },
		SelfCheck: SelfCheck,
	}
}

// New returns a docker-mode manager.
func New(env sandbox.Env) *lifecycle.Manager {
	return lifecycle.New(env, &runtime{env: env})
}

type runtime struct {
	env sandbox.Env
	cgs cgroupCache // where containers' cgroups are (pause.go)
}

var (
	_ lifecycle.Runtime       = (*runtime)(nil)
	_ lifecycle.Tracker       = (*runtime)(nil)
	_ lifecycle.Dialer        = (*runtime)(nil)
	_ lifecycle.Explainer     = (*runtime)(nil)
	_ lifecycle.SocketOwner   = (*runtime)(nil)
	_ lifecycle.BootTimeouter = (*runtime)(nil)
)

func (r *runtime) Mode() string { return Mode }

func (r *runtime) Allow() error {
	if _, err := dockerBin(); err != nil {
		return &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
	}
	return nil
}

func (r *runtime) Workdir(layout.Layout, string) string { return Workspace }

// BootTimeout is a minute: a daemon with the vfs storage driver copies the
// whole image for every container before it starts (seconds for the
// 450 MB neuron image).
func (r *runtime) BootTimeout() time.Duration { return time.Minute }

// ContainerName is neuron id's container under lay; the home's tag
// (layout.Tag) tells this home's containers from another's on the same
// daemon.
func ContainerName(lay layout.Layout, id string) string {
	return "nsys-cortex-" + lay.Tag() + "-" + id
}

// DataPaths: the neuron's layer (its home), as diff compares it.
func (*runtime) DataPaths(layout.Layout, string) []lifecycle.DataPath {
	return []lifecycle.DataPath{{At: Home, Rel: "home"}}
}

// homeDir is the neuron's home on the host: on its disk of its own when it
// has one (whose mount is nosuid and nodev, which the container's bind of
// it keeps), else in its overlay directory.
func homeDir(lay layout.Layout, id string) string {
	if _, ok := disk.Size(lay, id); ok {
		return filepath.Join(disk.Dir(lay, id), "home")
	}
	return filepath.Join(lay.OverlayDir(id), "home")
}

// image is the image a neuron runs.
func image(opts sandbox.CreateOptions) string {
	switch {
	case opts.Image != "":
		return opts.Image
	case os.Getenv(EnvImage) != "":
		return os.Getenv(EnvImage)
	}
	return DefaultImage
}

// plan is a neuron's docker run, worked out from its options.
type plan struct {
	spec   RunSpec
	tcp    bool
	limits sandbox.Limits
	netw   sandbox.NetworkMode
}

func (r *runtime) plan(lay layout.Layout, id string, opts sandbox.CreateOptions) (*plan, error) {
	p := &plan{netw: sandbox.NetworkNone}
	network := "none"
	switch opts.Network.Mode {
	case sandbox.NetworkDefault, sandbox.NetworkNone:
		if len(opts.Network.Allow) > 0 {
			return nil, &sandbox.InvalidError{Reason: "a network allow-list goes with network egress (--allow alone implies it)"}
		}
	case sandbox.NetworkFull:
		network, p.netw = os.Getenv(EnvNetwork), sandbox.NetworkFull
	case sandbox.NetworkEgress:
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "network egress",
			Reason: "docker mode has no egress proxy (nsbox has one: --mode nsbox)"}
	default:
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("network %q: choose none, egress or full", opts.Network.Mode)}
	}
	if opts.NestedUserns {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "nested user namespaces",
			Reason: "docker's seccomp profile and dropped capabilities deny them, and this mode does not loosen its boundary: use --mode nsbox"}
	}
	if opts.Ctx != "" {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "a /ctx mount",
			Reason: "docker mode does not validate and bind the CortexFS mount yet: use --mode nsbox"}
	}
	transport, why, err := resolveTransport(context.Background())
	if err != nil {
		return nil, err
	}
	p.tcp = transport == "tcp"
	if p.tcp && network == "none" {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "network none",
			Reason: "the tcp transport (" + why + ") reaches the agent through a published port, and network none has no ports: " +
				"use --network full, or NSYS_CORTEX_DOCKER_TRANSPORT=unix where the daemon shares this machine's kernel"}
	}
	lim := opts.Limits
	if lim.MemoryBytes < 0 || lim.Pids < 0 || lim.CPUs < 0 {
		return nil, &sandbox.InvalidError{Reason: "resource limits must not be negative"}
	}
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = DefaultMemory
	}
	if lim.Pids == 0 {
		lim.Pids = DefaultPids
	}
	p.limits = lim
	img := image(opts)
	if strings.HasPrefix(img, "/") || strings.HasPrefix(img, ".") {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("docker mode runs an image by name, not the directory %s (nsbox takes directories)", img)}
	}
	uid, gid, err := lifecycle.AgentIdentity(lay, id)
	if err != nil {
		return nil, err
	}
	args := []string{"--id", id, "--root", "/", "--workdir", Workspace, "--subreaper", boot.ConfineFlag}
	if p.tcp {
		args = append(args, "--listen", fmt.Sprintf("0.0.0.0:%d", AgentPort))
	} else {
		args = append(args, "--channel-dir", ChannelDir)
	}
	// The root is read-only: what an agent installs goes to its home,
	// which persists (pip and npm are told so).
	env := sandbox.AgentEnv(nil, append([]string{
		"PATH=" + Home + "/.local/bin:" + Home + "/.npm-global/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + Home, "USER=agent", "LOGNAME=agent", "SHELL=/bin/sh", "LANG=C.UTF-8", "TMPDIR=/tmp",
		"NPM_CONFIG_PREFIX=" + Home + "/.npm-global", "PIP_USER=1", "PIP_BREAK_SYSTEM_PACKAGES=1",
		"NSYS_CORTEX_NEURON=" + id,
	}, opts.Env...)...)
	channel := lay.ChannelDir(Mode, id)
	if p.tcp {
		channel = ""
	}
	p.spec = RunSpec{Name: ContainerName(lay, id), ID: id, HomeTag: lay.Tag(), Image: img, UID: uid, GID: gid,
		Channel: channel, Home: homeDir(lay, id), Network: network, Publish: p.tcp,
		MemoryBytes: lim.MemoryBytes, Pids: lim.Pids, CPUs: lim.CPUs, TmpBytes: tmpBytes, Env: env, AgentArgs: args}
	if _, err := EnvFileContent(env); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	if _, err := RunArgs(p.spec); err != nil {
		return nil, &sandbox.InvalidError{Reason: err.Error()}
	}
	return p, nil
}

// Prepare checks the options and makes the neuron's home.
func (r *runtime) Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error) {
	hasData := func() bool { _, err := os.Stat(filepath.Join(lay.OverlayDir(id), "home")); return err == nil }
	diskBytes, err := disk.Provide(context.Background(), lay, id, Mode, opts.Limits.DiskBytes, r.env.DefaultDisk, hasData)
	if err != nil {
		return sandbox.Policy{}, err
	}
	p, err := r.plan(lay, id, opts)
	if err != nil {
		return sandbox.Policy{}, err
	}
	// The home is the container's to change: it and its workspace are
	// made and given over by descriptor, never through a link there.
	root := os.Getuid() == 0
	base := filepath.Dir(homeDir(lay, id))
	for _, rel := range []string{"home", "home/workspace"} {
		if err := hostfs.EnsureDir(base, rel, 0o755, p.spec.UID, p.spec.GID, root); err != nil {
			return sandbox.Policy{}, fmt.Errorf("the home of %s: %w", id, err)
		}
	}
	lim := p.limits
	lim.DiskBytes = diskBytes
	return sandbox.Policy{Network: sandbox.Network{Mode: p.netw}, Limits: lim, Image: p.spec.Image}, nil
}

// SocketOwner gives the channel to the container's uid when this process
// is root (the container never runs as root).
func (r *runtime) SocketOwner(lay layout.Layout, id string) (int, int, bool) {
	if os.Getuid() != 0 {
		return 0, 0, false
	}
	uid, gid, err := lifecycle.AgentIdentity(lay, id)
	if err != nil {
		return 0, 0, false
	}
	return uid, gid, true
}

// HostView: the neuron's home is a bind mount of overlays/<id>/home, so the
// host copies large files there itself (docker cp, too, works from the
// host's side of the container); the agent makes and places every file.
// PassesFiles: with the unix transport the agent dials the host's socket,
// bind-mounted into the container, itself (the tcp transport's connections
// carry no descriptors at all).
func (r *runtime) PassesFiles() bool { return true }

func (r *runtime) HostView(lay layout.Layout, id string) *link.HostView {
	return &link.HostView{Neuron: Home, Host: homeDir(lay, id)}
}

// Start runs `docker run --detach`: once the daemon has started the
// container, no process of this host's stays beside it (an attached
// client per neuron held 24 MiB RSS, 5 MiB PSS). What the agent prints
// stays with the daemon until SyncLog copies it into the neuron's log. The
// environment goes through a pipe the client reads as its env file, never
// through the command line.
func (r *runtime) Start(req *lifecycle.StartRequest) (*exec.Cmd, error) {
	p, err := r.plan(req.Layout, req.ID, req.Options)
	if err != nil {
		return nil, err
	}
	// The per-start secret goes in the environment the client reads from
	// the pipe: the agent (PID 1 of the container, non-dumpable from its
	// first moment) takes it out before it starts anything.
	content, err := EnvFileContent(append(p.spec.Env, boot.SecretEnv+"="+req.Secret))
	if err != nil {
		return nil, err
	}
	p.spec.EnvFile = "/dev/fd/3"
	args, err := RunArgs(p.spec)
	if err != nil {
		return nil, err
	}
	out, err := runDetached(args, content, req.Log)
	if err != nil && strings.Contains(out, "is already in use") {
		// A container of an earlier run that ended on its own.
		r.remove(req.Layout, req.ID)
		out, err = runDetached(args, content, req.Log)
	}
	if err != nil {
		// A container created but not started (a mount or a port docker
		// could not give it) or still starting when the client gave up
		// is not left behind.
		r.remove(req.Layout, req.ID)
		if e := r.Explain(req.Layout, req.ID, &sandbox.BootError{ID: req.ID, Log: out}); e != nil {
			return nil, e
		}
		return nil, err
	}
	return nil, nil
}

// runDetached runs `docker run --detach` (args), handing it env as its
// env file on descriptor 3, and returns what it printed on its standard
// error, which goes to log too.
func runDetached(args []string, env []byte, log *os.File) (string, error) {
	bin, err := dockerBin()
	if err != nil {
		return "", err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = io.MultiWriter(&errb, log)
	cmd.ExtraFiles = []*os.File{pr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return "", fmt.Errorf("starting %s: %w", bin, err)
	}
	pr.Close()
	// The client reads the whole env file before it talks to the daemon;
	// the pipe holds 64 KiB, so a larger environment is written as it
	// reads. The writer closes its end when done, or when the client
	// exits without reading (a write then fails).
	go func() {
		defer pw.Close()
		pw.Write(env)
	}()
	if err := cmd.Wait(); err != nil {
		msg := err.Error()
		for _, line := range strings.Split(errb.String(), "\n") {
			// docker's own words, not its hint to read its help
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "Run 'docker run --help'") {
				msg = strings.TrimPrefix(line, "docker: ")
			}
		}
		return errb.String(), fmt.Errorf("docker run: %s", msg)
	}
	return errb.String(), nil
}

// runTimeout bounds `docker run --detach`: the daemon creates and starts
// the container (with the vfs driver it copies the image first).
const runTimeout = 2 * time.Minute

// Released: Stop removed the container; nothing is held.
func (r *runtime) Released(layout.Layout, string) {}

// Link dials the agent of neuron id when the transport is tcp: the port
// docker published. The host presents the neuron's per-start secret as its
// token, and the agent proves it holds the same secret.
func (r *runtime) Link(lay layout.Layout, id string, o link.Options) (*link.Link, error) {
	if t, _, err := resolveTransport(context.Background()); err != nil {
		return nil, err
	} else if t != "tcp" {
		return nil, nil
	}
	o.Token = o.Secret
	name := ContainerName(lay, id)
	var mu sync.Mutex
	var addr string
	return link.Dial(func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if addr != "" {
			return addr, nil
		}
		out, err := docker(ctx, "port", name, fmt.Sprintf("%d/tcp", AgentPort))
		if err != nil {
			return "", err
		}
		a, err := loopbackAddr(out)
		if err == nil {
			addr = a
		}
		return a, err
	}, o), nil
}

// loopbackAddr picks the IPv4 address docker port printed.
func loopbackAddr(out string) (string, error) {
	for _, line := range strings.Fields(out) {
		host, port, err := net.SplitHostPort(line)
		if err != nil {
			continue
		}
		if host == "0.0.0.0" || host == "" {
			host = "127.0.0.1"
		}
		if ip := net.ParseIP(host); ip != nil && ip.To4() != nil {
			return net.JoinHostPort(host, port), nil
		}
	}
	return "", fmt.Errorf("docker port printed no IPv4 address: %q", out)
}

// Alive reports whether neuron st.ID's container runs.
func (r *runtime) Alive(lay layout.Layout, st *sandbox.State) (bool, error) {
	out, err := docker(context.Background(), "ps", "--quiet", "--filter", "name=^"+ContainerName(lay, st.ID)+"$",
		"--filter", "label="+LabelManaged+"=true")
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(out) != "" {
		return true, nil
	}
	// The agent may answer before the daemon has marked its container
	// running (its books lag the process under load): a container that
	// exists and is created or running is not stopped.
	state, err := docker(context.Background(), "container", "inspect", "--format", "{{.State.Status}}", ContainerName(lay, st.ID))
	if err != nil {
		if strings.Contains(err.Error(), "No such") {
			return false, nil
		}
		return false, err
	}
	switch strings.TrimSpace(state) {
	case "created", "running", "restarting", "paused":
		return true, nil
	}
	return false, nil
}

// Running lists this home's running neuron containers: one `docker ps`
// serves a whole list.
func (r *runtime) Running(lay layout.Layout) ([]lifecycle.Running, error) {
	out, err := docker(context.Background(), "ps", "--filter", "label="+LabelManaged+"=true",
		"--filter", "label="+LabelHome+"="+lay.Tag(), "--format", "{{.Label \""+LabelID+"\"}}")
	if err != nil {
		return nil, err
	}
	var running []lifecycle.Running
	for _, id := range strings.Fields(out) {
		running = append(running, lifecycle.Running{ID: id})
	}
	return running, nil
}

// Stop stops neuron id's container (SIGTERM to the agent, which ends its
// processes; SIGKILL after 5 s), and makes sure it is gone.
func (r *runtime) Stop(lay layout.Layout, id string, st *sandbox.State) {
	name := ContainerName(lay, id)
	ctx := context.Background()
	docker(ctx, "stop", "--time", "5", name) // an error: not running, or the daemon is down
	r.remove(lay, id)
	// Make sure the name is free, so that a create right after can take it.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := docker(ctx, "container", "inspect", "--format", "{{.Id}}", name); err != nil {
			break // no such container (or no daemon to ask)
		}
	}
	if st != nil && st.PID > 0 {
		// A neuron started by an earlier version has an attached client:
		// it exits once its container is gone; one that was only starting
		// may still wait for the daemon.
		if p, err := os.FindProcess(st.PID); err == nil && isClientOf(st.PID, name) {
			p.Signal(syscall.SIGKILL)
		}
	}
}

// remove removes neuron id's container, what it printed, to its last
// line, copied into the neuron's log first.
func (r *runtime) remove(lay layout.Layout, id string) {
	r.SyncLog(lay, id)
	docker(context.Background(), "rm", "--force", "--volumes", ContainerName(lay, id))
}

// isClientOf reports whether pid is a docker client running container name.
func isClientOf(pid int, name string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--name" && args[i+1] == name {
			return true
		}
	}
	return false
}

// Explain turns a failed boot into the error docker's words call for.
func (r *runtime) Explain(lay layout.Layout, id string, boot *sandbox.BootError) error {
	log := boot.Log
	switch {
	case strings.Contains(log, "No such image") || strings.Contains(log, "Unable to find image"):
		return &sandbox.InvalidError{Reason: fmt.Sprintf("the image of %s is not on this docker daemon (build it with `nsys-cortex image build`, "+
			"or pull it and set %s): %s", id, EnvImage, lastLine(log))}
	case daemonDown(log):
		return &sandbox.UnavailableError{Mode: Mode, Reason: "the docker daemon does not answer: " + lastLine(log)}
	case strings.Contains(log, "port is already allocated") || strings.Contains(log, "address already in use"):
		return &sandbox.InvalidError{Reason: "docker could not publish the agent's port: " + lastLine(log)}
	case strings.Contains(log, "no space left on device"):
		return &sandbox.CapacityError{Reason: "the docker daemon's disk is full: " + lastLine(log)}
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
