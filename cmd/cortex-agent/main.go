// Command cortex-agent runs inside a neuron and serves the host's commands
// over the channel. It is built static (CGO_ENABLED=0) and kept small.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/agent/confine"
	"github.com/nsys-cortex/cortex/internal/agent/guestinit"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// As /init of a microVM's initramfs it is the guest's PID 1 (see
	// guestinit.Main); it never returns.
	if os.Getpid() == 1 && os.Args[0] == guestinit.InitPath {
		guestinit.Main(version)
	}
	// "cortex-agent init" is PID 1 of a namespace sandbox (see confine.Init).
	if len(os.Args) > 1 && os.Args[1] == "init" {
		os.Exit(confine.Init())
	}
	// "cortex-agent egress-tunnel ..." is the host's end of a VM neuron's
	// egress (see confine.EgressTunnel).
	if len(os.Args) > 1 && os.Args[1] == "egress-tunnel" {
		os.Exit(confine.EgressTunnel(os.Args[2:]))
	}
	// "cortex-agent probe DIR" is nsbox's self-check of overlayfs.
	if len(os.Args) == 3 && os.Args[1] == "probe" {
		if err := confine.Probe(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	// "cortex-agent probe-network" is its self-check of network egress.
	if len(os.Args) == 2 && os.Args[1] == "probe-network" {
		if err := confine.ProbeNetwork(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var cfg agent.Config
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.StringVar(&cfg.ID, "id", "", "the neuron id this agent serves")
	flag.StringVar(&cfg.ChannelDir, "channel-dir", "", "directory to watch for host sockets")
	flag.StringVar(&cfg.Connect, "connect", "", "a single host socket to dial (instead of -channel-dir)")
	flag.StringVar(&cfg.Listen, "listen", "", "a TCP address to listen on for hosts with the token (instead of -channel-dir)")
	tokenFile := flag.String("token-file", "", "a file holding the token hosts must present (with -listen)")
	flag.StringVar(&cfg.Root, "root", "/", "confine file operations to this directory")
	flag.StringVar(&cfg.Workdir, "workdir", "", "default working directory (default: the root)")
	flag.BoolVar(&cfg.Subreaper, "subreaper", false, "adopt orphaned descendants so shutdown ends them")
	confined := flag.Bool(strings.TrimPrefix(protocol.ConfineFlag, "--"), false, "confine this process (no_new_privs, seccomp, Landlock) before serving")
	nested := flag.Bool(strings.TrimPrefix(protocol.NestedUsernsFlag, "--"), false, "with -confine: let programs create user namespaces (inner sandboxes)")
	flag.Parse()
	if *showVersion {
		fmt.Printf("cortex-agent %s (protocol %s)\n", version, protocol.Version())
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cortex-agent: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cortex-agent: reading the token: %v\n", err)
			os.Exit(1)
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	if *confined {
		if err := confine.Apply(confine.Options{NestedUserns: *nested}); err != nil {
			fmt.Fprintf(os.Stderr, "cortex-agent: %v\n", err)
			os.Exit(1)
		}
	}
	cfg.Version = version
	cfg.Logger = log.New(os.Stderr, "cortex-agent["+cfg.ID+"] ", log.LstdFlags|log.Lmicroseconds|log.LUTC)
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
