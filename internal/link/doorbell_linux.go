package link

import (
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// makeDoorbell makes the channel directory's doorbell (protocol.Doorbell)
// unless it is there, the agent's to open (owner). The directory is the
// host's (the neuron sees it read-only, if at all); it is still worked in
// by descriptor. Without a doorbell an agent with no inotify instance
// scans the directory each second, so a failure is not an error.
func makeDoorbell(dir string, owner *Owner) {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(d)
	if unix.Mkfifoat(d, protocol.Doorbell, 0o600) != nil {
		return // there already, or cannot be
	}
	unix.Fchmodat(d, protocol.Doorbell, 0o600, 0) // whatever the umask
	if owner != nil {
		unix.Fchownat(d, protocol.Doorbell, owner.UID, owner.GID, unix.AT_SYMLINK_NOFOLLOW)
	}
}

// rings holds the channel directories whose doorbell is being rung, and
// whether it must be rung once more (a socket placed meanwhile).
var rings struct {
	sync.Mutex
	again map[string]bool
}

// ringAsync rings dir's doorbell from a goroutine, so that Listen never
// waits on a FIFO the neuron reads (a pipe's lock is held while a reader
// copies, and O_NONBLOCK does not skip it). One ring per directory is in
// flight; a socket placed meanwhile gets a ring after it.
func ringAsync(dir string) {
	rings.Lock()
	defer rings.Unlock()
	if rings.again == nil {
		rings.again = map[string]bool{}
	}
	if _, busy := rings.again[dir]; busy {
		rings.again[dir] = true
		return
	}
	rings.again[dir] = false
	go func() {
		for {
			ringDoorbell(dir)
			rings.Lock()
			if !rings.again[dir] {
				delete(rings.again, dir)
				rings.Unlock()
				return
			}
			rings.again[dir] = false
			rings.Unlock()
		}
	}()
}

// ringDoorbell writes a byte to the channel directory's doorbell, never
// waiting for a reader: with none the open fails (ENXIO), and a full pipe
// has rung enough already (EAGAIN). Only a FIFO is written to.
func ringDoorbell(dir string) {
	fd, err := unix.Open(filepath.Join(dir, protocol.Doorbell), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		unix.Write(fd, []byte{1})
	}
}
