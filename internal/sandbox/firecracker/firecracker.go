package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// Mode is this backend's name.
const Mode = "firecracker"

// Rank orders firecracker first in auto resolution (docker is 20, nsbox 10):
// DESIGN.md's auto tries it first whenever its self-check passes.
const Rank = 30

// Backend describes firecracker mode for registration.
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: Rank, Isolating: true,
		New: func(env sandbox.Env) (sandbox.Manager, error) {
			m, err := New(env)
			if err != nil {
				return nil, err
			}
			return m, nil
		},
		SelfCheck: SelfCheck,
	}
}

// Option changes how a Manager is built.
type Option func(*runtime)

// WithConfig replaces the configuration the environment gives.
func WithConfig(c Config) Option { return func(r *runtime) { r.cfg = c } }

// WithKVMProbe replaces the KVM probe (tests run the backend against a fake
// Firecracker on machines whose KVM does not run guests).
func WithKVMProbe(p KVMProbe) Option { return func(r *runtime) { r.probe = p } }

// WithResyncer replaces how a restored guest's clock and secrets are
// renewed.
func WithResyncer(rs Resyncer) Option { return func(r *runtime) { r.resync = rs } }

// Manager runs neurons as Firecracker microVMs. It is the common lifecycle
// (state files, discovery, locks, death) over this backend's runtime, plus
// VM snapshots.
type Manager struct {
	*lifecycle.Manager
	rt     *runtime
	snapMu sync.Mutex // one snapshot or restore at a time in this process
}

var (
	_ sandbox.Manager         = (*Manager)(nil)
	_ lifecycle.Runtime       = (*runtime)(nil)
	_ lifecycle.Tracker       = (*runtime)(nil)
	_ lifecycle.Dialer        = (*runtime)(nil)
	_ lifecycle.Explainer     = (*runtime)(nil)
	_ lifecycle.BootTimeouter = (*runtime)(nil)
)

// New returns a firecracker-mode manager. Its Create refuses (naming what
// is missing) while the self-check fails.
func New(env sandbox.Env, opts ...Option) (*Manager, error) {
	r := &runtime{env: env, probe: runKVMProbe}
	cfg, err := ConfigFromEnv(env.Layout)
	if err != nil {
		return nil, err
	}
	r.cfg = cfg
	for _, o := range opts {
		o(r)
	}
	if r.resync == nil {
		r.resync = CtlResyncer{}
	}
	return &Manager{Manager: lifecycle.New(env, r), rt: r}, nil
}

// Close releases this process's channels; the VMs keep running.
func (m *Manager) Close() error {
	err := m.Manager.Close()
	m.rt.bridges.wait()
	return err
}

// Check runs the self-check with this manager's configuration.
func (m *Manager) Check(ctx context.Context) sandbox.Check { return m.rt.check(ctx) }

// runtime is firecracker's part of the lifecycle.
type runtime struct {
	env     sandbox.Env
	cfg     Config
	probe   KVMProbe
	resync  Resyncer
	bridges bridgeSet

	restores vmguest.Pending[restorePlan] // neurons being restored, by id
}

func (r *runtime) Mode() string { return Mode }

func (r *runtime) check(ctx context.Context) sandbox.Check { return check(ctx, r.cfg, r.probe) }

// Allow refuses with the self-check's reason while it fails.
func (r *runtime) Allow() error {
	if c := r.check(context.Background()); !c.OK {
		return &sandbox.UnavailableError{Mode: Mode, Reason: strings.TrimPrefix(c.Summary, "cannot run here: ")}
	}
	return nil
}

func (r *runtime) Workdir(layout.Layout, string) string { return Workspace }

// BootTimeout: a microVM boots in well under a second on KVM; the default
// leaves room for a loaded host.
func (r *runtime) BootTimeout() time.Duration { return 20 * time.Second }

// overlayDisk is neuron id's writable disk.
func overlayDisk(lay layout.Layout, id string) string {
	return filepath.Join(lay.OverlayDir(id), "overlay.ext4")
}

// vmPlan is a VM worked out from a create's options.
type vmPlan struct {
	shape    vmShape
	memBytes int64
	rootDisk string
	policy   sandbox.Policy
}

