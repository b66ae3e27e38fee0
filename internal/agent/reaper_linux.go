package agent

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper adopts and reaps orphaned descendants. As a subreaper (or as PID 1
// of a namespace) the agent inherits every process whose parent dies, so
// shutdown can find and end all of them. Processes the agent started itself
// are waited for by their own goroutines (os/exec); the reaper must never
// reap those, so starting a child and recording its pid happen under a read
// lock that reaping excludes.
type reaper struct {
	enabled bool
	spawn   sync.RWMutex // held shared while a child starts, exclusive while reaping
	mu      sync.Mutex
	tracked map[int]bool
}

func newReaper(subreaper bool) *reaper {
	return &reaper{enabled: subreaper || os.Getpid() == 1, tracked: map[int]bool{}}
}

// start makes the agent a subreaper and reaps orphans on SIGCHLD until stop.
func (r *reaper) start() (stop func()) {
	if !r.enabled {
		return func() {}
	}
	if os.Getpid() != 1 {
		// Without it orphans go to init and shutdown cannot end them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			r.enabled = false
			return func() {}
		}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-ch:
				r.reapOrphans()
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		<-finished
		r.reapOrphans()
	}
}

// startChild runs start (which forks) and records the child's pid before any
// reaping can look at it.
func (r *reaper) startChild(start func() error, pid func() int) error {
	r.spawn.RLock()
	defer r.spawn.RUnlock()
	if err := start(); err != nil {
		return err
	}
	r.mu.Lock()
	r.tracked[pid()] = true
	r.mu.Unlock()
	return nil
}

// forget drops a child whose waiter has collected it.
func (r *reaper) forget(pid int) {
	r.mu.Lock()
	delete(r.tracked, pid)
	r.mu.Unlock()
}

// reapOrphans collects adopted children that have exited.
func (r *reaper) reapOrphans() {
	if !r.enabled {
		return
	}
	r.spawn.Lock()
	defer r.spawn.Unlock()
	for _, pid := range children() {
		r.mu.Lock()
		mine := r.tracked[pid]
		r.mu.Unlock()
		if mine {
			continue
		}
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil) // an orphan still running just returns 0
	}
}

// children lists the agent's direct children (its own and adopted ones).
func children() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// targets returns the processes shutdown must end: every child when the
// agent adopts orphans, otherwise the children it started itself (an agent
// embedded in a larger process must not touch that process's other children).
func (r *reaper) targets() []int {
	if r.enabled {
		return children()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 0, len(r.tracked))
	for pid := range r.tracked {
		out = append(out, pid)
	}
	return out
}

// endAll signals every child and its process group with SIGTERM, waits up to
// grace for them to go, then kills what is left.
func (r *reaper) endAll(grace time.Duration) {
	signalAll := func(sig syscall.Signal) int {
		kids := r.targets()
		for _, pid := range kids {
			syscall.Kill(-pid, sig) // its group, if it leads one
			syscall.Kill(pid, sig)
		}
		return len(kids)
	}
	if signalAll(syscall.SIGTERM) == 0 {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		r.reapOrphans()
		if len(r.targets()) == 0 {
			return
		}
	}
	for i := 0; i < 100 && signalAll(syscall.SIGKILL) > 0; i++ {
		time.Sleep(10 * time.Millisecond)
		r.reapOrphans()
	}
}
