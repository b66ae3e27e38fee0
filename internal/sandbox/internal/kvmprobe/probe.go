package kvmprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultDevice is KVM's device node.
const DefaultDevice = "/dev/kvm"

// DefaultTimeout bounds the guest's run: on a host that virtualizes in
// hardware it takes a few milliseconds (see LoopIterations), so a second
// leaves a wide margin for a loaded machine.
const DefaultTimeout = time.Second

// childEnv marks the child: its value is "<timeout>|<device>".
const childEnv = "NSYS_CORTEX_KVM_PROBE_CHILD"

// Result is what the probe found.
type Result struct {
	// OK: the guest ran its code and exited as it must.
	OK bool `json:"ok"`
	// Stage is where the probe stopped when it failed: open, api-version,
	// create-vm, memory, create-vcpu, registers, run, exit, timeout, child.
	Stage string `json:"stage,omitempty"`
	// Detail says what happened, for a person.
	Detail string `json:"detail"`
}

func init() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	// This process is a probe child (see Run): run the guest, print the
	// result, and never get to the program's main.
	timeout, device, _ := strings.Cut(spec, "|")
	d, err := time.ParseDuration(timeout)
	if err != nil || device == "" {
		d, device = DefaultTimeout, DefaultDevice
	}
	child(device, d)
}

// child runs the guest on a locked thread; a timer ends the process when
// KVM_RUN does not come back (exit_group takes the vCPU thread with it).
func child(device string, timeout time.Duration) {
	var once sync.Once
	report := func(r Result) {
		once.Do(func() {
			json.NewEncoder(os.Stdout).Encode(r) // the parent reads it; nothing to do if it is gone
			os.Exit(0)
		})
	}
	time.AfterFunc(timeout, func() {
		report(Result{Stage: "timeout", Detail: fmt.Sprintf(
			"%s opens and a VM is created, but KVM_RUN did not return within %s: the probe guest's %d-iteration loop, "+
				"milliseconds on hardware virtualization, did not finish, so guests do not run at hardware speed here "+
				"(nested virtualization is absent or emulated; a Linux guest would hang at boot)", device, timeout, LoopIterations)})
	})
	runtime.LockOSThread() // the vCPU is used from the thread that made it
	start := time.Now()
	if r := runGuest(device); r != nil {
		report(*r)
	}
	report(Result{OK: true, Detail: fmt.Sprintf("%s runs guests at hardware speed: a VM ran a %d-iteration loop and mov/out/hlt in %s, "+
		"exiting with OUT 0x42 to port 0x10, then HLT", device, LoopIterations, time.Since(start).Round(time.Microsecond))})
}

// Run proves KVM works by running the probe guest in a child process (this
// program's executable), waiting at most timeout for the guest and a little
// longer for the child itself. It never leaves a thread of this process
// blocked: a child that does not exit even when killed is left to the
// kernel and reported.
func Run(ctx context.Context, device string, timeout time.Duration) Result {
	if device == "" {
		device = DefaultDevice
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if _, err := os.Stat(device); err != nil {
		return Result{Stage: "open", Detail: fmt.Sprintf("%s: %v (is KVM enabled in the firmware and the kvm module loaded?)", device, unwrapPath(err))}
	}
	self, err := os.Executable()
	if err != nil {
		return Result{Stage: "child", Detail: "cannot find this program to run the probe in: " + err.Error()}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{Stage: "child", Detail: err.Error()}
	}
	defer pr.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+timeout.String()+"|"+device)
	cmd.Stdout = pw
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return Result{Stage: "child", Detail: "starting the probe: " + err.Error()}
	}
	grace := timeout + 3*time.Second
	deadline := time.Now().Add(grace)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	pr.SetReadDeadline(deadline)
	out, readErr := io.ReadAll(pr)
	if !exited(cmd.Process.Pid, deadline) {
		cmd.Process.Kill()
		if !exited(cmd.Process.Pid, time.Now().Add(time.Second)) {
			return Result{Stage: "child", Detail: fmt.Sprintf("the probe (pid %d) is stuck in KVM and does not die even when killed: this machine's KVM is broken", cmd.Process.Pid)}
		}
	}
	cmd.Wait() // it has exited: this does not block
	var r Result
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		detail := fmt.Sprintf("the probe gave no answer within %s", grace)
		if readErr == nil || !errors.Is(readErr, os.ErrDeadlineExceeded) {
			detail = fmt.Sprintf("the probe gave no answer (%s)", cmd.ProcessState)
		}
		if s := strings.TrimSpace(stderr.String()); s != "" {
			detail += ": " + s
		}
		return Result{Stage: "child", Detail: detail}
	}
	return r
}

// exited waits until pid has exited (not reaping it), or deadline.
func exited(pid int, deadline time.Time) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != nil || info.Signo != 0 {
			return true // gone, or exited (and still ours to reap)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
