// Package nsbox runs each neuron in its own set of Linux namespaces (user,
// mount, pid, network, ipc, uts) with no daemon and no image registry: the
// default isolation on a fresh machine.
//
// The host starts `cortex-agent init` in new namespaces (Go clone flags; see
// docs/nsbox.md for why not bubblewrap). As PID 1 it mounts the neuron's
// root — a read-only base (the host's /usr and an /etc subset, or an image
// directory) under a writable overlay whose upper layer persists in
// overlays/<id>/ — with its own /proc, a minimal /dev and a private /tmp,
// pivots into it, and starts the agent in a nested user namespace as the
// unprivileged user "agent" (uid 1000) with no capabilities, no_new_privs
// and a seccomp filter. Resource ceilings come from cgroups (v2 or v1),
// with rlimits where no cgroup can be had. Network egress is an HTTP proxy
// that PID 1 serves on the neuron's loopback from the host's network
// namespace (see the egress package): the only way out.
//
// Its in-neuron half is internal/agent/nsboxinit, PID 1 (`cortex-agent
// init`): it reads the boot.NsboxConfig this package writes
// (internal/protocol/boot), builds the root, serves egress and starts,
// restarts and reaps the agent; the agent (internal/agent) then confines
// itself (internal/agent/confine: seccomp, Landlock) and serves the channel.
package nsbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Mode is this backend's name.
const Mode = "nsbox"

// Inside identity and paths.
const (
	AgentUID   = 1000
	AgentGID   = 1000
	AgentHome  = "/home/agent"
	Workspace  = AgentHome + "/workspace"
	ChannelDir = "/run/nsys-cortex"
	// EgressProxy is where a neuron with network egress finds its way
	// out: an HTTP proxy on its own loopback, named in its http_proxy and
	// https_proxy variables.
	EgressProxy = "127.0.0.1:3128"
)

// Backend registers nsbox.
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: 10, Isolating: true,
		New:       func(env sandbox.Env) (sandbox.Manager, error) { return New(env), nil },
		SelfCheck: SelfCheck,
	}
}

// New returns an nsbox manager.
func New(env sandbox.Env) *lifecycle.Manager {
	return lifecycle.New(env, &runtime{env: env})
}

var _ lifecycle.Runtime = (*runtime)(nil)
var _ lifecycle.SocketOwner = (*runtime)(nil)
var _ sandbox.AgentUIDer = (*runtime)(nil)

type runtime struct {
	env sandbox.Env
	mu  sync.Mutex
	// primed holds, per neuron being created, the end of its cgroup
	// priming (see cgroupSupport.prime).
	primed map[string]chan struct{}
}

func (r *runtime) Mode() string { return Mode }

// PassesFiles: the agent dials the host's socket, bind-mounted into the
// sandbox, itself.
func (r *runtime) PassesFiles() bool { return true }

func (r *runtime) Allow() error {
	if c := probe(r.env); !c.userns.OK {
		return &sandbox.UnavailableError{Mode: Mode, Reason: c.userns.Detail}
	}
	return nil
}

func (r *runtime) Workdir(layout.Layout, string) string { return Workspace }

// AgentUID is the host uid of neuron st's agent. The state's PID is the
// sandbox's PID 1, which runs as root when the host does, and whose child
// is the agent under the neuron's own uid: a root PID is looked past to
// its first child that is not root (PID 1, then the agent, no deeper).
func (r *runtime) AgentUID(st *sandbox.State) int {
	if st.PID <= 0 {
		return -1
	}
	pid := st.PID
	for depth := 0; ; depth++ {
		uid := store.ProcUID(pid)
		if uid != 0 || depth == 2 {
			return uid
		}
		child := store.FirstChild(pid)
		if child <= 0 {
			return uid
		}
		pid = child
	}
}

