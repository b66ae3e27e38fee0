// Command nsys-cortex is the host CLI of Nsys Cortex. It composes the
// registered isolation modes and hands them to the command line.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agentbin"
	"github.com/nsys-cortex/cortex/internal/cli"
	"github.com/nsys-cortex/cortex/internal/cli/sigcatch"
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
	// the signal (128+N). They are caught from the program's start, beside
	// it (sigcatch), and a command waits for that (App.AwaitSignals)
	// before it changes anything.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigcatch.Handle(func(s os.Signal) { cancel(cli.SignalCause{Signal: s.(syscall.Signal)}) })
	app := &cli.App{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		AwaitSignals:  sigcatch.Await,
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
