package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// SocketSuffix marks a host's listening socket in a channel directory.
// Hosts create it under a dot-name and rename it into place once listening,
// so the agent never dials a socket that is not ready.
const SocketSuffix = ".sock"

// watchLoop serves every host socket that appears in dir until ctx ends or
// dir itself is removed (the neuron was destroyed). It waits on inotify, so
// an idle agent uses no CPU; where no inotify instance is to be had it
// waits on the directory's doorbell (protocol.Doorbell), and without one
// rescans the directory once a second.
func (a *Agent) watchLoop(ctx context.Context, dir string) error {
	w, err := newDirWatch(dir)
	var bell *os.File
	if err != nil {
		if bell = openDoorbell(dir); bell != nil {
			defer bell.Close()
			a.logf("inotify on %s unavailable (%v); waiting on its doorbell", dir, err)
		} else {
			a.logf("inotify on %s unavailable (%v); polling every second", dir, err)
		}
	}
	var (
		mu        sync.Mutex
		connected = map[string]bool{}
		sessions  sync.WaitGroup
	)
	defer sessions.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w != nil {
		stop := context.AfterFunc(ctx, w.close)
		defer stop()
		defer w.close()
	}
	scan := func() bool {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return !errors.Is(err, os.ErrNotExist)
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, SocketSuffix) || strings.HasPrefix(name, ".") || e.Type()&os.ModeSocket == 0 {
				continue
			}
			path := filepath.Join(dir, name)
			mu.Lock()
			busy := connected[path]
			connected[path] = true
			mu.Unlock()
			if busy {
				continue
			}
			sessions.Add(1)
			go func() {
				defer sessions.Done()
				defer func() { mu.Lock(); delete(connected, path); mu.Unlock() }()
				a.serveHost(ctx, path)
			}()
		}
		return true
	}
	for ctx.Err() == nil {
		if !scan() {
			a.logf("channel directory %s is gone; shutting down", dir)
			return nil
		}
		if w == nil && bell != nil {
			waitDoorbell(ctx, bell, bellRescan)
			continue
		}
		if w == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		gone, err := w.wait()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if gone {
			a.logf("channel directory %s was removed; shutting down", dir)
			return nil
		}
	}
	return nil
}

// serveHost dials one host socket and serves it for as long as the host
// listens there. A session that ends while the socket is still in place (the
// host closed just that connection) is dialled again after a pause that
// grows while sessions keep ending quickly. A socket nobody listens on any
// more is a leftover of a host that died without cleaning up; it is removed.
func (a *Agent) serveHost(ctx context.Context, path string) {
	const minPause, maxPause = 10 * time.Millisecond, 10 * time.Second
	pause := minPause
	for ctx.Err() == nil {
		conn, err := protocol.DialUnix(ctx, path)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				os.Remove(path)
			}
			return
		}
		started := time.Now()
		if err := a.serve(ctx, conn); err != nil {
			a.logf("session with %s: %v", filepath.Base(path), err)
		}
		if time.Since(started) > maxPause {
			pause = minPause
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// dirWatch reports entries created in or moved into a directory, and the
// directory's own removal.
type dirWatch struct {
	f    *os.File
	buf  []byte
	once sync.Once
}

// inotifyInit makes an inotify instance (tests make it fail).
var inotifyInit = func() (int, error) { return unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK) }

// bellRescan is how often an agent waiting on the doorbell scans the
// directory unrung: to see it removed while its host was not there to
// stop the agent, and a host of a version that did not ring. Rare: each
// scan wakes an idle agent, ~2 ms of CPU on a slow VM. 1000 agents
// scanning every 5 s used a third of a CPU-second in 5 s; every minute,
// with 872 of the 1000 on the doorbell, ~80 ms in 5 s (against none on
// inotify).
var bellRescan = 10 * time.Minute

// openDoorbell opens the channel directory's doorbell to wait on, or
// returns nil when there is none (a FIFO, nothing else).
func openDoorbell(dir string) *os.File {
	// Read and write: no EOF while no host has it open.
	f, err := os.OpenFile(filepath.Join(dir, protocol.Doorbell), os.O_RDWR|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		f.Close()
		return nil
	}
	return f
}

// waitDoorbell returns once the doorbell rang (taking the rings), d
// passed, or ctx ended.
func waitDoorbell(ctx context.Context, bell *os.File, d time.Duration) {
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	if err := bell.SetReadDeadline(time.Now().Add(d)); err != nil {
		pause(time.Second) // not pollable after all: a read would not wait
		return
	}
	stop := context.AfterFunc(ctx, func() { bell.SetReadDeadline(time.Now()) })
	defer stop()
	var buf [512]byte
	if _, err := bell.Read(buf[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		pause(time.Second) // never spin on a read that fails at once
	}
}

func newDirWatch(dir string) (*dirWatch, error) {
	fd, err := inotifyInit()
	if err != nil {
		return nil, err
	}
	mask := uint32(unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF)
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Non-blocking, so the runtime poller owns it and close interrupts a read.
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir), buf: make([]byte, 64<<10)}, nil
}

// wait blocks until something happens; gone reports the directory's
// removal. A move of the directory is not its removal: a warm neuron's
// host renames its channel directory to the id it is claimed as, and the
// agent, which reaches it through its own mount, goes on (the rescan that
// follows every wake-up sees whether the directory is still there).
func (w *dirWatch) wait() (gone bool, err error) {
	n, err := w.f.Read(w.buf)
	if err != nil {
		return false, err
	}
	// struct inotify_event { int32 wd; uint32 mask, cookie, len; char name[len]; }
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		mask := binary.NativeEndian.Uint32(w.buf[off+4:])
		nameLen := binary.NativeEndian.Uint32(w.buf[off+12:])
		if mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0 {
			gone = true
		}
		off += unix.SizeofInotifyEvent + int(nameLen)
	}
	return gone, nil
}

func (w *dirWatch) close() { w.once.Do(func() { w.f.Close() }) }
