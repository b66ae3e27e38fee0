package lifecycle

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// watchPID's channel closes when the process exits, when the context
// ends, and at once for a process that is not there.
func TestWatchPID(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}

	cmd := start()
	done := watchPID(context.Background(), cmd.Process.Pid)
	select {
	case <-done:
		t.Fatal("closed while the process runs")
	default:
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !closed(done) {
		t.Fatal("not closed within 10 s of the process's exit")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd = start()
	done = watchPID(ctx, cmd.Process.Pid)
	cancel()
	if !closed(done) {
		t.Fatal("not closed within 10 s of the context's end")
	}

	cmd = start()
	pid := cmd.Process.Pid
	cmd.Process.Kill()
	cmd.Wait() // reaped: the pid names no process now
	if !closed(watchPID(context.Background(), pid)) {
		t.Fatal("a process that is gone is watched")
	}
}
