package confine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// TunnelFD is the descriptor "cortex-agent egress-tunnel" finds its
// stream on: one end of a socket pair whose other end the VMM holds.
const TunnelFD = 3

// EgressTunnel is "cortex-agent egress-tunnel [--uid U --gid G] [RULE...]":
// the host's end of a VM neuron's egress tunnel (see egress.GuestTunnel).
// It reads the host's resolver files, gives up root for uid and gid when
// given them, confines itself as the agent is confined, and serves the
// proxy for the rules on every stream the guest opens, until the VMM is
// gone (its end of the pair closes) or a signal ends it. Its decisions go
// to stderr, the neuron's log, at a bounded rate.
func EgressTunnel(args []string) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s cortex-egress: "+format+"\n", append([]any{time.Now().UTC().Format(logTime)}, args...)...)
	}
	fs := flag.NewFlagSet("egress-tunnel", flag.ContinueOnError)
	uid := fs.Int("uid", -1, "run as this uid (from root)")
	gid := fs.Int("gid", -1, "run as this gid (from root)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	plan, err := planEgress(&protocol.SandboxInit{Egress: &protocol.SandboxEgress{Allow: fs.Args(), Listen: "tunnel"}})
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := dropTo(*uid, *gid); err != nil {
		logf("%v", err)
		return 1
	}
	if err := Apply(Options{}); err != nil {
		logf("%v", err)
		return 1
	}
	conn, err := net.FileConn(os.NewFile(TunnelFD, "tunnel"))
	if err != nil {
		logf("the tunnel's stream on descriptor %d: %v", TunnelFD, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer stop()
	logf("serving the egress tunnel for %d rules", len(fs.Args()))
	if err := plan.proxy(logf).ServeTunnel(ctx, conn); err != nil {
		logf("the tunnel ended: %v", err)
		return 1
	}
	return 0
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