// DataPaths: the neuron's layers, as diff compares them.
// Each host tree a neuron sees (/usr; /bin, /lib and the like where the
// host's / has not merged them into /usr) has an upper layer of its own.
func (*runtime) DataPaths(layout.Layout, string) []lifecycle.DataPath {
	out := []lifecycle.DataPath{{At: "/", Rel: "upper/root"}}
	for _, d := range hostTrees() {
		out = append(out, lifecycle.DataPath{At: d, Rel: "upper/" + strings.TrimPrefix(d, "/")})
	}
	return append(out, lifecycle.DataPath{At: "/usr/local", Rel: "usr-local"})
}

// The neuron's overlay directory holds:
//
//	upper/root, work/root   the root overlay (everything outside /usr)
//	upper/usr, work/usr     the /usr overlay (host base only)
//	usr-local/              the neuron's /usr/local (host base only)
//	root/                   the mount point of the new root
//	.uid                    the host uid the agent runs as
//	.cgroups                the cgroups it was put in
//
// With a disk ceiling (internal/disk), upper/, work/ and usr-local/ live on
// the neuron's own filesystem, mounted at disk/.
func upper(lay layout.Layout, id, layer string) string {
	return filepath.Join(dataDir(lay, id), "upper", layer)
}
func work(lay layout.Layout, id, layer string) string {
	return filepath.Join(dataDir(lay, id), "work", layer)
}

// usrLocal is the neuron's own /usr/local (the host's is left out: it holds
// what the host's administrator installed by hand).
func usrLocal(lay layout.Layout, id string) string {
	return filepath.Join(dataDir(lay, id), "usr-local")
}

// dataDir holds the neuron's data: its disk's mount point when it has a
// disk of its own, else its overlay directory.
func dataDir(lay layout.Layout, id string) string {
	if _, ok := disk.Size(lay, id); ok {
		return disk.Dir(lay, id)
	}
	return lay.OverlayDir(id)
}

// hasData reports whether neuron id has data outside a disk of its own.
func hasData(lay layout.Layout, id string) bool {
	_, err := os.Stat(filepath.Join(lay.OverlayDir(id), "upper"))
	return err == nil
}

// identity is who the neuron is on the host.
type identity struct {
	// outer is the host uid/gid of the sandbox's PID 1: the host process's
	// own (it must reach the home tree to mount from it).
	outerUID, outerGID int
	// agent is the host uid/gid the agent and its commands run as: the
	// host process's own when it is not root; when it is root, an
	// unprivileged uid of the neuron's own, so that nothing in a neuron is
	// root on the host or shares a uid with another neuron.
	agentUID, agentGID int
}

func (id identity) rootHost() bool { return id.outerUID == 0 }

// identityOf reads (or makes) the neuron's identity; it stays the same for
// the life of the overlay whatever the formula of later versions.
func identityOf(lay layout.Layout, id string) (identity, error) {
	uid, gid, err := lifecycle.AgentIdentity(lay, id)
	if err != nil {
		return identity{}, err
	}
	return identity{outerUID: os.Getuid(), outerGID: os.Getgid(), agentUID: uid, agentGID: gid}, nil
}

// SocketOwner gives the channel to the agent's host uid when it differs.
func (r *runtime) SocketOwner(lay layout.Layout, id string) (int, int, bool) {
	who, err := identityOf(lay, id)
	if err != nil || !who.rootHost() {
		return 0, 0, false
	}
	return who.agentUID, who.agentGID, true
}

