// Command nsys-cortex is the host CLI of Nsys Cortex. It composes the
// registered isolation modes and hands them to the command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/agentbin"
	"github.com/nsys-cortex/cortex/internal/cli"
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
	// Descriptors inherited without close-on-exec (a shell's `exec 7<file`)
	// must not reach the neurons this process starts.
	boot.CloseOnExec()
	// SIGINT, SIGTERM and SIGHUP cancel what is running (the remote command
	// is killed, temporary files are removed); the exit status then names
	// the signal (128+N).
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() { cancel(cli.SignalCause{Signal: (<-sigs).(syscall.Signal)}) }()
	app := &cli.App{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Version:       version,
		Backends:      []sandbox.Backend{firecracker.Backend(), qemu.Backend(), docker.Backend(), nsbox.Backend(), process.Backend()},
		AgentEmbedded: agentbin.Embedded(),
	}
	code := app.Run(ctx, os.Args[1:])
	signal.Stop(sigs)
	os.Exit(code)
}