func (r *runtime) plan(opts sandbox.CreateOptions) (*vmPlan, error) {
	network, err := vmguest.Network(Mode, opts.Network)
	if err != nil {
		return nil, err
	}
	if opts.Ctx != "" {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "a /ctx mount",
			Reason: "a host FUSE mount cannot be shown inside a VM (use --mode nsbox)"}
	}
	lim := opts.Limits
	if lim.MemoryBytes < 0 || lim.Pids < 0 || lim.CPUs < 0 {
		return nil, &sandbox.InvalidError{Reason: "resource limits must not be negative"}
	}
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = DefaultMemory
	}
	if lim.MemoryBytes < 128<<20 {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("memory %d bytes: a microVM needs at least 128 MiB", lim.MemoryBytes)}
	}
	if lim.CPUs == 0 {
		lim.CPUs = DefaultCPUs
	}
	if lim.CPUs > 32 {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("%g CPUs: Firecracker gives a VM at most 32", lim.CPUs)}
	}
	p := &vmPlan{rootDisk: r.cfg.RootDisk}
	p.shape = vmShape{memMiB: int((lim.MemoryBytes + 1<<20 - 1) >> 20), vcpus: int(math.Ceil(lim.CPUs)), cpus: lim.CPUs}
	p.memBytes = int64(p.shape.memMiB) << 20
	lim.MemoryBytes = p.memBytes
	if opts.Image != "" {
		st, err := os.Stat(opts.Image)
		if !filepath.IsAbs(opts.Image) || err != nil || !st.Mode().IsRegular() {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("image %q: firecracker mode boots an ext4 root disk image, given by its absolute path", opts.Image)}
		}
		p.rootDisk = opts.Image
	}
	p.policy = sandbox.Policy{Network: network, Limits: lim, Image: opts.Image, NestedUserns: opts.NestedUserns}
	return p, nil
}

// Prepare checks the options and makes the overlay disk of a new neuron.
func (r *runtime) Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error) {
	p, err := r.plan(opts)
	if err != nil {
		return sandbox.Policy{}, err
	}
	// The overlay disk is the guest's only writable disk: its size is the
	// neuron's disk ceiling (the home's disk setting, unless this mode's
	// own overlay size is set).
	dflt := r.cfg.OverlaySize
	if os.Getenv(EnvOverlaySize) == "" && r.env.DefaultDisk > 0 {
		dflt = r.env.DefaultDisk
	}
	size, err := vmimage.SizedOverlayDisk(context.Background(), overlayDisk(lay, id), opts.Limits.DiskBytes, dflt)
	if err != nil {
		return sandbox.Policy{}, fmt.Errorf("the overlay disk of %s: %w", id, err)
	}
	pol := p.policy
	pol.Limits.DiskBytes = size
	return pol, nil
}

// jailOf is neuron id's jail.
func (r *runtime) jailOf(lay layout.Layout, id string) (jail, error) {
	fc, _, err := r.cfg.binaries()
	if err != nil {
		return jail{}, err
	}
	uid, gid, err := lifecycle.AgentIdentity(lay, id)
	if err != nil {
		return jail{}, err
	}
	return newJail(r.cfg.ChrootBase, fc, JailID(lay, id), uid, gid), nil
}

