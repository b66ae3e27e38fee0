package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is an advisory flock(2) on a file. The kernel drops it when the
// holding process dies, so a crashed owner never leaves a stale lock behind.
// Shared holders use a neuron; an exclusive holder owns it (creates it,
// destroys it, or is a daemon that keeps it).
type Lock struct {
	path string
	f    *os.File
	held int // 0, unix.LOCK_SH or unix.LOCK_EX
}

// NewLock returns an unheld lock on path (the file is created on first use).
func NewLock(path string) *Lock { return &Lock{path: path} }

// TryExclusive takes the lock exclusively without waiting.
func (l *Lock) TryExclusive() (bool, error) { return l.try(unix.LOCK_EX) }

// TryShared takes the lock shared without waiting (a held exclusive lock is
// downgraded).
func (l *Lock) TryShared() (bool, error) { return l.try(unix.LOCK_SH) }

// Held reports how the lock is held: 0, unix.LOCK_SH or unix.LOCK_EX.
func (l *Lock) Held() int { return l.held }

func (l *Lock) try(how int) (bool, error) {
	for attempt := 0; attempt < 5; attempt++ {
		if l.f == nil {
			// No link followed, and only a regular file taken: a lock file
			// sits beside a neuron's records, and a link planted there must
			// not have this process create or open a file elsewhere.
			f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
			if err != nil {
				return false, fmt.Errorf("lock %s: %w", l.path, err)
			}
			if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
				f.Close()
				return false, fmt.Errorf("lock %s: not a regular file", l.path)
			}
			l.f = f
		}
		err := unix.Flock(int(l.f.Fd()), how|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) && l.held != 0 && l.held != how {
			// A failed conversion has already dropped the lock we held
			// (flock(2) converts by removing first): take it back.
			if unix.Flock(int(l.f.Fd()), l.held|unix.LOCK_NB) != nil {
				l.held = 0
			}
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			if l.held == 0 {
				// Holding nothing, keep no descriptor: the next try opens the
				// file afresh, in case it was replaced meanwhile.
				l.f.Close()
				l.f = nil
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("lock %s: %w", l.path, err)
		}
		// The file may have been removed or replaced while we waited for it
		// (a wipe): a lock on a dead inode protects nothing.
		if l.current() {
			l.held = how
			return true, nil
		}
		l.Release()
	}
	return false, fmt.Errorf("lock %s keeps being replaced", l.path)
}

func (l *Lock) current() bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &a) != nil || unix.Stat(l.path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Moved records that the lock's file is now at path: its directory was
// renamed, the lock (on the file, not its name) held on.
func (l *Lock) Moved(path string) { l.path = path }

// Release drops the lock (and closes the file).
func (l *Lock) Release() {
	if l.f != nil {
		l.f.Close() // closing the descriptor releases the flock
		l.f = nil
	}
	l.held = 0
}

// Wait takes the lock exclusively, waiting while another holds it (from
// a millisecond between tries, doubling up to most) until ctx ends, and
// returns its release.
func (l *Lock) Wait(ctx context.Context, most time.Duration) (release func(), err error) {
	for wait := time.Millisecond; ; wait = min(2*wait, most) {
		ok, err := l.TryExclusive()
		if err != nil {
			return nil, err
		}
		if ok {
			return l.Release, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}
