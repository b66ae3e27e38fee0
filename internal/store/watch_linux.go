package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Watch returns a channel that is sent to (without blocking: one pending
// signal at most) whenever inotify reports one of mask's events on path,
// and a function that ends the watch and waits for its goroutine. Where no
// watch can be made the channel never fires: callers also poll, rarely.
func Watch(path string, mask uint32) (<-chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return wake, func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, path, mask); err != nil {
		unix.Close(fd)
		return wake, func() {}
	}
	// Non-blocking, so the runtime's poller waits on it and Close ends a
	// Read in progress.
	f := os.NewFile(uintptr(fd), "inotify")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil && !errors.Is(err, unix.EINTR) {
				return // closed by the stop function
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	return wake, func() {
		f.Close()
		<-done
	}
}