// Prepare checks the policy can be enforced here, lays out the overlay and
// says what will be enforced.
func (r *runtime) Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error) {
	diskBytes, err := disk.Provide(context.Background(), lay, id, Mode, opts.Limits.DiskBytes, r.env.DefaultDisk, func() bool { return hasData(lay, id) })
	if err != nil {
		return sandbox.Policy{}, err
	}
	ceil, err := r.prepare(lay, id, opts)
	if err != nil {
		return sandbox.Policy{}, err
	}
	pol := sandbox.Policy{Network: opts.Network, Image: opts.Image, NestedUserns: opts.NestedUserns}
	for _, s := range opts.Secrets {
		pol.Secrets = append(pol.Secrets, sandbox.SecretPolicy{Name: s.Name, Hosts: slices.Clone(s.Hosts)})
	}
	if opts.Ctx != "" {
		if pol.CtxWritable, err = ctxExposure(lay, opts.Ctx); err != nil {
			return sandbox.Policy{}, err
		}
		pol.Ctx = opts.Ctx
	}
	if pol.Network.Mode == sandbox.NetworkDefault {
		pol.Network.Mode = sandbox.NetworkNone
	}
	if ceil.cgroup != nil {
		pol.Limits = ceil.cgroup.limits
	}
	for _, rl := range ceil.rlimits {
		if rl.Resource == unix.RLIMIT_NPROC {
			pol.Limits.Pids = int(rl.Value)
		}
	}
	pol.Limits.DiskBytes = diskBytes
	return pol, nil
}

func (r *runtime) prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (*ceilings, error) {
	if err := sandbox.CheckNetwork(opts.Network); err != nil {
		return nil, err
	}
	if opts.Network.Mode == sandbox.NetworkEgress {
		if p := probe(r.env); !p.egress.OK {
			return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "network egress", Reason: p.egress.Detail}
		}
	}
	ceil, err := r.ceilings(opts.Limits)
	if err != nil {
		return nil, err
	}
	if ceil.cgroup != nil {
		r.primeCgroups(id, ceil.cgroup.support)
	}
	who, err := identityOf(lay, id)
	if err != nil {
		return nil, err
	}
	if opts.Image != "" {
		if st, err := os.Stat(filepath.Join(opts.Image, "bin", "sh")); err != nil || st.IsDir() {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("image %s is not a root filesystem (it has no /bin/sh)", opts.Image)}
		}
	} else if _, err := ensureBase(lay); err != nil {
		return nil, fmt.Errorf("nsbox base root: %w", err)
	}
	layers := []string{"root"}
	if opts.Image == "" {
		layers = append(layers, "usr")
	}
	for _, l := range layers {
		for _, d := range []string{upper(lay, id, l), work(lay, id, l)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(lay.OverlayDir(id), "root"), 0o755); err != nil {
		return nil, err
	}
	// What the agent owns inside: its home, /opt, and /usr/local (a
	// directory of the neuron's own, not the host's), so that pip- and
	// npm-style installs land and persist.
	// Below the host's own directories (the upper layer, the neuron's
	// /usr/local) everything is the neuron's to change: each is made and
	// given to the agent by descriptor, never through a symlink there.
	type dir struct{ root, rel string }
	owned := []dir{{upper(lay, id, "root"), AgentHome}, {upper(lay, id, "root"), Workspace}, {upper(lay, id, "root"), "opt"}}
	if opts.Image == "" {
		owned = append(owned, dir{dataDir(lay, id), "usr-local"})
		for _, d := range []string{"bin", "sbin", "lib", "include", "share", "etc", "src"} {
			owned = append(owned, dir{usrLocal(lay, id), d})
		}
	}
	for _, d := range owned {
		if err := hostfs.EnsureDir(d.root, d.rel, 0o755, who.agentUID, who.agentGID, who.rootHost()); err != nil {
			return nil, fmt.Errorf("the neuron's %s: %w", d.rel, err)
		}
	}
	return ceil, writeNeuronEtc(upper(lay, id, "root"), id)
}

// primeCgroups starts priming the kernel's cgroup migration for neuron id
// while the rest of its create goes on; Start waits for it.
func (r *runtime) primeCgroups(id string, cg *cgroupSupport) {
	done := make(chan struct{})
	r.mu.Lock()
	if r.primed == nil {
		r.primed = map[string]chan struct{}{}
	}
	r.primed[id] = done
	r.mu.Unlock()
	go func() {
		defer close(done)
		cg.prime()
		r.mu.Lock()
		if r.primed[id] == done {
			delete(r.primed, id)
		}
		r.mu.Unlock()
	}()
}

