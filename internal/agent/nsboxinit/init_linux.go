package nsboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/agent/logline"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// Init is the whole life of the sandbox's first process: it reads the
// configuration, builds the root, starts the agent and reaps until the agent
// exits. It returns the exit status for os.Exit.
func Init() int {
	logf := logline.Logf(os.Stderr, "cortex-agent init")
	f := os.NewFile(boot.NsboxConfigFD, "sandbox-config")
	defer f.Close()
	unix.CloseOnExec(boot.NsboxConfigFD) // the agent never gets it
	dec := json.NewDecoder(f)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		logf("reading the sandbox configuration: %v", err)
		return 1
	}
	cfg, err := boot.DecodeNsboxConfig(raw)
	if err != nil {
		logf("reading the sandbox configuration: %v", err)
		return 1
	}
	// Nothing untrusted may ptrace or read this process's memory.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var eg *confine.EgressPlan
	if cfg.Network == "egress" {
		if eg, err = planEgress(&cfg); err != nil {
			logf("%v", err)
			return 1
		}
	}
	oom := openOOMWatch(cfg.OOMWatch, logf)
	if err := build(&cfg, eg, logf); err != nil {
		logf("%v", err)
		return 1
	}
	// The host puts this process into its cgroups while the root is being
	// built; it says "go" once that is done, and only then may anything be
	// started (a child forked before would escape the ceilings).
	var goAhead string
	if err := dec.Decode(&goAhead); err != nil || goAhead != boot.NsboxGoAhead {
		logf("waiting for the host's go-ahead: %q %v", goAhead, err)
		return 1
	}
	if oom != nil {
		go oom.run(logf) // as long as this process: the sandbox's life
	}
	spawn := startAgent
	if eg != nil {
		if spawn, err = startEgress(eg, cfg.Egress.Listen, cfg.Egress.StatsFD, logf); err != nil {
			logf("%v", err)
			return 1
		}
	}
	agent, err := spawn(&cfg)
	if err != nil {
		logf("starting the agent: %v", err)
		return 1
	}
	// A warm neuron's host keeps its end to claim it later; any other
	// host has closed it, and this ends at once.
	go serveClaims(dec, f, &cfg, logf)
	return supervise(&cfg, agent.Pid, spawn, logf)
}

// running is the agent PID 1 runs now: the end of its rebind socket that
// PID 1 holds. Its lock is held while an agent starts and while a claim
// changes the configuration it starts with.
var running struct {
	sync.Mutex
	rebind *os.File
}

// claimTimeout bounds the agent's answer to a claim's rebind.
const claimTimeout = 10 * time.Second

// serveClaims answers the host's claims (boot.NsboxClaim) until it closes
// its end of the configuration socket.
func serveClaims(dec *json.Decoder, f *os.File, cfg *boot.NsboxConfig, logf func(string, ...any)) {
	enc := json.NewEncoder(f)
	for {
		var c boot.NsboxClaim
		if err := dec.Decode(&c); err != nil {
			return
		}
		var ans boot.NsboxClaimed
		if err := claim(cfg, &c.Rebind); err != nil {
			logf("claim as %s: %v", c.Rebind.Neuron, err)
			ans.Error = err.Error()
		}
		if err := enc.Encode(&ans); err != nil {
			return
		}
	}
}

// claim makes this warm neuron neuron r.Neuron: the running agent serves
// that id with r's secret, the hostname and /etc say so, and an agent
// started again later starts as it.
func claim(cfg *boot.NsboxConfig, r *boot.Rebind) error {
	if err := ids.Validate(r.Neuron); err != nil {
		return err
	}
	running.Lock()
	defer running.Unlock()
	if running.rebind == nil {
		return errors.New("no agent runs to take the claim")
	}
	if err := boot.SendRebind(running.rebind, r, claimTimeout); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(r.Neuron)); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	for name, content := range boot.NsboxEtc(r.Neuron) {
		// Nothing has run in a warm neuron: /etc is as the host made it.
		fd, err := unix.Open("/etc/"+name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("/etc/%s: %w", name, err)
		}
		_, err = unix.Write(fd, []byte(content))
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("/etc/%s: %w", name, err)
		}
	}
	cfg.ID, cfg.Hostname, cfg.Secret = r.Neuron, r.Neuron, r.Secret
	for i := 0; i+1 < len(cfg.AgentArgs); i++ {
		if cfg.AgentArgs[i] == "--id" {
			cfg.AgentArgs[i+1] = r.Neuron
		}
	}
	cfg.Env = boot.MergeEnv(cfg.Env, append([]string{"NSYS_CORTEX_NEURON=" + r.Neuron}, r.Env...))
	return nil
}

