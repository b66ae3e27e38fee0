package agent

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// spawner starts every child of the agent from one OS thread, one that
// the agent has moved into the cgroup of the neuron's process ceiling
// (Config.SpawnCgroup): a child starts in the cgroup of the thread that
// forked it, so commands, and all they start, count against the ceiling,
// while the agent's other threads stay outside it, where the kernel never
// refuses the runtime a thread (a Go program refused one crashes).
//
// The thread is the spawner's goroutine's alone (locked to it); threads
// the runtime starts while it runs come from the runtime's template
// thread, outside the ceiling, not from this one.
type spawner struct {
	reqs chan func()
	done chan struct{}
	once sync.Once
}

// newSpawner moves its thread into the cgroup whose cgroup.threads is
// threads (opened for writing by the agent's PID 1, whose credentials the
// kernel checks). The caller closes threads once it returns.
func newSpawner(threads *os.File) (*spawner, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(threads.Fd()), &fs); err != nil || (fs.Type != unix.CGROUP2_SUPER_MAGIC && fs.Type != unix.CGROUP_SUPER_MAGIC) {
		return nil, fmt.Errorf("the descriptor of the commands' cgroup is not a cgroup file (filesystem %#x, %v)", fs.Type, err)
	}
	s := &spawner{reqs: make(chan func()), done: make(chan struct{})}
	moved := make(chan error, 1)
	go s.serve(threads, moved)
	if err := <-moved; err != nil {
		return nil, fmt.Errorf("moving the thread that starts commands into the cgroup of the process ceiling: %w", err)
	}
	return s, nil
}

// serve locks its goroutine to its thread, moves the thread, tells moved,
// and runs starts there until stop. It never unlocks: when it returns its
// thread ends with it (the children that thread started get their
// Pdeathsig), and no other goroutine ever runs on it.
//
// The main thread is the exception: the runtime never ends it, and it is
// the one /proc/PID/cgroup reports. A serve that finds itself there holds
// it while another serve starts, which cannot land on it, then lets it go.
func (s *spawner) serve(threads *os.File, moved chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan error, 1)
		go s.serve(threads, inner)
		err := <-inner
		runtime.UnlockOSThread()
		moved <- err
		return
	}
	_, err := threads.Write([]byte(strconv.Itoa(unix.Gettid())))
	moved <- err
	if err != nil {
		return
	}
	for {
		select {
		case f := <-s.reqs:
			f()
		case <-s.done:
			return
		}
	}
}

// run calls start on the spawner's thread and returns what it returned.
func (s *spawner) run(start func() error) error {
	errc := make(chan error, 1)
	select {
	case s.reqs <- func() { errc <- start() }:
		return <-errc
	case <-s.done:
		return fmt.Errorf("the agent is stopping")
	}
}

// stop ends the spawner's goroutine, and its thread (a child started with
// Pdeathsig gets its signal then); run fails after it. A nil spawner, or
// one stopped before, is left as it is.
func (s *spawner) stop() {
	if s != nil {
		s.once.Do(func() { close(s.done) })
	}
}
