package agent

import (
	"os"
	"os/signal"
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
	oom     *oomBias
	// spawner, when set, is where children start (Config.SpawnCgroup).
	spawner *spawner
}

func newReaper(subreaper bool, oom *oomBias) *reaper {
	return &reaper{enabled: subreaper || os.Getpid() == 1, tracked: map[int]bool{}, oom: oom}
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

// oomFirst is the OOM score adjustment of every process the agent starts:
// the most a process may be preferred. Inside a memory ceiling the kernel
// then kills one of them, not the agent, which would otherwise be the
// largest process left when the kernel chooses again before its first
// victim's memory is uncharged (seen under load). A process may lower its
// own value back to the agent's, and no further.
var oomFirst = []byte("1000")

// oomBias gives the processes the agent starts oomFirst from their first
// instruction: a child copies its parent's value when it forks, so the
// agent holds oomFirst itself while any start is under way, and its own
// value again when none is. (Written after the start instead, a shell's
// children forked before the write would keep the agent's value.)
type oomBias struct {
	mu     sync.Mutex
	file   *os.File // /proc/self/oom_score_adj, or nil
	own    []byte   // the agent's value
	starts int
}

// OpenOOMScoreAdj opens this process's OOM score adjustment for oomBias;
// call it while the process is still dumpable.
func OpenOOMScoreAdj() (*os.File, error) {
	return os.OpenFile("/proc/self/oom_score_adj", os.O_RDWR|syscall.O_CLOEXEC, 0)
}

// newOOMBias biases what the agent starts through f (opened here when nil).
func newOOMBias(f *os.File, logf func(string, ...any)) *oomBias {
	b := &oomBias{}
	if f == nil {
		var err error
		if f, err = OpenOOMScoreAdj(); err != nil {
			logf("memory ceiling: the agent's commands are not its first victims (%v)", err)
			return b
		}
	}
	buf := make([]byte, 16)
	n, _ := f.ReadAt(buf, 0)
	if n == 0 {
		f.Close()
		return b
	}
	b.file, b.own = f, []byte(strings.TrimSpace(string(buf[:n])))
	return b
}

func (b *oomBias) begin() {
	if b.file == nil {
		return
	}
	b.mu.Lock()
	if b.starts == 0 {
		b.file.WriteAt(oomFirst, 0)
	}
	b.starts++
	b.mu.Unlock()
}

func (b *oomBias) end() {
	if b.file == nil {
		return
	}
	b.mu.Lock()
	if b.starts--; b.starts == 0 {
		b.file.WriteAt(b.own, 0)
	}
	b.mu.Unlock()
}

// startChild runs start (which forks) and records the child's pid before any
// reaping can look at it.
func (r *reaper) startChild(start func() error, pid func() int) error {
	r.spawn.RLock()
	defer r.spawn.RUnlock()
	biased := func() error {
		r.oom.begin()
		defer r.oom.end()
		return start()
	}
	var err error
	if r.spawner != nil {
		err = r.spawner.run(biased)
	} else {
		err = biased()
	}
	if err != nil {
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

// children lists the agent's direct children (its own and adopted ones):
// each of its threads' /proc/self/task/<tid>/children (a child is listed
// under the thread that forked it; an orphan under the one it was given
// to). It runs at every SIGCHLD, so after every command: the threads are
// listed once and each one's file read by its name (a glob of
// /proc/self/task/*/children read every thread's directory of some fifty
// entries too).
func children() []int {
	tasks, err := os.Open("/proc/self/task")
	if err != nil {
		return nil
	}
	tids, _ := tasks.Readdirnames(-1)
	tasks.Close()
	var out []int
	buf := make([]byte, 0, 4096)
	for _, tid := range tids {
		if _, err := strconv.Atoi(tid); err != nil {
			continue
		}
		b := readProc("/proc/self/task/"+tid+"/children", buf)
		if b == nil {
			continue // the thread ended
		}
		buf = b
		for _, s := range strings.Fields(string(buf)) {
			if pid, err := strconv.Atoi(s); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// readProc reads the /proc file at path whole, into buf's space first
// (nil on an error), by plain system calls: os.ReadFile would try to put
// each file on the poller first, five calls more.
func readProc(path string, buf []byte) []byte {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil
		}
		if m <= 0 {
			return buf
		}
		buf = buf[:len(buf)+m]
	}
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