// Start makes the neuron's jail, starts the jailer (which becomes
// Firecracker, the process that stands for the neuron) and configures the
// VM through the API: a cold boot, or a snapshot's load when Restore runs
// this create.
func (r *runtime) Start(req *lifecycle.StartRequest) (*exec.Cmd, error) {
	lay, id := req.Layout, req.ID
	p, err := r.plan(req.Options)
	if err != nil {
		return nil, err
	}
	fc, jailerBin, err := r.cfg.binaries()
	if err != nil {
		return nil, err
	}
	j, err := r.jailOf(lay, id)
	if err != nil {
		return nil, err
	}
	restore := r.restores.Get(id)
	r.bridges.forget(id)
	cfg := &GuestConfig{ID: id, Workdir: Workspace, Env: vmguest.Env(id, p.policy.Network, req.Options.Env, false), Secret: req.Secret, Pids: p.policy.Limits.Pids,
		NestedUserns: p.policy.NestedUserns, VsockPort: AgentVsockPort, CtlVsockPort: CtlVsockPort, Ports: -1}
	if p.policy.Network.Mode == sandbox.NetworkEgress {
		cfg.Egress, cfg.EgressVsockPort = vmguest.Proxy, EgressVsockPort
	}
	if err := r.stage(lay, id, j, p, cfg, restore); err != nil {
		return nil, fmt.Errorf("staging the jail %s: %w", j.dir, err)
	}
	fsize := max(r.cfg.OverlaySize, p.memBytes)
	if st, err := os.Stat(overlayDisk(lay, id)); err == nil {
		fsize = max(fsize, st.Size())
	}
	args, err := JailerArgs(JailSpec{ID: JailID(lay, id), ExecFile: fc, UID: j.uid, GID: j.gid, ChrootBase: r.cfg.ChrootBase,
		CgroupVersion: 2, ParentCgroup: ParentCgroup, Cgroups: CgroupSettings(p.memBytes, p.shape.cpus),
		ResourceLimits: map[string]uint64{"fsize": uint64(fsize) + 1<<20, "no-file": 2048}, APISock: jailAPISock})
	if err != nil {
		return nil, err
	}
	if restore != nil && restore.rebind != nil {
		// A fork: its guest is its source's machine, whose agent would
		// prove its source's secret; no bridge of this process dials it
		// until it has taken the fork's identity (held from before its
		// VMM exists, whatever the VMM makes when).
		for _, b := range r.bridges.of(id) {
			b.hold()
			defer b.release()
		}
	}
	cmd := &exec.Cmd{Path: jailerBin, Args: append([]string{jailerBin}, args...), Dir: "/",
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Stdout: req.Log, Stderr: req.Log,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if os.Geteuid() == 0 {
		// Firecracker becomes PID 1 of a PID namespace of its own (what the
		// jailer's --new-pid-ns gives, while staying this process's child)
		// in an empty network namespace: no network device, no route out.
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNET
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the jailer %s: %w", jailerBin, err)
	}
	fail := func(err error) (*exec.Cmd, error) {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	if err := waitSocket(j.host(jailAPISock), cmd.Process.Pid, 10*time.Second); err != nil {
		return fail(err)
	}
	if p.policy.Network.Mode == sandbox.NetworkEgress {
		// Listening before the guest runs (a boot, or a snapshot's load):
		// it dials the host's port as soon as it can.
		if err := startTunnel(req, j, cmd.Process.Pid, p.policy.Network.Allow); err != nil {
			return fail(err)
		}
	}
	c := NewClient(j.host(jailAPISock))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if restore != nil {
		err = load(ctx, c)
		if err == nil && restore.rebind != nil {
			err = rebindGuest(ctx, j, restore.rebind)
		}
	} else {
		err = configure(ctx, c, p.shape, BootArgs(BootSpec{Console: r.cfg.Console}))
	}
	if err != nil {
		return fail(err)
	}
	r.bridges.kick(id)
	return cmd, nil
}

// stage puts what the VM reads into its jail: the shared image, the
// neuron's overlay disk, its config disk (root:<jail gid> 0440: it may
// carry granted secrets, and the VMM has no business changing it) and, for
// a restore, the snapshot.
func (r *runtime) stage(lay layout.Layout, id string, j jail, p *vmPlan, cfg *GuestConfig, restore *restorePlan) error {
	if err := j.prepare(id, lay.Home); err != nil {
		return err
	}
	if restore != nil {
		// The restored guest read its configuration long ago; the disk it
		// had is put back as it was.
		if err := sparseCopy(filepath.Join(restore.dir, "vm", "config.img"), j.host(jailConfig)); err != nil {
			return err
		}
	} else if err := vmimage.ConfigDisk(j.host(jailConfig), cfg); err != nil {
		return err
	}
	if err := os.Lchown(j.host(jailConfig), 0, j.gid); err != nil {
		return err
	}
	if err := os.Chmod(j.host(jailConfig), 0o440); err != nil {
		return err
	}
	if restore != nil {
		if err := sparseCopy(filepath.Join(restore.dir, "vm", "vmstate"), j.host(jailSnapState)); err != nil {
			return err
		}
		if err := os.Lchown(j.host(jailSnapState), 0, j.gid); err != nil {
			return err
		}
		if err := os.Chmod(j.host(jailSnapState), 0o440); err != nil {
			return err
		}
		if err := j.linkReadable(filepath.Join(restore.dir, "vm", "mem"), jailSnapMem); err != nil {
			return err
		}
	} else {
		if err := j.linkShared(r.cfg.Kernel, jailKernel); err != nil {
			return err
		}
		if err := j.linkShared(r.cfg.Initrd, jailInitrd); err != nil {
			return err
		}
	}
	if err := j.linkShared(p.rootDisk, jailRootDisk); err != nil {
		return err
	}
	return j.linkOwned(overlayDisk(lay, id), jailOverlay)
}

// waitSocket waits until Firecracker's API socket takes connections (it
// is bound before it listens), giving up when the process exits first.
func waitSocket(path string, pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if st, err := os.Stat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := protocol.DialUnix(ctx, path)
			cancel()
			if err == nil {
				c.Close()
				return nil
			}
		}
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && info.Signo != 0 {
			return errors.New("the jailer (or Firecracker) exited before its API socket appeared: see the neuron's log")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no Firecracker API socket at %s within %s", path, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// neuronLog is the neuron's log, where the lifecycle puts it
// (logs/neurons/<id>.log; see the lifecycle package).
func neuronLog(lay layout.Layout, id string) string {
	return filepath.Join(lay.LogsDir(), "neurons", id+".log")
}

// maxFirecrackerLog is how much of Firecracker's own log is kept in the
// neuron's log when its jail goes.
const maxFirecrackerLog = 64 << 10

// Released keeps the end of Firecracker's own log in the neuron's log,
// then removes the neuron's jail (wherever a firecracker binary of another
// name made it), the jailer's directory above it once no jail is left in
// it, and its cgroup.
func (r *runtime) Released(lay layout.Layout, id string) {
	jid := JailID(lay, id)
	dirs, _ := filepath.Glob(filepath.Join(r.cfg.ChrootBase, "*", jid))
	for _, d := range dirs {
		var mk marker
		if store.ReadJSON(filepath.Join(d, markerFile), &mk) == nil && mk.Home != lay.Home {
			continue // another home's, by a hash collision of the tags
		}
		keepLog(filepath.Join(d, "root", jailLog), neuronLog(lay, id))
		os.RemoveAll(d) // what cannot be removed now goes with the next create's prepare
		// rmdir: only an empty one goes (another neuron's jail keeps it;
		// a create making one meanwhile makes it again, see prepare).
		os.Remove(filepath.Dir(d))
	}
	removeCgroup(filepath.Join(r.cfg.CgroupRoot, ParentCgroup, jid))
}

// keepLog appends the end of Firecracker's log to the neuron's.
func keepLog(from, to string) {
	in, err := os.Open(from)
	if err != nil {
		return
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || st.Size() == 0 {
		return
	}
	if st.Size() > maxFirecrackerLog {
		in.Seek(st.Size()-maxFirecrackerLog, io.SeekStart)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer out.Close()
	fmt.Fprintf(out, "--- Firecracker's log (%s) ---\n", from)
	io.Copy(out, in)
	fmt.Fprintln(out, "--- end of Firecracker's log ---")
}

// removeCgroup removes a cgroup directory: rmdir on cgroupfs (its control
// files go with it); a plain directory standing for one is removed whole.
func removeCgroup(dir string) {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return
	}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil && fs.Type != unix.CGROUP2_SUPER_MAGIC {
		os.RemoveAll(dir)
	}
}

// Link is this process's channel to neuron id: a link listening in the
// channel directory, fed by a bridge that dials the agent through the VM's
// vsock (see bridge). No token: only root and the VM's own jailed user can
// reach the VM's vsock socket, and the guest takes connections from the
// host alone.
func (r *runtime) Link(lay layout.Layout, id string, o link.Options) (*link.Link, error) {
	dir := lay.ChannelDir(Mode, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	j, err := r.jailOf(lay, id)
	if err != nil {
		return nil, err
	}
	l, err := link.Listen(filepath.Join(dir, fmt.Sprintf("h%d-%s.sock", os.Getpid(), ids.New()[1:7])), o)
	if err != nil {
		return nil, err
	}
	r.bridges.start(id, newBridge(j.host(jailVsock), l.Path()))
	return l, nil
}

// Explain adds why the host could not reach the agent to a failed boot,
// and the neuron's log as it is now (with Firecracker's own log, which the
// jail's removal has just put there).
func (r *runtime) Explain(lay layout.Layout, id string, be *sandbox.BootError) error {
	reason := be.Reason
	if err := r.bridges.lastErr(id); err != nil {
		reason += fmt.Sprintf(" (the last attempt to reach it over vsock port %d: %v)", AgentVsockPort, err)
	}
	log := be.Log
	if b, err := os.ReadFile(neuronLog(lay, id)); err == nil && len(b) > 0 {
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		log = "  " + strings.Join(lines[max(0, len(lines)-15):], "\n  ")
	}
	return &sandbox.BootError{ID: be.ID, Reason: reason, Log: log}
}