// waitPrimed waits for the priming of id's cgroups, if it is under way.
func (r *runtime) waitPrimed(id string) {
	r.mu.Lock()
	done := r.primed[id]
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Start starts PID 1 of the sandbox in new namespaces, puts it in its
// cgroups, and then hands it its configuration.
func (r *runtime) Start(req *lifecycle.StartRequest) (*exec.Cmd, error) {
	lay, id, opts := req.Layout, req.ID, req.Options
	who, err := identityOf(lay, id)
	if err != nil {
		return nil, err
	}
	ceil, err := r.ceilings(opts.Limits)
	if err != nil {
		return nil, err
	}
	cfg, err := r.plan(req, who, ceil)
	if err != nil {
		return nil, err
	}
	flags := uintptr(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC)
	// With egress, PID 1 stays in the host's network namespace (it is the
	// way out) and makes the neuron's itself.
	if cfg.Network == "none" {
		flags |= syscall.CLONE_NEWNET
	}
	uids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: who.outerUID, Size: 1}}
	gids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: who.outerGID, Size: 1}}
	if who.rootHost() {
		uids = append(uids, syscall.SysProcIDMap{ContainerID: AgentUID, HostID: who.agentUID, Size: 1})
		gids = append(gids, syscall.SysProcIDMap{ContainerID: AgentGID, HostID: who.agentGID, Size: 1})
		cfg.OuterUID, cfg.OuterGID = AgentUID, AgentGID
	}
	// The configuration's way in: a socket, so that a warm neuron's PID 1
	// can answer its claim (boot.NsboxClaim) on it later.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's configuration socket: %w", err)
	}
	unix.SetNonblock(fds[0], true) // pollable: a claim's answer is waited for with a deadline
	pw, pr := os.NewFile(uintptr(fds[0]), "sandbox-config"), os.NewFile(uintptr(fds[1]), "sandbox-config")
	defer func() {
		if req.Control != pw {
			pw.Close()
		}
	}()
	files := []*os.File{pr} // boot.NsboxConfigFD
	if cfg.Egress != nil {
		// Its proxy's report of what it let through (the neuron's metrics).
		stats, err := lifecycle.EgressStatsFile(lay, id)
		if err != nil {
			pr.Close()
			return nil, err
		}
		defer stats.Close()
		files = append(files, stats) // boot.NsboxEgressStatsFD
		cfg.Egress.StatsFD = boot.NsboxEgressStatsFD
	}
	cmd := &exec.Cmd{
		Path: req.AgentBin,
		// --id and --channel-dir are not read by init; they let discovery
		// (and cleanup-orphans) recognise the neuron in /proc.
		Args:       []string{req.AgentBin, "init", "--id", id, "--channel-dir", req.SocketDir},
		Env:        []string{},
		Dir:        "/",
		Stdout:     req.Log,
		Stderr:     req.Log,
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:     true,
			Cloneflags: flags,
			// Set by the kernel for the new namespaces' first process.
			UidMappings: uids, GidMappings: gids, GidMappingsEnableSetgroups: false,
		},
	}
	err = cmd.Start()
	pr.Close()
	if err != nil {
		return nil, fmt.Errorf("starting the sandbox (%s): %w", req.AgentBin, err)
	}
	abort := func(err error) (*exec.Cmd, error) {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	// The sandbox builds its root while its cgroups are made; it starts
	// nothing before the go-ahead.
	enc := json.NewEncoder(pw)
	if err := enc.Encode(cfg); err != nil {
		return abort(fmt.Errorf("sending the sandbox its configuration: %w", err))
	}
	if ceil.cgroup != nil {
		r.waitPrimed(id)
		if err := ceil.cgroup.create(lay, id, cmd.Process.Pid); err != nil {
			return abort(err)
		}
	}
	if err := enc.Encode(boot.NsboxGoAhead); err != nil {
		return abort(fmt.Errorf("telling the sandbox to go ahead: %w", err))
	}
	if req.Warm {
		req.Control = pw
	}
	return cmd, nil
}

