package confine

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent/egress"
	"github.com/nsys-cortex/cortex/internal/agent/logline"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// EgressTunnel is "cortex-agent egress-tunnel [--uid U --gid G] [--max-conns N] [--secrets-fd N] [RULE...]":
// the host's end of a VM neuron's egress tunnel (see egress.GuestTunnel).
// It reads the host's resolver files, gives up root for uid and gid when
// given them, confines itself as the agent is confined, and serves the
// proxy for the rules on every stream the guest opens, until the VMM is
// gone (its end of the pair closes) or a signal ends it. Its decisions go
// to stderr, the neuron's log, at a bounded rate.
func EgressTunnel(args []string) int {
	logf := logline.Logf(os.Stderr, "cortex-egress")
	fs := flag.NewFlagSet("egress-tunnel", flag.ContinueOnError)
	uid := fs.Int("uid", -1, "run as this uid (from root)")
	gid := fs.Int("gid", -1, "run as this gid (from root)")
	listen := fs.String("listen", "", "serve a tunnel on each connection to this Unix socket (the VMM's guest-initiated vsock connections) instead of descriptor 3")
	vmm := fs.Int("pid", 0, "with --listen: end when this process, the VMM, does")
	statsFD := fs.Int("stats-fd", 0, "report what the proxy let through (boot.EgressStats) in the file open on this descriptor")
	maxConns := fs.Int("max-conns", 0, "serve at most this many connections at once (0: the proxy's default)")
	secretsFD := fs.Int("secrets-fd", 0, "read the secrets to put into requests (boot.EgressTunnelSecrets, JSON) from this descriptor, to its end")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// Before it holds anything of the host's (the secrets, their
	// authority's key): no process of its uid may read its memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		logf("non-dumpable: %v", err)
		return 1
	}
	plan, err := PlanEgress(fs.Args())
	if err != nil {
		logf("%v", err)
		return 1
	}
	if *secretsFD > 2 {
		if err := readSecrets(plan, *secretsFD); err != nil {
			logf("%v", err)
			return 1
		}
	}
	var ln *net.UnixListener
	var vmmGone *os.File
	if *listen != "" {
		if ln, vmmGone, err = listenTunnels(*listen, *vmm, *uid, *gid); err != nil {
			logf("%v", err)
			return 1
		}
		defer ln.Close()
		defer vmmGone.Close()
	}
	if err := dropTo(*uid, *gid); err != nil {
		logf("%v", err)
		return 1
	}
	// Everything it reads is read (the resolver's files, the roots, the
	// secrets): from here on no file at all, so a flaw in the proxy
	// reaches none of the files of the user it runs as (in kube mode the
	// host's, with its signing key and token).
	if why, err := DenyFiles(); err != nil {
		logf("%v", err)
		return 1
	} else if why != "" {
		logf("%s", why)
	}
	if err := Apply(Options{Proxy: true}); err != nil {
		logf("%v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer stop()
	logf("serving the egress tunnel for %d rules", len(fs.Args()))
	p := plan.Proxy(logf)
	p.MaxConns = *maxConns
	if *statsFD > 2 {
		unix.CloseOnExec(*statsFD)
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.PublishStats(sctx, os.NewFile(uintptr(*statsFD), "egress-stats"), time.Second)
		}()
		defer func() { cancel(); <-done }() // the last figures are written before it exits
	}
	if ln != nil {
		go func() {
			waitReadable(vmmGone)
			stop()
		}()
		serveTunnels(ctx, ln, p, logf)
		return 0
	}
	conn, err := net.FileConn(os.NewFile(boot.EgressTunnelFD, "tunnel"))
	if err != nil {
		logf("the tunnel's stream on descriptor %d: %v", boot.EgressTunnelFD, err)
		return 1
	}
	if err := p.ServeTunnel(ctx, conn); err != nil {
		logf("the tunnel ended: %v", err)
		return 1
	}
	return 0
}

// readSecrets adds the secrets on descriptor fd (a pipe from the host) to
// plan.
func readSecrets(plan *EgressPlan, fd int) error {
	f := os.NewFile(uintptr(fd), "egress-secrets")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, boot.MaxEgressTunnelSecrets+1))
	if err != nil {
		return fmt.Errorf("secrets: reading descriptor %d: %w", fd, err)
	}
	if len(b) > boot.MaxEgressTunnelSecrets {
		return fmt.Errorf("secrets: more than %d bytes on descriptor %d", boot.MaxEgressTunnelSecrets, fd)
	}
	var s boot.EgressTunnelSecrets
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("secrets: descriptor %d: %w", fd, err)
	}
	return plan.WithTunnelSecrets(s)
}

// dropTo gives up root for uid and gid, with no supplementary groups;
// -1 for both keeps this process's identity.
func dropTo(uid, gid int) error {
	if uid < 0 && gid < 0 {
		return nil
	}
	if uid < 0 || gid < 0 {
		return errors.New("--uid and --gid go together")
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}

// listenTunnels listens on path for the VMM's connections, giving the
// socket to uid and gid (the VMM's), and opens a pidfd of the VMM.
func listenTunnels(path string, vmm, uid, gid int) (*net.UnixListener, *os.File, error) {
	if vmm <= 0 {
		return nil, nil, errors.New("--listen needs --pid, the VMM's process")
	}
	fd, err := unix.PidfdOpen(vmm, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("the VMM's process %d: %w", vmm, err)
	}
	pidfd := os.NewFile(uintptr(fd), "vmm")
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		pidfd.Close()
		return nil, nil, fmt.Errorf("the tunnel's socket: %w", err)
	}
	if uid >= 0 {
		err = os.Chown(path, uid, gid)
	}
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		pidfd.Close()
		return nil, nil, fmt.Errorf("the tunnel's socket: %w", err)
	}
	return ln, pidfd, nil
}

// waitReadable returns once f polls readable (a pidfd: its process ended).
func waitReadable(f *os.File) {
	for {
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// serveTunnels serves a tunnel on each connection ln accepts until ctx
// ends, then closes them and waits for them.
func serveTunnels(ctx context.Context, ln *net.UnixListener, p *egress.Proxy, logf func(string, ...any)) {
	err := egress.ServeConns(ctx, ln, func(ctx context.Context, c net.Conn) {
		if err := p.ServeTunnel(ctx, c); err != nil {
			logf("a tunnel ended: %v", err)
		}
	})
	if err != nil {
		logf("the tunnel's socket: %v", err)
	}
}