// build makes the neuron's root and moves into it. Every mount point
// inside the root is reached by descriptor, without following a link
// (mountPoint): the root is the neuron's overlay.
func build(cfg *boot.NsboxConfig, eg *confine.EgressPlan, logf func(string, ...any)) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("mount: making / private: %w", err)
	}
	root := cfg.Root.Target
	if err := os.MkdirAll(root, 0o755); err != nil { // the host's own directory
		return fmt.Errorf("mount: %s: %w", root, err)
	}
	if err := mountOverlay(cfg.Root, root); err != nil {
		return err
	}
	for _, o := range cfg.Overlays {
		mp, err := mountPoint(root, o.Target, false, logf)
		if err != nil {
			return err
		}
		err = mountOverlay(o, procPath(mp))
		mp.Close()
		if err != nil {
			return err
		}
	}
	if err := mountSpecial(cfg, root, logf); err != nil {
		return err
	}
	for _, b := range cfg.Binds {
		if err := bind(b, root, logf); err != nil {
			return err
		}
	}
	if eg != nil {
		if ca, bundle := eg.CA(); ca != nil {
			if err := installCA(root, ca, bundle); err != nil {
				return err
			}
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	if cfg.Network == "none" {
		if err := confine.LoopbackUp(); err != nil {
			return fmt.Errorf("network: bringing up lo: %w", err)
		}
	}
	return pivot(root)
}

func mountOverlay(o boot.OverlayMount, target string) error {
	if len(o.Lower) == 0 {
		return fmt.Errorf("mount: overlay for %s has no lower layer", o.Target)
	}
	for _, p := range append(append([]string{}, o.Lower...), o.Upper, o.Work) {
		if strings.ContainsAny(p, ",:") {
			return fmt.Errorf("mount: overlay path %q holds ',' or ':'", p)
		}
	}
	// The layers are named by descriptor (/proc/self/fd/N): the mount's
	// options, which the neuron reads in /proc/self/mountinfo, then show
	// no path of the host's.
	named := func(p string) (string, func(), error) {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", nil, fmt.Errorf("mount: overlay layer %s: %w", p, err)
		}
		return fmt.Sprintf("/proc/self/fd/%d", fd), func() { unix.Close(fd) }, nil
	}
	var lowers []string
	for _, l := range o.Lower {
		n, done, err := named(l)
		if err != nil {
			return err
		}
		defer done()
		lowers = append(lowers, n)
	}
	upper, doneU, err := named(o.Upper)
	if err != nil {
		return err
	}
	defer doneU()
	work, doneW, err := named(o.Work)
	if err != nil {
		return err
	}
	defer doneW()
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", strings.Join(lowers, ":"), upper, work)
	if err := unix.Mount("overlay", target, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount: overlay on %s (lower %s, upper %s, work %s): %w", o.Target, strings.Join(o.Lower, ":"), o.Upper, o.Work, err)
	}
	return nil
}

