package lifecycle

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// AgentIdentity returns the host uid and gid a neuron's agent and commands
// run as: the host process's own when it is not root; when it is root, an
// unprivileged uid of the neuron's own (2,000,000,000 plus a hash of its
// id), so that nothing in a neuron is root on the host and neurons do not
// share a uid. The uid is kept in overlays/<id>/.uid, so it stays the same
// for the life of the overlay whatever the formula of later versions.
func AgentIdentity(lay layout.Layout, id string) (uid, gid int, err error) {
	if os.Getuid() != 0 {
		return os.Getuid(), os.Getgid(), nil
	}
	f := filepath.Join(lay.OverlayDir(id), ".uid")
	if b, err := os.ReadFile(f); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n, n, nil
		}
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	n := 2_000_000_000 + int(h.Sum32()%1_000_000)
	if err := os.WriteFile(f, []byte(strconv.Itoa(n)+"\n"), 0o600); err != nil {
		return 0, 0, err
	}
	return n, n, nil
}
