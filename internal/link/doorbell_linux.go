package link

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// makeDoorbell makes the channel directory's doorbell (protocol.Doorbell)
// unless it is there, the agent's to open (owner). The directory is the
// host's: nothing of the neuron's can be put in its place. Without one the
// agent scans the directory each second, so a failure is not an error.
func makeDoorbell(dir string, owner *Owner) {
	p := filepath.Join(dir, protocol.Doorbell)
	if err := unix.Mkfifo(p, 0o600); err == nil && owner != nil {
		os.Lchown(p, owner.UID, owner.GID)
	}
}

// ringDoorbell writes a byte to the channel directory's doorbell, never
// waiting: with no agent reading it the open fails (ENXIO), and a full
// pipe has rung enough already. Only a FIFO is written to.
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