// mountSpecial mounts /proc, a minimal /dev, and private /tmp and /run.
func mountSpecial(cfg *boot.NsboxConfig, root string, logf func(string, ...any)) error {
	type m struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}
	tmp := "mode=1777"
	if cfg.TmpBytes > 0 {
		tmp += fmt.Sprintf(",size=%d", cfg.TmpBytes)
	}
	mounts := []m{
		// hidepid: a process sees in /proc only those it could ptrace. PID 1
		// (and the agent) stay out of the neuron's sight: with egress, PID 1's
		// threads are in the host's network namespace, and /proc/1/task/*/net
		// would show the host's connections and sockets.
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "hidepid=invisible"},
		{"tmpfs", "/dev", "tmpfs", unix.MS_NOSUID | unix.MS_STRICTATIME, "mode=755,size=65536k"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, tmp},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=755"},
	}
	for _, mt := range mounts {
		mp, err := mountPoint(root, mt.target, false, logf)
		if err != nil {
			return err
		}
		err = unix.Mount(mt.src, procPath(mp), mt.fstype, mt.flags, mt.data)
		mp.Close()
		if err != nil {
			return fmt.Errorf("mount: %s on %s: %w", mt.fstype, mt.target, err)
		}
	}
	// /dev is the fresh tmpfs just mounted: its files are made there.
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		mp, err := mountPoint(root, "dev/"+dev, true, logf)
		if err != nil {
			return err
		}
		err = unix.Mount("/dev/"+dev, procPath(mp), "", unix.MS_BIND, "")
		mp.Close()
		if err != nil {
			return fmt.Errorf("mount: /dev/%s: %w", dev, err)
		}
	}
	devDir, err := mountPoint(root, "dev", false, logf)
	if err != nil {
		return err
	}
	defer devDir.Close()
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := unix.Symlinkat(target, int(devDir.Fd()), name); err != nil {
			return fmt.Errorf("mount: /dev/%s: %w", name, err)
		}
	}
	return nil
}

func bind(b boot.BindMount, root string, logf func(string, ...any)) error {
	st, err := os.Stat(b.Source) // the host's path
	if err != nil {
		return fmt.Errorf("mount: bind source %s: %w", b.Source, err)
	}
	mp, err := mountPoint(root, b.Target, !st.IsDir(), logf)
	if err != nil {
		return err
	}
	err = unix.Mount(b.Source, procPath(mp), "", unix.MS_BIND|unix.MS_REC, "")
	mp.Close()
	if err != nil {
		return fmt.Errorf("mount: binding %s at %s: %w", b.Source, b.Target, err)
	}
	if b.ReadOnly {
		// The new mount's root, reached again by name through the mount.
		mp, err := mountPoint(root, b.Target, !st.IsDir(), logf)
		if err != nil {
			return err
		}
		err = unix.Mount("", procPath(mp), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
		mp.Close()
		if err != nil {
			return fmt.Errorf("mount: making %s read-only: %w", b.Target, err)
		}
	}
	return nil
}

// pivot makes root the root of this mount namespace and drops the old one,
// so nothing of the host outside the declared mounts stays reachable.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("mount: pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("mount: detaching the old root: %w", err)
	}
	return unix.Chdir("/")
}

// startAgent starts the agent in a user namespace of its own, where it is an
// unprivileged user with no capabilities, under the rlimits.
func startAgent(cfg *boot.NsboxConfig) (*os.Process, error) {
	running.Lock()
	defer running.Unlock()
	for _, rl := range cfg.Rlimits {
		lim := unix.Rlimit{Cur: rl.Value, Max: rl.Value}
		if err := unix.Setrlimit(rl.Resource, &lim); err != nil {
			return nil, fmt.Errorf("resource limit %d: %w", rl.Resource, err)
		}
	}
	args := append([]string{"cortex-agent"}, cfg.AgentArgs...)
	var extra []*os.File
	if cfg.Secret != "" {
		secret, err := boot.SecretPipe(cfg.Secret)
		if err != nil {
			return nil, fmt.Errorf("the agent's secret: %w", err)
		}
		defer secret.Close()
		extra = []*os.File{secret}
		args = append(args, boot.SecretFDFlag, "3")
	}
	// A socket on which a claim gives the agent its new identity.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the agent's rebind socket: %w", err)
	}
	unix.SetNonblock(fds[0], true) // pollable: its reads and writes have deadlines
	mine, theirs := os.NewFile(uintptr(fds[0]), "rebind"), os.NewFile(uintptr(fds[1]), "rebind")
	defer theirs.Close()
	args = append(args, boot.RebindFDFlag, fmt.Sprint(3+len(extra)))
	extra = append(extra, theirs)
	// A socket on which the agent gets its own OOM score adjustment.
	ofds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("the agent's oom socket: %w", err)
	}
	oomMine, oomTheirs := os.NewFile(uintptr(ofds[0]), "oom"), os.NewFile(uintptr(ofds[1]), "oom")
	defer oomMine.Close()
	defer oomTheirs.Close()
	args = append(args, boot.OOMFDFlag, fmt.Sprint(3+len(extra)))
	extra = append(extra, oomTheirs)
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: args, ExtraFiles: extra,
		Env: cfg.Env, Dir: cfg.Workdir, Stdout: os.Stderr, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: cfg.UID, HostID: cfg.OuterUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: cfg.GID, HostID: cfg.OuterGID, Size: 1}},
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), NoSetGroups: true},
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return nil, err
	}
	sendOOMScoreAdj(oomMine, cmd.Process.Pid)
	if running.rebind != nil {
		running.rebind.Close() // the agent that had it is gone
	}
	running.rebind = mine
	return cmd.Process, nil
}

