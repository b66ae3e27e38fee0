package firecracker

import (
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// A neuron is its Firecracker process: found by the jail id the jailer
// passes it (--id) and the marker beside its jail, ended with SIGKILL.

// Alive reports whether the neuron's Firecracker runs.
func (r *runtime) Alive(lay layout.Layout, st *sandbox.State) (bool, error) {
	if st.PID > 0 {
		return store.Alive(st.PID, st.PIDStart), nil
	}
	for _, run := range r.scan(lay) {
		if run.ID == st.ID {
			return true, nil
		}
	}
	return false, nil
}

// Running lists this home's Firecracker processes, found by the jail id
// the jailer passes them (--id) and the marker beside their jail.
func (r *runtime) Running(lay layout.Layout) ([]lifecycle.Running, error) {
	return r.scan(lay), nil
}

func (r *runtime) scan(lay layout.Layout) []lifecycle.Running {
	prefix := lay.Tag() + "-"
	found := store.FindProcesses(func(argv []string) (string, bool) {
		for i := 1; i+1 < len(argv); i++ {
			if argv[i] == "--id" && strings.HasPrefix(argv[i+1], prefix) {
				var mk marker
				ok := store.ReadJSON(filepath.Join(jailDir(r.cfg.ChrootBase, argv[0], argv[i+1]), markerFile), &mk) == nil && mk.Home == lay.Home
				return mk.Neuron, ok
			}
		}
		return "", false
	})
	out := make([]lifecycle.Running, 0, len(found))
	for _, f := range found {
		out = append(out, lifecycle.Running{ID: f.Of, PID: f.PID})
	}
	return out
}

// Stop ends neuron id's VM: its guest is asked to power off (end its
// processes, write its disks, reset, which ends Firecracker), so nothing
// the guest held in memory is lost; whatever has not exited a few seconds
// later is killed. SIGKILL, because Firecracker, as the init of its PID
// namespace, takes no other signal it does not handle. A VM being replaced
// by a restore is killed at once: its disk is about to be replaced.
func (r *runtime) Stop(lay layout.Layout, id string, st *sandbox.State) {
	var pids []int
	if st != nil && st.PID > 0 && store.Alive(st.PID, st.PIDStart) {
		pids = append(pids, st.PID)
	}
	for _, run := range r.scan(lay) {
		if run.ID == id && (st == nil || run.PID != st.PID) {
			pids = append(pids, run.PID)
		}
	}
	if len(pids) == 0 {
		return
	}
	if r.restores.Get(id) == nil && r.powerOff(lay, id) {
		for _, pid := range pids {
			waitExit(pid, 5*time.Second)
		}
	}
	for _, pid := range pids {
		killWait(pid, 5*time.Second)
	}
}

// waitExit waits up to timeout for pid to exit by itself.
func waitExit(pid int, timeout time.Duration) {
	start, _ := store.ProcStart(pid)
	for deadline := time.Now().Add(timeout); store.Alive(pid, start) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// killWait SIGKILLs pid and waits until it is gone (through a pidfd, so
// without polling where the kernel has them).
func killWait(pid int, timeout time.Duration) {
	start, _ := store.ProcStart(pid)
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		for deadline := time.Now().Add(timeout); store.Alive(pid, start) && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
		return
	}
	defer unix.Close(fd)
	unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	// The pidfd is readable once the process has exited; a zombie that
	// its parent (maybe this process) has not reaped yet counts as gone.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		n, err := unix.Poll(fds, 100)
		if n > 0 || (err != nil && err != unix.EINTR) || !store.Alive(pid, start) {
			return
		}
	}
}