// CtxDir is where a CortexFS mount appears inside (CreateOptions.Ctx).
const CtxDir = "/ctx"

// ctxExposure checks that dir is a CortexFS mount and says whether the
// neuron may get it writable: only when it validates as the mount its
// record names (seed 003 §6). Anything else at dir is refused, loudly.
func ctxExposure(lay layout.Layout, dir string) (writable bool, err error) {
	if !filepath.IsAbs(dir) {
		return false, &sandbox.InvalidError{Reason: fmt.Sprintf("--ctx %s: give the mount's absolute path", dir)}
	}
	m, ok := ctxmount.MountAt(dir)
	if !ok || m.FSType != ctxmount.FSType || m.Source != ctxmount.FSSource {
		return false, &sandbox.InvalidError{Reason: fmt.Sprintf("--ctx %s: no CortexFS is mounted there (nsys-cortex mount %s)", dir, dir)}
	}
	rec, err := ctxmount.ReadRecord(lay.MountsDir(), dir)
	if err != nil {
		return false, nil // a CortexFS this home cannot validate: read-only
	}
	return ctxmount.Validate(dir, rec.Token, ctxmount.ReadWithCat) == nil, nil
}

// plan builds the sandbox's configuration.
func (r *runtime) plan(req *lifecycle.StartRequest, who identity, ceil *ceilings) (*boot.NsboxConfig, error) {
	lay, id, opts := req.Layout, req.ID, req.Options
	cfg := &boot.NsboxConfig{
		Version: boot.Version(), ID: id, Hostname: id, Network: "none", UID: AgentUID, GID: AgentGID,
		Root: boot.OverlayMount{Target: filepath.Join(lay.OverlayDir(id), "root"),
			Upper: upper(lay, id, "root"), Work: work(lay, id, "root")},
		// Read-only: the agent only finds sockets there and connects to
		// them (which a read-only mount allows), and nothing in the
		// neuron may place or move one — whatever its uid.
		Binds:     []boot.BindMount{{Source: req.SocketDir, Target: ChannelDir, ReadOnly: true}},
		Secret:    req.Secret,
		Rlimits:   ceil.rlimits,
		AgentArgs: []string{"--id", id, "--channel-dir", ChannelDir, "--root", "/", "--workdir", Workspace, "--subreaper", boot.ConfineFlag},
		Workdir:   Workspace,
	}
	if opts.NestedUserns {
		cfg.AgentArgs = append(cfg.AgentArgs, boot.NestedUsernsFlag)
	}
	if cg := ceil.cgroup; cg != nil && cg.limits.MemoryBytes > 0 {
		// The counter of OOM kills, in the cgroup the host makes before
		// its go-ahead (cgroupPlan.create).
		w := &boot.OOMWatch{Dir: cg.support.dirs["memory"], Rel: filepath.Join("nsys-cortex", cgroupName(lay, id), "memory.oom_control"),
			Key: "oom_kill", Limit: cg.limits.MemoryBytes}
		if cg.support.version == 2 {
			w.Dir, w.Rel = cg.support.dirs[""], filepath.Join("nsys-cortex", cgroupName(lay, id), "memory.events")
		}
		if w.Dir != "" {
			cfg.OOMWatch = w
		}
	}
	if opts.Ctx != "" {
		// The per-start condition (seed 003 §6): writable only if the
		// mount is, right now, the CortexFS its record names.
		writable, err := ctxExposure(lay, opts.Ctx)
		if err != nil {
			return nil, err
		}
		cfg.Binds = append(cfg.Binds, boot.BindMount{Source: opts.Ctx, Target: CtxDir, ReadOnly: !writable})
	}
	var proxyEnv []string
	switch opts.Network.Mode {
	case sandbox.NetworkFull:
		cfg.Network = "full"
	case sandbox.NetworkEgress:
		cfg.Network = "egress"
		cfg.Egress = &boot.NsboxEgress{Allow: opts.Network.Allow, Listen: EgressProxy}
		proxyEnv = sandbox.ProxyEnv(EgressProxy, id)
		if len(opts.Secrets) > 0 {
			secrets, env := sandbox.SecretPlaceholders(opts.Secrets)
			cfg.Egress.Secrets, proxyEnv = secrets, append(append(proxyEnv, env...), boot.EgressCAEnv()...)
			upstream, err := sandbox.UpstreamCAs(r.env.EgressUpstreamCA)
			if err != nil {
				return nil, err
			}
			cfg.Egress.UpstreamCAs = upstream
		}
	}
	if opts.Image != "" {
		cfg.Root.Lower = []string{opts.Image}
	} else {
		base, err := ensureBase(lay)
		if err != nil {
			return nil, err
		}
		cfg.Root.Lower = []string{base}
		for _, d := range hostTrees() {
			layer := strings.TrimPrefix(d, "/")
			if err := os.MkdirAll(upper(lay, id, layer), 0o755); err != nil {
				return nil, err
			}
			if err := os.MkdirAll(work(lay, id, layer), 0o755); err != nil {
				return nil, err
			}
			cfg.Overlays = append(cfg.Overlays, boot.OverlayMount{Target: d, Lower: []string{d},
				Upper: upper(lay, id, layer), Work: work(lay, id, layer)})
		}
		// /usr/local is the neuron's own directory, as the upper layer of
		// an overlay over an empty one rather than a bind: a bind's
		// mountinfo line would show its host path.
		empty := filepath.Join(lay.OverlayDir(id), ".empty") // a host record: never in a snapshot
		for _, d := range []string{empty, work(lay, id, "usr-local")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		cfg.Overlays = append(cfg.Overlays, boot.OverlayMount{Target: "/usr/local", Lower: []string{empty},
			Upper: usrLocal(lay, id), Work: work(lay, id, "usr-local")})
	}
	cfg.Env = sandbox.AgentEnv(nil, append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + AgentHome, "USER=agent", "LOGNAME=agent", "SHELL=" + shellFor(opts.Image),
		"LANG=C.UTF-8", "TMPDIR=/tmp", "NSYS_CORTEX_NEURON=" + id,
	}, append(proxyEnv, opts.Env...)...)...)
	return cfg, nil
}

