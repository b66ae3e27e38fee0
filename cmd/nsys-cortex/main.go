// Command nsys-cortex is the host CLI of Nsys Cortex. It composes the
// registered isolation modes and hands them to the command line.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agentbin"
	"github.com/nsys-cortex/cortex/internal/cli"
	"github.com/nsys-cortex/cortex/internal/fullbin"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// NSYS_CORTEX_DEBUG_START=1: how much CPU this process used before main
	// (the runtime's start and every package's initialisation), which the
	// start test holds to its budget (docs/decisions.md, "One file, two programs").
	if os.Getenv("NSYS_CORTEX_DEBUG_START") == "1" {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		fmt.Fprintf(os.Stderr, "nsys-cortex: cpu before main: %d us\n", ts.Nano()/1000)
	}
	// Descriptors inherited without close-on-exec (a shell's `exec 7<file`)
	// must not reach the neurons this process starts.
	boot.CloseOnExec()
	// SIGINT, SIGTERM and SIGHUP cancel what is running (the remote command
	// is killed, temporary files are removed); the exit status then names
	// the signal (128+N). signal.Notify starts a thread of its own and
	// waits for it, a quarter of a millisecond here: it runs beside the
	// command's start, and a command waits for it (App.AwaitSignals)
	// before it changes anything.
	ctx, cancel := context.WithCancelCause(context.Background())
	notified := make(chan struct{})
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		close(notified)
		cancel(cli.SignalCause{Signal: (<-sigs).(syscall.Signal)})
	}()
	app := &cli.App{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		AwaitSignals:  func() { <-notified },
		Version:       version,
		Backends:      append([]sandbox.Backend{firecracker.Backend(), qemu.Backend(), docker.Backend(), nsbox.Backend(), process.Backend()}, fullModes()...),
		AgentEmbedded: agentbin.Embedded(),
		SharedKeys:    sharedKeys(),
		FullProgram: func() (*os.File, error) {
			lay, err := layout.FromEnv()
			if err != nil {
				return nil, err
			}
			return fullbin.Open(lay.BinDir())
		},
	}
	os.Exit(app.Run(ctx, os.Args[1:]))
}
