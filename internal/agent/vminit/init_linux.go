package vminit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/agent/logline"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// guest is PID 1's state.
type guest struct {
	cfg     boot.VMConfig
	version string
	boot    time.Time

	bridge *bridge
	tunnel *egress.GuestTunnel // with network egress

	// rebind is PID 1's end of the agent's rebind socket
	// (boot.RebindFDFlag); rebindMu makes one rebind at a time.
	rebind   *os.File
	rebindMu sync.Mutex

	mu       sync.Mutex
	agent    int  // the agent's pid
	stopping bool // the machine is going down
}

// Main is the whole life of the guest's PID 1. It never returns: when the
// agent ends, or boot fails, the machine is reset, which ends the VMM (QEMU
// runs with -no-reboot; Firecracker exits on a guest reset).
func Main(version string) {
	g := &guest{version: version, boot: time.Now()}
	// Handled, not ignored: children must not inherit ignored signals.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGPWR, unix.SIGPIPE)
	go func() {
		for s := range sigs {
			if s == unix.SIGTERM || s == unix.SIGPWR {
				g.requestStop("PID 1 received " + s.String())
			}
		}
	}()
	if err := g.start(); err != nil {
		g.logf("boot failed: %v", err)
		g.halt()
	}
	g.reap()
}

// logf writes a line of PID 1's to the console (the neuron's log on the
// host), cleaned and within its budget.
var logf = logline.Logf(os.Stderr, "cortex-init")

func (g *guest) logf(format string, args ...any) { logf(format, args...) }

// start boots the machine up to a running agent and its bridges.
func (g *guest) start() error {
	if err := mountEarly(); err != nil {
		return err
	}
	params := moduleParams()
	n, err := loadModules(boot.VMModulesDir, params)
	if err != nil {
		return err
	}
	later, err := openModules(boot.VMLaterModulesDir)
	if err != nil {
		g.logf("%v (no vsock channel)", err)
	}
	disks, err := findDisks(5 * time.Second)
	if err != nil {
		return err
	}
	if g.cfg, err = readConfig(disks.config); err != nil {
		return err
	}
	if err := switchRoot(disks); err != nil {
		return err
	}
	if err := mountLate(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(g.cfg.ID)); err != nil {
		return fmt.Errorf("hostname: %w", err)
	}
	if err := confine.LoopbackUp(); err != nil {
		return fmt.Errorf("network: bringing up lo: %w", err)
	}
	if !g.cfg.NestedUserns {
		if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
			return fmt.Errorf("user namespaces: turning them off: %w", err)
		}
	}
	// Links in world-writable sticky directories and to files one does
	// not own are the kernel's to refuse (an image without systemd leaves
	// both off): PID 1 works as root on trees the agent's user writes.
	for _, f := range []string{"/proc/sys/fs/protected_hardlinks", "/proc/sys/fs/protected_symlinks"} {
		if err := os.WriteFile(f, []byte("1"), 0); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	// The console is the neuron's log on the host: from here on the
	// kernel writes only emergencies there, and no line per crash of a
	// program whose name the neuron chose (PID 1's own lines are cleaned
	// and bounded: logline).
	os.WriteFile("/proc/sys/kernel/printk", []byte("1"), 0)
	os.WriteFile("/proc/sys/debug/exception-trace", []byte("0"), 0)
	// The channel directory is PID 1's: the agent reads it and dials the
	// sockets the bridge places there, nobody else writes it.
	if err := os.MkdirAll(boot.VMChannelDir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(boot.VMChannelDir, 0o755); err != nil {
		return err
	}
	if err := g.prepareUser(); err != nil {
		return err
	}
	if g.cfg.Egress != "" {
		// Listening before the agent starts: its programs find the proxy
		// from their first moment.
		if err := g.startEgress(); err != nil {
			return err
		}
	}
	cg, spawnThreads, err := pidsCgroup(g.cfg.Pids)
	if err != nil {
		return err
	}
	pid, err := g.startAgent(cg, spawnThreads)
	if err != nil {
		return fmt.Errorf("starting the agent: %w", err)
	}
	g.mu.Lock()
	g.agent = pid
	g.mu.Unlock()
	g.logf("cortex-agent %s: agent %d started %s after PID 1 did (%d modules)", g.version, pid, time.Since(g.boot).Round(time.Millisecond), n)
	uid := boot.VMAgentUID
	if g.cfg.Root {
		uid = 0
	}
	g.bridge = &bridge{logf: g.logf, uid: uid, agent: func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.agent
	}}
	if g.cfg.Ports >= 0 {
		go g.bridge.servePorts(g.cfg.Ports)
	}
	primeCtl()
	go g.serveCtl()
	go func() {
		// vsock needs its modules; they are loaded now, the boot done.
		if err := loadOpened(later, params); err != nil || len(later) == 0 {
			if err != nil {
				g.logf("%v (no vsock channel)", err)
			}
			return
		}
		if p := port(g.cfg.VsockPort, boot.DefaultVsockPort); p > 0 {
			go g.bridge.serveVsock(uint32(p))
		}
		if p := port(g.cfg.CtlVsockPort, boot.DefaultCtlVsockPort); p > 0 {
			go g.serveCtlVsock(uint32(p))
		}
		if g.tunnel != nil && g.cfg.EgressVsockPort > 0 {
			go g.serveEgressVsock(uint32(g.cfg.EgressVsockPort))
		}
	}()
	return nil
}