// shellFor picks bash when the root the neuron gets has it: the image's,
// or the host's /usr.
func shellFor(image string) string {
	if _, err := os.Stat(filepath.Join(image, "/usr/bin/bash")); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// Released frees the neuron's cgroups once its agent is gone.
func (r *runtime) Released(lay layout.Layout, id string) { removeCgroups(lay, id) }

// SelfCheck reports each capability nsbox relies on.
func SelfCheck(_ context.Context, env sandbox.Env) sandbox.Check {
	p := probe(env)
	c := sandbox.Check{Mode: Mode, Items: []sandbox.CheckItem{p.userns, p.overlay, p.seccomp, p.landlock, p.cgroups, p.egress}}
	c.OK = p.userns.OK && p.overlay.OK && p.seccomp.OK
	switch {
	case !p.userns.OK:
		c.Summary = "user namespaces do not work here: " + p.userns.Detail
	case !p.overlay.OK:
		c.Summary = "overlayfs in a user namespace does not work here: " + p.overlay.Detail
	case !p.seccomp.OK:
		c.Summary = "seccomp is missing: " + p.seccomp.Detail
	default:
		c.Summary = "ready"
	}
	return c
}

var _ lifecycle.SecretProxy = (*runtime)(nil)

// ProxiesSecrets implements lifecycle.SecretProxy: PID 1's egress proxy
// puts them in.
func (r *runtime) ProxiesSecrets() {}
