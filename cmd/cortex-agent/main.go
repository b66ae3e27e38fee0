//go:build linux

// Command cortex-agent runs inside a neuron and serves the host's commands
// over the channel. It is built static (CGO_ENABLED=0) and kept small.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/agent/logline"
	"github.com/nsys-cortex/cortex/internal/agent/nsboxinit"
	"github.com/nsys-cortex/cortex/internal/agent/vminit"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// spareThreads is how many threads the agent holds from its start.
const spareThreads = 8

func main() {
	// Whatever started this process may have left it descriptors (a
	// host's, a shell's): none reaches what it starts but those it hands
	// over itself. The agent itself marks them once it has read its secret
	// (it may start itself again, in its Landlock domain, before).
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") || os.Getpid() == 1 {
		boot.CloseOnExec()
	}
	// As /init of a microVM's initramfs it is the guest's PID 1 (see
	// vminit.Main); it never returns.
	if os.Getpid() == 1 && os.Args[0] == boot.VMInitPath {
		vminit.Main(version)
	}
	// "cortex-agent init" is PID 1 of a namespace sandbox (see nsboxinit.Init).
	if len(os.Args) > 1 && os.Args[1] == "init" {
		os.Exit(nsboxinit.Init())
	}
	// "cortex-agent egress-tunnel ..." is the host's end of a VM neuron's
	// egress (see confine.EgressTunnel).
	if len(os.Args) > 1 && os.Args[1] == "egress-tunnel" {
		os.Exit(confine.EgressTunnel(os.Args[2:]))
	}
	// "cortex-agent probe DIR" is nsbox's self-check of overlayfs.
	if len(os.Args) == 3 && os.Args[1] == "probe" {
		if err := nsboxinit.Probe(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// "cortex-agent probe-listen ADDR" is the listener of kube mode's
	// network probe: it greets every connection, until killed.
	if len(os.Args) == 3 && os.Args[1] == "probe-listen" {
		fmt.Fprintln(os.Stderr, "cortex-agent:", probeListen(os.Args[2]))
		os.Exit(1)
	}
	// "cortex-agent probe-network" is its self-check of network egress.
	if len(os.Args) == 2 && os.Args[1] == "probe-network" {
		if err := nsboxinit.ProbeNetwork(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// Nothing of the neuron's, though it runs as this agent's user, may
	// ptrace it or read its memory, environment or descriptors (the
	// per-start secret among them): the agent is non-dumpable from its
	// first moment, confined or not.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var cfg agent.Config
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.StringVar(&cfg.ID, "id", "", "the neuron id this agent serves")
	flag.StringVar(&cfg.ChannelDir, "channel-dir", "", "directory to watch for host sockets")
	flag.StringVar(&cfg.Connect, "connect", "", "a single host socket to dial (instead of -channel-dir)")
	flag.StringVar(&cfg.Listen, "listen", "", "a TCP address to listen on for hosts with the token (instead of -channel-dir)")
	trustKey := flag.String("trust-key", "", "with -listen: take hosts whose pod token (kube mode) this public key verifies, instead of the secret")
	trustPin := flag.String("trust-key-sha256", "", "with -trust-key: refuse to start unless the key's SHA-256 (hex) is this, the one the pod was made for")
	flag.StringVar(&cfg.Egress, "egress", "", "with -listen: a loopback address where the neuron's programs find their proxy, carried to the host that holds the egress tunnel (kube mode)")
	flag.StringVar(&cfg.EgressCADir, "egress-ca", "", "with -egress: write the egress proxy's authority ($"+boot.EnvEgressCA+", PEM) and a bundle of this system's roots and it into this directory, for the neuron's programs to trust (kube mode's secrets)")
	podInfo := flag.String("pod-info", "", "with -trust-key: the directory of this pod's namespace, name and uid (the downward API)")
	secretFD := flag.Int(strings.TrimPrefix(boot.SecretFDFlag, "--"), -1, "read the neuron's per-start secret from this descriptor (then closed)")
	rebindFD := flag.Int(strings.TrimPrefix(boot.RebindFDFlag, "--"), -1, "take new identities from the PID 1 on this socket (a microVM's fork)")
	spawnCgroupFD := flag.Int(strings.TrimPrefix(boot.SpawnCgroupFDFlag, "--"), -1, "start commands in the cgroup whose cgroup.threads the PID 1 opened as this descriptor (a microVM's process ceiling)")
	oomFD := flag.Int(strings.TrimPrefix(boot.OOMFDFlag, "--"), -1, "take this agent's own oom_score_adj from the PID 1 on this socket (then closed)")
	flag.StringVar(&cfg.Root, "root", "/", "confine file operations to this directory")
	flag.StringVar(&cfg.Workdir, "workdir", "", "default working directory (default: the root)")
	flag.BoolVar(&cfg.Subreaper, "subreaper", false, "adopt orphaned descendants so shutdown ends them")
	confined := flag.Bool(strings.TrimPrefix(boot.ConfineFlag, "--"), false, "confine this process (no_new_privs, seccomp, Landlock) before serving")
	nested := flag.Bool(strings.TrimPrefix(boot.NestedUsernsFlag, "--"), false, "with -confine: let programs create user namespaces (inner sandboxes)")
	landlocked := flag.Bool(strings.TrimPrefix(confine.LandlockedFlag, "--"), false, "(set by the agent itself) already in its Landlock domain")
	flag.Parse()
	if *showVersion {
		fmt.Printf("cortex-agent %s (protocol %s)\n", version, protocol.Version())
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cortex-agent: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *confined && !*landlocked {
		// Returns only where the kernel cannot scope (why, for the log);
		// otherwise the agent starts again inside its domain.
		why, err := confine.EnterLandlock(os.Args)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "cortex-agent: %s\n", why)
	}
	secret, err := readSecret(*secretFD)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
		os.Exit(1)
	}
	boot.CloseOnExec()
	// The secret proves this agent to every host; an agent that listens
	// (docker's tcp transport) also takes it as the token hosts present.
	cfg.Secret = secret
	if *rebindFD >= 0 {
		// Pollable, so closing it ends the read that waits on it.
		syscall.SetNonblock(*rebindFD, true)
		cfg.Rebind = os.NewFile(uintptr(*rebindFD), "rebind")
	}
	if *spawnCgroupFD >= 0 {
		cfg.SpawnCgroup = os.NewFile(uintptr(*spawnCgroupFD), "cgroup.threads")
	}
	if cfg.Listen != "" {
		cfg.Token = secret
	}
	if cfg.EgressCADir != "" {
		cfg.EgressCAPEM = []byte(os.Getenv(boot.EnvEgressCA))
	}
	if *trustKey != "" {
		check, err := podTokenCheck(*trustKey, *trustPin, *podInfo)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
			os.Exit(1)
		}
		cfg.TokenCheck = check
	}
	if *oomFD >= 0 {
		cfg.OOMScoreAdj = recvOOMScoreAdj(*oomFD)
	} else if f, err := agent.OpenOOMScoreAdj(); err == nil {
		// Opened while the file is still this process's own (the agent
		// is made non-dumpable next, which gives it to root).
		cfg.OOMScoreAdj = f
	}
	if *confined {
		if err := confine.Apply(confine.Options{NestedUserns: *nested}); err != nil {
			fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
			os.Exit(1)
		}
	}
	if *confined {
		// A confined agent is a sandbox's, under the neuron's process
		// ceiling (a plain process's has none): threads started now,
		// kept idle, for the runtime to take at the ceiling, where new
		// ones are refused (see agent.SpareThreads); about five more
		// than the agent has at rest.
		agent.SpareThreads(spareThreads)
	}
	cfg.Version = version
	// The neuron's log: every line cleaned, the whole within a budget (a
	// neuron that makes its agent log as fast as it can fills no disk).
	cfg.Logger = log.New(logline.New(os.Stderr, logline.DefaultBudget), "cortex-agent["+cfg.ID+"] ", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	a, err := agent.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := a.Run(ctx); err != nil {
		cfg.Logger.Printf("stopped: %v", err)
		os.Exit(1)
	}
}

// readSecret takes the neuron's per-start secret from descriptor fd (when
// not -1) or from boot.SecretEnv, and leaves neither behind.
func readSecret(fd int) (string, error) {
	v, fromEnv := os.LookupEnv(boot.SecretEnv)
	os.Unsetenv(boot.SecretEnv)
	if fd < 0 {
		if fromEnv {
			return strings.TrimSpace(v), nil
		}
		return "", nil
	}
	f := os.NewFile(uintptr(fd), "secret")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("reading the secret from descriptor %d: %w", fd, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recvOOMScoreAdj takes this agent's own oom_score_adj from its PID 1 on
// socket fd (boot.OOMFDFlag), and closes the socket; nil when PID 1 sent
// none.
func recvOOMScoreAdj(fd int) *os.File {
	defer syscall.Close(fd)
	buf, oob := make([]byte, 1), make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := syscall.Recvmsg(fd, buf, oob, syscall.MSG_CMSG_CLOEXEC)
	if err != nil || oobn == 0 {
		return nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, f := range fds {
			syscall.Close(f)
		}
		return nil
	}
	return os.NewFile(uintptr(fds[0]), "oom_score_adj")
}

// podTokenCheck is how a kube pod's agent checks a host (-trust-key): the
// host's token must be a pod token (internal/podtoken) that the key in
// keyFile verifies, for this pod as podInfo (the downward API) names it.
// pin, when set, is the key's SHA-256: another key is refused.
func podTokenCheck(keyFile, pin, podInfo string) (func(string) error, error) {
	if podInfo == "" {
		return nil, fmt.Errorf("-trust-key needs -pod-info: a token is checked against the pod it is for")
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("the trust key: %w", err)
	}
	pub, err := podtoken.ParsePublic(string(b))
	if err != nil {
		return nil, fmt.Errorf("the trust key %s: %w", keyFile, err)
	}
	if pin != "" {
		if err := podtoken.CheckFingerprint(pub, pin); err != nil {
			return nil, err
		}
	}
	self, err := podtoken.ReadIdentity(podInfo)
	if err != nil {
		return nil, err
	}
	return func(tok string) error {
		_, err := podtoken.Verify(pub, tok, self, time.Now())
		return err
	}, nil
}

// probeListen greets every connection to addr with protocol.ProbeGreeting
// and closes it (kube mode's network probe; docs/kube.md); it returns only
// why it could not go on.
func probeListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return protocol.GreetProbes(ln, (&net.Dialer{}).DialContext)
}
