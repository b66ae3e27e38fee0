package nsboxinit

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// oomWatch is the neuron's memory cgroup's OOM counter, watched without
// polling: cgroup v1 signals an eventfd on each OOM (cgroup.event_control),
// v2 wakes a poll on memory.events. Each kill the
// counter shows is said in the neuron's log; the neuron goes on.
type oomWatch struct {
	w   *boot.OOMWatch
	dir int // the controller's directory, opened before the root was built
}

// openOOMWatch opens w's directory while this process still sees the
// host's /sys (nil when there is nothing to watch, or it cannot be).
func openOOMWatch(w *boot.OOMWatch, logf func(string, ...any)) *oomWatch {
	if w == nil {
		return nil
	}
	dir, err := unix.Open(w.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		logf("memory ceiling: not watched (%s: %v)", w.Dir, err)
		return nil
	}
	return &oomWatch{w: w, dir: dir}
}

// run watches until the sandbox ends; call it once the host's go-ahead
// says the cgroup is made.
func (o *oomWatch) run(logf func(string, ...any)) {
	fd, err := unix.Openat(o.dir, o.w.Rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		logf("memory ceiling: not watched (%s: %v)", o.w.Rel, err)
		return
	}
	wait, err := o.waiter(fd)
	if err != nil {
		logf("memory ceiling: not watched (%v)", err)
		unix.Close(fd)
		return
	}
	buf := make([]byte, 4096)
	last := o.count(fd, buf)
	for wait() == nil {
		// The kernel wakes this at the OOM, before its victim's memory
		// is uncharged. A page this process touched now would be charged
		// to a full cgroup and make the kernel choose again, and after
		// the agent's commands its next choice is the agent (seen under
		// load). So the count is read, and said, once the kill is done.
		time.Sleep(oomSettle)
		n := o.count(fd, buf)
		if n > last {
			logf("memory: the kernel killed %d process(es) of this neuron at its memory ceiling (%d MiB); the neuron goes on (%s %d)",
				n-last, o.w.Limit>>20, o.w.Key, n)
			last = n
		}
	}
}

// waiter returns a function that blocks until the counter may have
// changed.
func (o *oomWatch) waiter(fd int) (func() error, error) {
	buf := make([]byte, 4096)
	if strings.HasSuffix(o.w.Rel, "memory.oom_control") { // v1
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			return nil, err
		}
		ctl, err := unix.Openat(o.dir, strings.TrimSuffix(o.w.Rel, "memory.oom_control")+"cgroup.event_control", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		_, err = unix.Write(ctl, []byte(fmt.Sprintf("%d %d", efd, fd)))
		unix.Close(ctl)
		if err != nil {
			return nil, fmt.Errorf("cgroup.event_control: %w", err)
		}
		return func() error { _, err := unix.Read(efd, buf[:8]); return err }, nil
	}
	// v2: memory.events wakes a poll for POLLPRI when it changes (kernfs
	// notifies; reading it again re-arms). No inotify instance: a host
	// with a thousand neurons would run out of them.
	return func() error {
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}, -1)
			if err != unix.EINTR {
				return err
			}
		}
	}, nil
}

// oomSettle is how long after an OOM the count is read: long enough for
// the victim's exit, short enough for the log to follow the kill.
const oomSettle = 250 * time.Millisecond

// count reads the counter into buf (0 when it cannot).
func (o *oomWatch) count(fd int, buf []byte) int64 {
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if k, v, ok := strings.Cut(string(line), " "); ok && k == o.w.Key {
			c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return c
		}
	}
	return 0
}
