package faultpoint

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestHit: a process dies of SIGKILL at a point its environment names,
// and passes every other point.
func TestHit(t *testing.T) {
	if p := os.Getenv("FAULTPOINT_TEST_CHILD"); p != "" {
		Hit("other.point")
		Hit(p)
		os.Exit(0) // not reached when p is named
	}
	for env, killed := range map[string]bool{"a.b": true, "x.y,a.b": true, "a.bc": false, "": false} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHit$")
		cmd.Env = append(os.Environ(), "FAULTPOINT_TEST_CHILD=a.b", Env+"="+env)
		err := cmd.Run()
		var ee *exec.ExitError
		got := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if got != killed || !killed && err != nil {
			t.Errorf("%s=%q: killed %v (%v), want %v", Env, env, got, err, killed)
		}
	}
}
