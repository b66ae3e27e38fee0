package lifecycle

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/store"
)

// What imports and forks in flight reserved is read from their .forking
// records as untrusted records: only live processes' count, a link or an
// oversized record counts as none, and the sum saturates.
func TestReserved(t *testing.T) {
	m := &Manager{lay: layout.Layout{Overlays: t.TempDir()}}
	start, _ := store.ProcStart(os.Getpid())
	plant := func(id string, pid int, pidStart uint64, reserve int64) {
		os.MkdirAll(m.overlay(id), 0o700)
		b, _ := json.Marshal(forkRecord{Src: "an import of x", PID: pid, PIDStart: pidStart, Reserve: reserve})
		if err := os.WriteFile(m.forkingFile(id), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plant("live", os.Getpid(), start, 5<<20)
	plant("gone", os.Getpid(), start+1, 7<<20)
	plant("negative", os.Getpid(), start, -3<<20)
	if got := m.reserved(""); got != 5<<20 {
		t.Fatalf("reserved: %d, want %d (the live record's only)", got, 5<<20)
	}
	if got := m.reserved("live"); got != 0 {
		t.Fatalf("reserved but live's own: %d, want 0", got)
	}
	// A link to a live record, and a record past the bound, are none.
	elsewhere := filepath.Join(t.TempDir(), "rec")
	b, _ := json.Marshal(forkRecord{PID: os.Getpid(), PIDStart: start, Reserve: 1 << 40})
	os.WriteFile(elsewhere, b, 0o600)
	os.MkdirAll(m.overlay("linked"), 0o700)
	os.Symlink(elsewhere, m.forkingFile("linked"))
	os.MkdirAll(m.overlay("big"), 0o700)
	os.WriteFile(m.forkingFile("big"), append(b, strings.Repeat(" ", 5000)...), 0o600)
	if got := m.reserved(""); got != 5<<20 {
		t.Fatalf("reserved with a linked and an oversized record: %d, want %d", got, 5<<20)
	}
	plant("huge1", os.Getpid(), start, math.MaxInt64-1)
	plant("huge2", os.Getpid(), start, math.MaxInt64-1)
	if got := m.reserved(""); got != math.MaxInt64 {
		t.Fatalf("reserved, two near the largest: %d, want it saturated", got)
	}
}

func TestRoomLeft(t *testing.T) {
	for _, tc := range []struct{ free, reserved, want int64 }{
		{100, 0, 100},
		{100, 30, 70},
		{100, 100, 0},
		{100, math.MaxInt64, 0},
		{-5, 0, -5}, // below the reserve already
		{-5, math.MaxInt64, -5},
		{0, 10, 0},
	} {
		if got := (Room{Free: tc.free, Reserved: tc.reserved}).Left(); got != tc.want {
			t.Errorf("Room{%d, %d}.Left() = %d, want %d", tc.free, tc.reserved, got, tc.want)
		}
	}
}
