package qemu

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/vmguest"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// Mode is this backend's name.
const Mode = "qemu"

// EnvBinary names the QEMU to run (default qemu-system-x86_64 on PATH).
const EnvBinary = "NSYS_CORTEX_QEMU"

// Defaults of a neuron that asks for none, and the layout inside it.
const (
	DefaultMemory = 512 << 20
	DefaultCPUs   = 1
	DefaultPids   = 1024
	// Ports is how many host processes can use one neuron at once.
	Ports     = 8
	Workspace = "/home/agent/workspace"
	minMemory = 128 << 20
	// bootTimeout is generous: under TCG on a loaded machine a boot can
	// take several times its usual 4-5 s.
	bootTimeout = 2 * time.Minute
)

// Backend registers qemu mode. Rank 25 puts it above docker where its
// self-check passes, which needs working KVM.
func Backend() sandbox.Backend {
	return sandbox.Backend{
		Name: Mode, Rank: 25, Isolating: true,
		New:       func(env sandbox.Env) (sandbox.Manager, error) { return New(env), nil },
		SelfCheck: SelfCheck,
	}
}

// Manager is the lifecycle's manager plus snapshots.
type Manager struct {
	*lifecycle.Manager
	rt  *runtime
	lay layout.Layout

	restoreMu sync.Mutex // one restore at a time
}

var (
	_ sandbox.Manager   = (*Manager)(nil)
	_ sandbox.LogPather = (*Manager)(nil)
)

// New returns a qemu-mode manager.
func New(env sandbox.Env) *Manager {
	rt := &runtime{env: env}
	return &Manager{Manager: lifecycle.New(env, rt), rt: rt, lay: env.Layout}
}

// Create creates neuron id as every mode does, then sets a cold-booted
// guest's clock from the host's: under TCG the guest read the emulated
// RTC, which holds whole seconds, so it starts up to a second off. (A
// restore, which does not come this way, sets the clock as it resumes
// the guest; a snapshot keeps the clock it had, so it keeps this one.)
// A guest whose clock cannot be set runs on, and its log says why.
func (m *Manager) Create(ctx context.Context, id string, opts sandbox.CreateOptions) (*sandbox.State, error) {
	st, err := m.Manager.Create(ctx, id, opts)
	if err != nil {
		return st, err
	}
	cctx, cancel := context.WithTimeout(ctx, clockTimeout)
	defer cancel()
	if err := setClock(cctx, m.lay.ChannelDir(Mode, id)); err != nil {
		m.Logf(id, "the guest's clock was not set: %v", err)
	}
	return st, nil
}

type runtime struct {
	env sandbox.Env

	restores vmguest.Pending[restoreJob] // neurons whose next start restores a snapshot
}

var (
	_ lifecycle.Runtime       = (*runtime)(nil)
	_ lifecycle.Tracker       = (*runtime)(nil)
	_ lifecycle.Dialer        = (*runtime)(nil)
	_ lifecycle.Explainer     = (*runtime)(nil)
	_ lifecycle.BootTimeouter = (*runtime)(nil)
)

func (r *runtime) Mode() string { return Mode }

var _ lifecycle.SecretKeeper = (*runtime)(nil)

// KeptSecret: a VM resumed from a snapshot runs the agent that was saved,
// which holds the secret it was started with.
func (r *runtime) KeptSecret(_ layout.Layout, id string) (string, bool) {
	if job := r.restores.Get(id); job != nil {
		return job.secret, true
	}
	return "", false
}

// binary finds QEMU.
func binary() (string, error) {
	name := os.Getenv(EnvBinary)
	if name == "" {
		name = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (apt-get install qemu-system-x86)", name)
	}
	return p, nil
}

func (r *runtime) Allow() error {
	if _, err := binary(); err != nil {
		return &sandbox.UnavailableError{Mode: Mode, Reason: err.Error()}
	}
	return nil
}

func (r *runtime) Workdir(layout.Layout, string) string { return Workspace }

func (r *runtime) BootTimeout() time.Duration { return bootTimeout }

// overlayDisk is neuron id's writable disk.
func overlayDisk(lay layout.Layout, id string) string {
	return filepath.Join(lay.OverlayDir(id), "overlay.ext4")
}

// plan is a neuron's VM, worked out from its options.
type plan struct {
	img          *vmimage.Image // nil when restoring
	imageDir     string
	limits       sandbox.Limits
	nestedUserns bool
	network      sandbox.Network // none, or egress with its allow-list
}

