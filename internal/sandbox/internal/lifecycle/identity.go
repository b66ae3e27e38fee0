package lifecycle

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// The unprivileged uids neurons run as when the host process is root: a
// block of uidRange from uidBase, far above any the host's users have.
const (
	uidBase  = 2_000_000_000
	uidRange = 1_000_000
)

// UIDRegistry is where uids are claimed, for every home of this host: a
// file per uid, named for it, holding the home and id of the neuron that
// has it. Claims are made with O_EXCL, so two neurons never share one —
// not in one home, not across homes — and per-uid kernel limits (processes,
// keys) are each neuron's own. (Not inotify instances: those count against
// the owner of the neuron's user namespace too, see docs/benchmarks.md.)
var UIDRegistry = "/var/lib/nsys-cortex/uids"

// AgentIdentity returns the host uid and gid a neuron's agent and commands
// run as: the host process's own when it is not root; when it is root, an
// unprivileged uid of the neuron's own, claimed in UIDRegistry (the first
// free one from a hash of its home and id). The uid is kept in
// overlays/<id>/.uid, so it stays the same for the life of the overlay;
// ReleaseIdentity gives it back when the overlay is wiped.
func AgentIdentity(lay layout.Layout, id string) (uid, gid int, err error) {
	if os.Getuid() != 0 {
		return os.Getuid(), os.Getgid(), nil
	}
	f := filepath.Join(lay.OverlayDir(id), ".uid")
	owner := claimOwner(lay, id)
	if n := recordedUID(lay, id); n > 0 {
		if b, err := os.ReadFile(claimFile(n)); err == nil && string(b) == owner {
			return n, n, nil // claimed already (the usual case)
		}
		// An overlay from before the registry: claim its uid now, so no
		// new neuron takes it. (Two such overlays that collided keep their
		// uid; a new create of either gets a fresh one only after --wipe.)
		unlock, err := lockRegistry()
		if err != nil {
			return 0, 0, err
		}
		defer unlock()
		if _, err := claim(n, owner); err != nil {
			return 0, 0, err
		}
		return n, n, nil
	}
	unlock, err := lockRegistry()
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	h := fnv.New32a()
	h.Write([]byte(owner))
	start := int(h.Sum32() % uidRange)
	for i := 0; i < uidRange; i++ {
		n := uidBase + (start+i)%uidRange
		ok, err := claim(n, owner)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.Itoa(n)+"\n"), 0o600); err != nil {
			os.Remove(claimFile(n))
			return 0, 0, err
		}
		return n, n, nil
	}
	return 0, 0, fmt.Errorf("no free uid left in %d..%d (%s)", uidBase, uidBase+uidRange-1, UIDRegistry)
}

// ReleaseIdentity gives neuron id's uid back (its overlay is gone).
func ReleaseIdentity(lay layout.Layout, id string, uid int) {
	if os.Getuid() != 0 || uid < uidBase || uid >= uidBase+uidRange {
		return
	}
	if b, err := os.ReadFile(claimFile(uid)); err == nil && string(b) == claimOwner(lay, id) {
		os.Remove(claimFile(uid))
	}
}

func claimFile(uid int) string { return filepath.Join(UIDRegistry, strconv.Itoa(uid)) }

// claimOwner names a neuron in the registry: its overlay directory, which
// is its home and id.
func claimOwner(lay layout.Layout, id string) string {
	abs, err := filepath.Abs(lay.OverlayDir(id))
	if err != nil {
		abs = lay.OverlayDir(id)
	}
	return abs + "\n"
}

// lockRegistry takes the registry's lock (every process of this host
// that claims a uid holds it meanwhile: a stale claim is taken over by one
// of them only).
func lockRegistry() (func(), error) {
	if err := os.MkdirAll(UIDRegistry, 0o700); err != nil {
		return nil, fmt.Errorf("the uid registry %s: %w", UIDRegistry, err)
	}
	f, err := os.OpenFile(filepath.Join(UIDRegistry, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the uid registry's lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("the uid registry's lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// claim takes uid for owner, under the registry's lock; it reports false
// when another neuron has it. A claim whose neuron's overlay no longer
// exists (a home removed without a wipe) is stale and taken over.
func claim(uid int, owner string) (bool, error) {
	for range 3 {
		f, err := os.OpenFile(claimFile(uid), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(owner)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err == nil, err
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("claiming uid %d: %w", uid, err)
		}
		b, err := os.ReadFile(claimFile(uid))
		if err != nil {
			continue // removed meanwhile: try again
		}
		held := string(b)
		if held == owner {
			return true, nil
		}
		if dir := strings.TrimSuffix(held, "\n"); dir != "" {
			if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
				os.Remove(claimFile(uid)) // stale: its neuron is gone
				continue
			}
		}
		return false, nil
	}
	return false, nil
}

// recordedUID is the uid in neuron id's .uid record (0 when none).
func recordedUID(lay layout.Layout, id string) int {
	b, err := os.ReadFile(filepath.Join(lay.OverlayDir(id), ".uid"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
