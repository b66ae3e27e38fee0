package agent

import (
	"runtime"
	"sync"
)

// SpareThreads makes the Go runtime start n OS threads now, each held by a
// goroutine at once, and then gives them back: the runtime keeps threads it
// no longer uses, idle, and takes them again before it starts new ones.
//
// A neuron's processes share the agent's process ceiling (a cgroup's
// pids.max, or RLIMIT_NPROC), which counts threads. At that ceiling (a fork
// bomb, a build with too many jobs) the kernel refuses a new thread, and a
// Go runtime refused one crashes: it starts threads whenever a goroutine
// blocks in a system call, so an agent that had only the few it needed at
// rest would die with the neuron's every connection the next time it ran
// a command there. Threads started before the ceiling is reached are what
// it uses instead.
func SpareThreads(n int) {
	var held, ended sync.WaitGroup
	release := make(chan struct{})
	held.Add(n)
	ended.Add(n)
	for range n {
		go func() {
			defer ended.Done()
			// Locked, a goroutine keeps its thread while it waits, so
			// the next one needs another.
			runtime.LockOSThread()
			held.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	close(release)
	ended.Wait()
}