// plan works out a neuron's VM; the image is opened unless the VM boots
// from a snapshot's files (withImage false).
func (r *runtime) plan(lay layout.Layout, opts sandbox.CreateOptions, withImage bool) (*plan, error) {
	network, err := vmguest.Network(Mode, opts.Network)
	if err != nil {
		return nil, err
	}
	if opts.Ctx != "" {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "a /ctx mount",
			Reason: "a FUSE mount of the host cannot be shown inside a VM: use --mode nsbox"}
	}
	lim := opts.Limits
	if lim.MemoryBytes < 0 || lim.Pids < 0 || lim.CPUs < 0 {
		return nil, &sandbox.InvalidError{Reason: "resource limits must not be negative"}
	}
	if lim.MemoryBytes == 0 {
		lim.MemoryBytes = DefaultMemory
	}
	if lim.MemoryBytes < minMemory {
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("memory %d bytes: a VM neuron needs at least %d MiB", lim.MemoryBytes, minMemory>>20)}
	}
	lim.MemoryBytes = (lim.MemoryBytes + 1<<20 - 1) &^ (1<<20 - 1) // the VM gets whole MiB
	switch {
	case lim.CPUs == 0:
		lim.CPUs = DefaultCPUs
	case lim.CPUs != math.Trunc(lim.CPUs):
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: fmt.Sprintf("%g CPUs", lim.CPUs),
			Reason: "a VM has whole vCPUs: ask for a whole number"}
	case int(lim.CPUs) > goruntime.NumCPU():
		return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("%g CPUs: this machine has %d", lim.CPUs, goruntime.NumCPU())}
	}
	if lim.Pids == 0 {
		lim.Pids = DefaultPids
	}
	p := &plan{limits: lim, nestedUserns: opts.NestedUserns, imageDir: opts.Image, network: network}
	if p.imageDir == "" {
		p.imageDir = vmimage.DefaultDir(lay)
	}
	if withImage {
		img, err := vmimage.Open(p.imageDir)
		if err != nil {
			return nil, &sandbox.InvalidError{Reason: "qemu mode boots a VM image directory: " + err.Error()}
		}
		p.img, p.imageDir = img, img.Dir
	}
	return p, nil
}

// Prepare checks the options and makes the overlay disk of a new neuron.
func (r *runtime) Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error) {
	p, err := r.plan(lay, opts, r.restores.Get(id) == nil)
	if err != nil {
		return sandbox.Policy{}, err
	}
	// The overlay disk is the guest's only writable disk: its size is the
	// neuron's disk ceiling.
	dflt := r.env.DefaultDisk
	if dflt == 0 {
		dflt = vmimage.DefaultOverlaySize
	}
	size, err := vmimage.SizedOverlayDisk(context.Background(), overlayDisk(lay, id), opts.Limits.DiskBytes, dflt)
	if err != nil {
		return sandbox.Policy{}, fmt.Errorf("the overlay disk of %s: %w", id, err)
	}
	lim := p.limits
	lim.DiskBytes = size
	return sandbox.Policy{Network: p.network, Limits: lim, Image: p.imageDir,
		NestedUserns: p.nestedUserns}, nil
}

// Marker is what names neuron id's VM of this home (layout.Tag) in QEMU's
// -name (guest=<marker>): how its process is found without its state file.
func Marker(lay layout.Layout, id string) string {
	return "nsys-cortex:" + lay.Tag() + ":" + id
}

