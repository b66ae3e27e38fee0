// Package sigcatch catches SIGINT, SIGTERM and SIGHUP for nsys-cortex from
// the start of the program. signal.Notify starts a thread of its own and
// hands it each signal in turn, waiting for it each time: about a quarter
// of a millisecond here, on the way of every command that waits for it
// (cli.App.AwaitSignals). This package's initialisation starts it in a
// goroutine, so that it runs beside the initialisation of the packages
// after it, on the other core, and is done before main needs it. Only
// cmd/nsys-cortex imports it.
//
// A signal caught before main says what to do with it (Handle), or in a
// process whose main never does (the KVM probe's child, which works in
// an init; a test binary), gets its default action: the process ends as
// if nothing had caught it. A signal ignored at the start (nohup's
// SIGHUP) stays ignored.
package sigcatch

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Signals are the signals caught.
var Signals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

var (
	ready   = make(chan struct{})
	mu      sync.Mutex
	handler func(os.Signal)
)

func init() {
	go func() {
		c := make(chan os.Signal, 1)
		for _, sig := range Signals {
			if !signal.Ignored(sig) {
				signal.Notify(c, sig)
			}
		}
		close(ready)
		for sig := range c {
			mu.Lock()
			h := handler
			mu.Unlock()
			if h != nil {
				h(sig)
				continue
			}
			signal.Reset(sig) // no one takes it: its default action
			syscall.Kill(syscall.Getpid(), sig.(syscall.Signal))
		}
	}()
}

// Await returns once the signals are caught; until then they end the
// program.
func Await() { <-ready }

// Handle has h called with each signal caught from now on.
func Handle(h func(os.Signal)) {
	mu.Lock()
	defer mu.Unlock()
	handler = h
}