func port(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// startAgent runs this binary again as the ordinary agent, watching the
// channel directory (as in every other mode), inside the pids cgroup,
// with the cgroup its commands start in (see pidsCgroup). It closes both.
func (g *guest) startAgent(cgroup, spawnThreads *os.File) (int, error) {
	if spawnThreads != nil {
		defer spawnThreads.Close()
	}
	// Confined as in every other mode (no_new_privs, the seccomp filter,
	// Landlock where the kernel has it): the guest's kernel is the VM's
	// own, but io_uring, vsock (which reaches the host's VMM) and the
	// i386 entry point are surface no command needs.
	args := []string{"cortex-agent", "--id", g.cfg.ID, "--channel-dir", boot.VMChannelDir, "--root", "/",
		"--workdir", g.cfg.Workdir, "--subreaper", boot.ConfineFlag}
	if g.cfg.NestedUserns {
		args = append(args, boot.NestedUsernsFlag)
	}
	var extra []*os.File
	if g.cfg.Secret != "" {
		secret, err := boot.SecretPipe(g.cfg.Secret)
		if err != nil {
			return 0, fmt.Errorf("the agent's secret: %w", err)
		}
		defer secret.Close()
		// PID 1 needs it no more: the agent holds it (a fork's guest,
		// rebound to a secret of its own, keeps no copy of its source's).
		g.cfg.Secret = ""
		extra = []*os.File{secret}
		args = append(args, boot.SecretFDFlag, "3")
	}
	if spawnThreads != nil {
		args = append(args, boot.SpawnCgroupFDFlag, fmt.Sprint(3+len(extra)))
		extra = append(extra, spawnThreads)
	}
	// A socket on which a restore under another id (a fork) gives the
	// agent its new identity.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("the agent's rebind socket: %w", err)
	}
	unix.SetNonblock(fds[0], true) // pollable: its reads and writes have deadlines
	mine, theirs := os.NewFile(uintptr(fds[0]), "rebind"), os.NewFile(uintptr(fds[1]), "rebind")
	defer theirs.Close()
	args = append(args, boot.RebindFDFlag, fmt.Sprint(3+len(extra)))
	extra = append(extra, theirs)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: args, Env: g.cfg.Env, Dir: g.cfg.Workdir, ExtraFiles: extra,
		Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if !g.cfg.Root {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: boot.VMAgentUID, Gid: boot.VMAgentGID, Groups: []uint32{boot.VMAgentGID}}
	}
	if cgroup != nil {
		defer cgroup.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgroup.Fd())
	}
	if err := cmd.Start(); err != nil {
		mine.Close()
		return 0, err
	}
	g.rebindMu.Lock()
	g.rebind = mine
	g.rebindMu.Unlock()
	return cmd.Process.Pid, nil // reaped by reap, never by cmd.Wait
}

// requestStop brings the machine down from another goroutine than the
// reaper's.
func (g *guest) requestStop(why string) { go g.shutdown(why) }

// reap collects every process that ends with PID 1 as its parent: the agent
// (then the machine goes down) and orphans. It never returns. Blocking in
// wait4 is also what keeps a Go PID 1 from deadlocking: the runtime would
// panic with every goroutine asleep, and the kernel with it.
func (g *guest) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil {
			if !errors.Is(err, unix.EINTR) {
				time.Sleep(100 * time.Millisecond) // no child (going down): nothing to reap yet
			}
			continue
		}
		g.mu.Lock()
		agent := pid == g.agent
		g.mu.Unlock()
		if agent {
			g.shutdown(fmt.Sprintf("the agent ended (%s)", describe(ws)))
		}
	}
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// shutdown ends every process (SIGTERM, up to a second's grace, SIGKILL),
// syncs the disks and resets the machine. It does not return.
func (g *guest) shutdown(why string) {
	g.mu.Lock()
	if g.stopping {
		g.mu.Unlock()
		return // another goroutine brings it down
	}
	g.stopping = true
	g.mu.Unlock()
	g.logf("going down: %s", why)
	unix.Kill(-1, unix.SIGTERM)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if pid <= 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	unix.Kill(-1, unix.SIGKILL)
	g.halt()
}

// halt syncs and resets the machine; the VMM exits.
func (g *guest) halt() {
	unix.Sync()
	g.logf("reset")
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	// Not reached; if reset is refused, stay here so the kernel does not
	// panic on PID 1's exit.
	for {
		time.Sleep(time.Hour)
	}
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// moduleParams collects module.param=value from the kernel command line,
// the parameters modprobe would pass to each module.
func moduleParams() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	return parseModuleParams(string(b))
}

func parseModuleParams(cmdline string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(cmdline) {
		k, v, ok := strings.Cut(f, "=")
		mod, param, dotted := strings.Cut(k, ".")
		if !ok || !dotted || mod == "" || param == "" {
			continue
		}
		mod = strings.ReplaceAll(mod, "-", "_")
		if out[mod] != "" {
			out[mod] += " "
		}
		out[mod] += param + "=" + v
	}
	return out
}
