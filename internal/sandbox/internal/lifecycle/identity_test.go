package lifecycle

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// No two neurons share a uid, in one home or across homes, whatever their
// ids hash to; a wiped neuron's uid is free again, and a claim whose
// neuron is gone (its home removed without a wipe) is taken over.
func TestUIDsAreNeverShared(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("neuron uids are allocated only when the host process is root")
	}
	UIDRegistry = t.TempDir()
	seen := map[int]string{}
	var lays []layout.Layout
	for h := 0; h < 3; h++ {
		lay, err := layout.New(filepath.Join(t.TempDir(), "h"), "")
		if err != nil {
			t.Fatal(err)
		}
		lays = append(lays, lay)
		for _, id := range []string{"a", "b", "same", "x1", "x2"} {
			os.MkdirAll(lay.OverlayDir(id), 0o700)
			uid, _, err := AgentIdentity(lay, id)
			if err != nil {
				t.Fatal(err)
			}
			if other, ok := seen[uid]; ok {
				t.Fatalf("uid %d given to %s and %s", uid, other, lay.OverlayDir(id))
			}
			seen[uid] = lay.OverlayDir(id)
			if again, _, _ := AgentIdentity(lay, id); again != uid {
				t.Fatalf("%s's uid changed: %d, then %d", id, uid, again)
			}
		}
	}
	// A collision: a neuron whose first candidate is taken gets another.
	lay := lays[0]
	os.MkdirAll(lay.OverlayDir("c"), 0o700)
	h := fnv.New32a()
	h.Write([]byte(claimOwner(lay, "c")))
	first := uidBase + int(h.Sum32()%uidRange)
	if ok, err := claim(first, claimOwner(lay, "a")); err != nil || !ok {
		t.Fatalf("pre-claiming %d: %v %v", first, ok, err)
	}
	if got, _, err := AgentIdentity(lay, "c"); err != nil || got == first {
		t.Fatalf("the taken uid %d was given again (%d, %v)", first, got, err)
	}
	uid := recordedUID(lay, "a")
	ReleaseIdentity(lay, "a", uid)
	if _, err := os.Stat(claimFile(uid)); !os.IsNotExist(err) {
		t.Fatalf("a released uid is still claimed: %v", err)
	}
	// A home removed without a wipe leaves stale claims, taken over.
	os.RemoveAll(lays[2].Home)
	if ok, err := claim(recordedUIDFrom(t, seen, lays[2]), "/some/where/else\n"); err != nil || !ok {
		t.Fatalf("a stale claim was not taken over: %v %v", ok, err)
	}
}

func recordedUIDFrom(t *testing.T, seen map[int]string, lay layout.Layout) int {
	t.Helper()
	for uid, dir := range seen {
		if filepath.Dir(dir) == lay.Overlays {
			return uid
		}
	}
	t.Fatal("no uid of that home")
	return 0
}
