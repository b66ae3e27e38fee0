package agent

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// collected runs script under sh with its stdout and stderr on pipes, and
// collect over them (with the child's pidfd, or without one: withPidfd
// false). It returns how much each pipe gave and what collect cut.
func collected(t *testing.T, script string, withPidfd bool) (n [2]int, cut [2]bool) {
	t.Helper()
	_, done, result := startCollected(t, script, withPidfd)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("collect of %q did not end", script)
	}
	return result()
}

// startCollected starts script and collect over it on a thread of its own
// (tid), and returns a channel closed when collect has returned, and its
// figures then.
func startCollected(t *testing.T, script string, withPidfd bool) (tid int, done chan struct{}, result func() ([2]int, [2]bool)) {
	t.Helper()
	var pipes [2]int
	var writes [2]*os.File
	for i := range pipes {
		r, w, err := collectPipe()
		if err != nil {
			t.Fatal(err)
		}
		pipes[i], writes[i] = r, w
		t.Cleanup(func() { unix.Close(r) })
	}
	pidfd := -1
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdout, cmd.Stderr = writes[0], writes[1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, PidFD: &pidfd}
	err := cmd.Start()
	writes[0].Close()
	writes[1].Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind
		cmd.Wait()
	})
	if pidfd < 0 {
		t.Fatal("no pidfd from the clone")
	}
	t.Cleanup(func() { unix.Close(pidfd) })
	polled := pidfd
	if !withPidfd {
		polled = -1
	}
	var n [2]int
	var cut [2]bool
	done = make(chan struct{})
	tids := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // its tid stays the poller's
		defer runtime.UnlockOSThread()
		defer close(done)
		tids <- unix.Gettid()
		cut = collect(cmd.Process.Pid, polled, pipes, [2]func([]byte){
			func(p []byte) { n[0] += len(p) }, func(p []byte) { n[1] += len(p) }})
	}()
	return <-tids, done, func() ([2]int, [2]bool) { <-done; return n, cut }
}

// TestCollect: the collected exec reads both pipes to their end, however
// much more than a pipe holds they carry; ends once the command has exited
// and what it left behind holds the pipes without writing; and cuts what
// something left behind keeps writing after the exit. Both with the
// child's pidfd and with waitid in its stead.
func TestCollect(t *testing.T) {
	for _, withPidfd := range []bool{true, false} {
		n, cut := collected(t, "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2; head -c 5 /dev/zero", withPidfd)
		if n != [2]int{300005, 200000} || cut != [2]bool{} {
			t.Errorf("pidfd %v: read %v, cut %v; want [300005 200000], nothing cut", withPidfd, n, cut)
		}
		// sleep holds both pipes open long after sh exits.
		n, cut = collected(t, "sleep 60 & echo out; echo err >&2", withPidfd)
		if n != [2]int{4, 4} || cut != [2]bool{} {
			t.Errorf("pidfd %v, a child left behind: read %v, cut %v; want [4 4], nothing cut", withPidfd, n, cut)
		}
		n, cut = collected(t, "yes & exit 0", withPidfd)
		// The read that passes the cap is dropped whole: up to 64 KiB.
		if !cut[0] || cut[1] || n[0] < postExitCap-64<<10 {
			t.Errorf("pidfd %v, a writer left behind: read %v, cut %v; want stdout cut near %d bytes", withPidfd, n, cut, postExitCap)
		}
	}
}

// TestCollectGraceIsATime: the wait for more output after the exit ends
// drainGrace after the last output, however often signals interrupt the
// poll (a signal every 100 ms restarted a grace of 200 ms per poll, so a
// child left behind holding the pipes kept the exec from answering).
func TestCollectGraceIsATime(t *testing.T) {
	tid, done, result := startCollected(t, "sleep 60 & echo hi", true)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-done:
			if n, cut := result(); n != [2]int{3, 0} || cut != [2]bool{} {
				t.Errorf("read %v, cut %v; want [3 0], nothing cut", n, cut)
			}
			return
		case <-tick.C:
			unix.Tgkill(os.Getpid(), tid, unix.SIGURG) // Go's own preemption signal: handled, harmless
		case <-deadline:
			t.Fatal("collect went on for 10 s under signals; its grace is 200 ms")
		}
	}
}