// Start boots the VM. QEMU's sockets are made here and handed over as
// descriptors (a socket path may be longer than bind(2) takes); a restore
// loads the snapshot's state before the guest runs again.
func (r *runtime) Start(req *lifecycle.StartRequest) (*exec.Cmd, error) {
	job := r.restores.Get(req.ID)
	p, err := r.plan(req.Layout, req.Options, job == nil)
	if err != nil {
		return nil, err
	}
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := os.MkdirAll(req.SocketDir, 0o700); err != nil {
		return nil, err
	}
	spec := Spec{Marker: Marker(req.Layout, req.ID), MemoryMiB: p.limits.MemoryBytes >> 20, CPUs: int(p.limits.CPUs),
		OverlayDisk: overlayDisk(req.Layout, req.ID), ConfigDisk: filepath.Join(req.SocketDir, "config.img")}
	var acc accel
	var vmFiles bootFiles
	if job != nil {
		// The snapshot's own files and machine: state loads only into the
		// machine it was saved from.
		vmFiles = job.bootFiles()
		spec.MemoryMiB, spec.CPUs, spec.Incoming = job.meta.MemoryMiB, job.meta.CPUs, true
		acc = accel{KVM: job.meta.KVM, Why: "as the snapshot was taken"}
	} else {
		if acc, err = chooseAccel(ctx, bin, p.img); err != nil {
			return nil, err
		}
		vmFiles = bootFiles{Kernel: p.img.Kernel(), RootDisk: p.img.RootDisk()}
		if vmFiles.Initramfs, err = p.img.Initramfs(req.AgentBin); err != nil {
			return nil, err
		}
	}
	// The VM boots from links of its own to these files, so a snapshot
	// pins the very files it ran even if the image is built again.
	if vmFiles, err = vmFiles.pin(filepath.Join(req.SocketDir, "boot")); err != nil {
		return nil, err
	}
	spec.Kernel, spec.Initramfs, spec.RootDisk = vmFiles.Kernel, vmFiles.Initramfs, vmFiles.RootDisk
	spec.KVM = acc.KVM
	if !acc.KVM {
		if spec.TSCkHz, err = vmimage.HostTSCkHz(); err != nil {
			return nil, fmt.Errorf("TCG: %w", err)
		}
	}
	cfg := &boot.VMConfig{ID: req.ID, Workdir: Workspace, Env: vmguest.Env(req.ID, p.network, req.Options.Env, false), Pids: p.limits.Pids,
		NestedUserns: p.nestedUserns, Ports: Ports, Secret: req.Secret}
	if p.network.Mode == sandbox.NetworkEgress {
		cfg.Egress = vmguest.Proxy
	}
	if err := vmimage.ConfigDisk(spec.ConfigDisk, cfg); err != nil {
		return nil, err
	}
	id, err := vmmIdentity(req.Layout, req.ID, acc.KVM)
	if err != nil {
		return nil, err
	}
	files, err := listenAll(req.SocketDir)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(files) }()
	for i := 0; i < Ports; i++ {
		spec.PortFDs = append(spec.PortFDs, 3+i)
	}
	spec.CtlFD, spec.QMPFD = 3+Ports, 4+Ports
	if p.network.Mode == sandbox.NetworkEgress {
		vmEnd, err := startTunnel(req, id, p.network.Allow)
		if err != nil {
			return nil, err
		}
		spec.EgressFD = 3 + len(files)
		files = append(files, vmEnd)
	} else if job != nil && job.meta.Policy.Network.Mode == sandbox.NetworkEgress {
		// The snapshot's machine has the port; the neuron's policy now
		// has no egress: the port stays, with nothing behind it.
		spec.EgressClosed = true
	}
	// QEMU opens every file through a descriptor of ours: it may run as a
	// user who could not reach them by their paths.
	disks, err := openDisks(&spec, id, 3+len(files))
	if err != nil {
		return nil, err
	}
	files = append(files, disks...)
	args, err := Args(spec)
	if err != nil {
		return nil, err
	}
	lifecycle.HostLine(req.Log, "qemu %s, %d MiB, %d vCPU, %s", acc, spec.MemoryMiB, spec.CPUs, id)
	cmd := &exec.Cmd{Path: bin, Args: append([]string{bin}, args...), Env: qemuEnv(req.ID),
		Stdout: req.Log, Stderr: req.Log, ExtraFiles: files, SysProcAttr: &syscall.SysProcAttr{Setsid: true, Credential: id.cred}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	if job != nil {
		if err := job.resume(ctx, req.SocketDir); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
	}
	return cmd, nil
}

// Released: the lifecycle removes the channel directory; a VM holds nothing else.
func (r *runtime) Released(layout.Layout, string) {}

// Link claims a free port of the VM for this process's link and relays
// between them (see relay.go).
func (r *runtime) Link(lay layout.Layout, id string, o link.Options) (*link.Link, error) {
	dir := lay.ChannelDir(Mode, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	n, lock, err := claimPort(dir, Ports)
	if err != nil {
		return nil, &sandbox.CapacityError{Reason: fmt.Sprintf("neuron %s: %v (close one)", id, err)}
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	l, err := link.Listen(filepath.Join(dir, fmt.Sprintf("h%d-%x.sock", os.Getpid(), rnd)), o)
	if err != nil {
		lock.Close()
		return nil, err
	}
	rl := &relay{linkPath: l.Path(), vmPath: portSocket(dir, n), lock: lock,
		note: func(format string, args ...any) { logf(lay, id, format, args...) }}
	if job := r.restores.Get(id); job != nil {
		rl.after, rl.silence = job.resumed, restoredSilence
	}
	go rl.run() // ends when the link does (its socket goes)
	return l, nil
}

// Explain turns a failed boot into the error QEMU's words call for.
func (r *runtime) Explain(lay layout.Layout, id string, boot *sandbox.BootError) error {
	switch {
	case strings.Contains(boot.Log, "Could not access KVM") || strings.Contains(boot.Log, "failed to initialize kvm"):
		return &sandbox.UnavailableError{Mode: Mode, Reason: "KVM: " + lastLine(boot.Log) + fmt.Sprintf(" (%s=tcg runs without it)", EnvAccel)}
	case strings.Contains(boot.Log, "Failed to get \"write\" lock"):
		return &sandbox.OwnedElsewhereError{ID: id, Reason: "its overlay disk is in use by another QEMU"}
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