// Restarts of a crashed or killed agent: at most maxRestarts within
// restartWindow, then the sandbox gives up.
const (
	maxRestarts   = 5
	restartWindow = 30 * time.Second
)

// supervise reaps every process that ends up with PID 1, passes termination
// signals on to the agent, and starts the agent again if something killed
// it (its commands run as the same user and can: kill -9 -1); the new agent
// dials the host again. When the agent exits on its own, or was asked to
// stop, so does the sandbox, and the kernel ends whatever is left in it.
func supervise(cfg *boot.NsboxConfig, agent int, spawn func(*boot.NsboxConfig) (*os.Process, error), logf func(string, ...any)) int {
	var stopping atomic.Bool
	current := atomic.Int64{}
	current.Store(int64(agent))
	// Only SIGTERM (what destroy sends) stops the sandbox. The kernel drops
	// signals to a namespace's first process that it has no handler for,
	// so, ignored, the others cannot reach it from inside, where (rootless)
	// commands run as its own host user.
	signal.Ignore(unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE,
		unix.SIGALRM, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGVTALRM, unix.SIGPROF, unix.SIGWINCH)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM)
	go func() {
		for s := range sigs {
			stopping.Store(true)
			unix.Kill(int(current.Load()), s.(syscall.Signal))
		}
	}()
	var restarts []time.Time
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 1
		}
		if pid != int(current.Load()) {
			continue // an orphan, reaped
		}
		status := ws.ExitStatus()
		if ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
		if stopping.Load() || (ws.Exited() && ws.ExitStatus() == 0) {
			return status
		}
		now := time.Now()
		restarts = append(restarts, now)
		for len(restarts) > 0 && now.Sub(restarts[0]) > restartWindow {
			restarts = restarts[1:]
		}
		if len(restarts) > maxRestarts {
			logf("the agent ended (status %d) %d times within %s; giving up", status, len(restarts), restartWindow)
			return status
		}
		// Nothing the old agent started may outlive it: a process left
		// running could race the new agent's first moments (before it is
		// non-dumpable) for its secret. Everything in the neuron but PID 1
		// is killed, and reaped, before the new agent starts.
		killed := killTheRest()
		logf("the agent ended (status %d); %d other processes ended with it; starting it again", status, killed)
		p, err := spawn(cfg)
		if err != nil {
			logf("restarting the agent: %v", err)
			return 1
		}
		current.Store(int64(p.Pid))
	}
}

// killTheRest kills every process of this pid namespace but PID 1 (the
// caller) and reaps them; it returns how many it reaped.
func killTheRest() int {
	unix.Kill(-1, unix.SIGKILL)
	n := 0
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n // ECHILD: none left
		}
		n++
	}
}

// sendOOMScoreAdj gives the agent pid its own /proc/PID/oom_score_adj,
// which this process (root, where the neuron has a memory ceiling) can
// open and the agent cannot (boot.OOMFDFlag); the byte alone where it
// cannot be opened, so the agent goes on without.
func sendOOMScoreAdj(sock *os.File, pid int) {
	var rights []byte
	if fd, err := unix.Open(fmt.Sprintf("/proc/%d/oom_score_adj", pid), unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		defer unix.Close(fd)
		rights = unix.UnixRights(fd)
	}
	unix.Sendmsg(int(sock.Fd()), []byte{1}, rights, nil, 0)
}
