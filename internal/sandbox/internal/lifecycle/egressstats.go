package lifecycle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// egressStatsName is where a neuron's egress proxy reports what it let
// through (boot.EgressStats): a host record in its overlay directory,
// never in a snapshot, begun anew at every start.
const egressStatsName = ".egress-stats"

// EgressStatsFile makes neuron id's egress report empty and returns it
// open, for the mode to hand to the process that runs the proxy.
func EgressStatsFile(lay layout.Layout, id string) (*os.File, error) {
	fd, err := unix.Open(filepath.Join(lay.OverlayDir(id), egressStatsName),
		unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: egressStatsName, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(lay.OverlayDir(id), egressStatsName)), nil
}

// egressStats reads what neuron st's proxy reported, when its network is
// egress: -1, -1 when there is no report. The proxy's process writes it,
// so it is read as untrusted: bounded, and negative figures refused.
func egressStats(lay layout.Layout, st *sandbox.State) (bytes, conns int64) {
	if st.Policy == nil || st.Policy.Network.Mode != sandbox.NetworkEgress {
		return -1, -1
	}
	b, err := store.ReadRecord(filepath.Join(lay.OverlayDir(st.ID), egressStatsName), 4096)
	if err != nil {
		return -1, -1
	}
	var s boot.EgressStats
	if err := json.NewDecoder(strings.NewReader(string(b))).Decode(&s); err != nil || s.Bytes < 0 || s.Connections < 0 {
		return -1, -1
	}
	return s.Bytes, s.Connections
}
