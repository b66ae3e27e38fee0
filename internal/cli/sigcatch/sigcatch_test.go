package sigcatch

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// Once Await returns, the three signals go to the handler instead of
// ending the program (a SIGHUP not caught would end this test).
func TestCaught(t *testing.T) {
	Await()
	caught := make(chan os.Signal, 1)
	Handle(func(s os.Signal) { caught <- s })
	defer Handle(nil)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT} {
		if signal.Ignored(sig) {
			t.Logf("%v was ignored at this test's start (under nohup?): not caught, as it must not be", sig)
			continue
		}
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-caught:
			if got != sig {
				t.Errorf("sent %v, caught %v", sig, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v not caught within 10 s", sig)
		}
	}
}

// A process that handles no signal (its main never runs: the KVM probe's
// child, a test binary) ends on one as it would with nothing caught; one
// ignored at its start (nohup) stays ignored, handled or not.
func TestUnhandledEndsTheProcess(t *testing.T) {
	if os.Getenv("SIGCATCH_CHILD") == "1" {
		Await()
		if os.Getenv("SIGCATCH_HANDLE") == "1" {
			Handle(func(os.Signal) { os.Exit(3) })
		}
		fmt.Println("ready")
		time.Sleep(time.Minute) // the child, waiting for its signal (the test kills it)
		os.Exit(0)
	}
	for _, tc := range []struct {
		sig    syscall.Signal
		ignore bool
	}{{syscall.SIGINT, false}, {syscall.SIGTERM, false}, {syscall.SIGHUP, false}, {syscall.SIGHUP, true}} {
		if !tc.ignore && signal.Ignored(tc.sig) {
			// The child would start with it ignored too.
			t.Logf("%v was ignored at this test's start (under nohup?): its default action is not tried", tc.sig)
			continue
		}
		argv := []string{os.Args[0], "-test.run", "^TestUnhandledEndsTheProcess$"}
		if tc.ignore {
			argv = append([]string{"nohup"}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SIGCATCH_CHILD=1")
		if tc.ignore {
			cmd.Env = append(cmd.Env, "SIGCATCH_HANDLE=1")
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child said %q", line)
		}
		cmd.Process.Signal(tc.sig)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second): // ignoring it, it runs on
			cmd.Process.Kill()
			<-done
		}
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		want := tc.sig
		if tc.ignore {
			want = syscall.SIGKILL
		}
		if !ws.Signaled() || ws.Signal() != want {
			t.Errorf("%v (ignored at the start: %v): the child ended with %v, want %v", tc.sig, tc.ignore, cmd.ProcessState, want)
		}
	}
}
