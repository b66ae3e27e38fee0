//go:build unix

package session

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f for the length of one append, so
// a writer reads other writers' lines and cuts a torn tail without racing
// them. It is held for microseconds (a stat, rarely a read, one write).
func lockFile(f *os.File) (unlock func(), err error) {
	fd := int(f.Fd())
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	// Unlocking cannot usefully fail: closing the file drops the lock too.
	return func() { _ = syscall.Flock(fd, syscall.LOCK_UN) }, nil
}
