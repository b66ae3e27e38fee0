//go:build linux

package agent

import (
	"sync"
	"time"
)

// workers runs request handlers on goroutines that outlive one request, so
// a handler starts on a stack that has already grown to what JSON and file
// calls need instead of growing (copying) a fresh one every time. Idle
// workers go away after idleTimeout; close ends them all.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only if a worker is waiting
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

const idleTimeout = 10 * time.Second

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), stop: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one.
func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
		return
	default:
	}
	w.wg.Add(1)
	go w.loop(f)
}

func (w *workers) loop(f func()) {
	defer w.wg.Done()
	t := time.NewTimer(idleTimeout)
	defer t.Stop()
	for {
		f()
		t.Reset(idleTimeout)
		select {
		case f = <-w.jobs:
		case <-t.C:
			return
		case <-w.stop:
			return
		}
	}
}

// close ends the idle workers and waits for the busy ones to finish.
func (w *workers) close() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}
