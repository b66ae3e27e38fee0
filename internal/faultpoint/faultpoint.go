// Package faultpoint kills this process at a named point of its work when
// NSYS_CORTEX_FAULT names that point: how the fault-injection tests cut a
// command or the daemon short at an exact phase of create, destroy, cp,
// snapshot and restore, with kill -9 and never a sleep (docs/faults.md).
// Unset, a point costs one environment lookup.
package faultpoint

import (
	"os"
	"strings"
	"syscall"
)

// Env names the points to die at: NAME[,NAME...].
const Env = "NSYS_CORTEX_FAULT"

// Hit kills this process with SIGKILL, at once and without any cleanup,
// when NSYS_CORTEX_FAULT names point.
func Hit(point string) {
	v := os.Getenv(Env)
	if v == "" {
		return
	}
	for _, p := range strings.Split(v, ",") {
		if p == point {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}
