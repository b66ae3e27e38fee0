package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// An import is granted a step past what it needs, within the room left
// (the others' reservations taken off); onto a disk of its own its data
// is here twice (staged, then copied into the disk's image on this
// filesystem), so it reserves the copy too.
func TestImportGrants(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		copies, left, written, need, upTo, reserve int64
	}{
		{1, 10 << 30, 0, mib, mib + importStep, mib + importStep}, // a step ahead
		{1, 10 << 30, 500 * mib, 501 * mib, 501*mib + importStep, mib + importStep},
		{1, 10 * mib, 0, mib, 10 * mib, 10 * mib}, // what is left
		{1, 0, 0, mib, 0, 0},  // none: refused
		{1, -5, 0, mib, 0, 0}, // below the reserve
		{2, 10 << 30, 0, mib, mib + importStep, 2 * (mib + importStep)}, // staged and copied
		{2, 100 * mib, 40 * mib, 41 * mib, 70 * mib, 100 * mib},         // reserve(upTo) == left
	} {
		r := &importRoom{copies: tc.copies}
		upTo := r.upTo(tc.left, tc.written, tc.need)
		if upTo != tc.upTo {
			t.Errorf("%+v: upTo %d, want %d", tc, upTo, tc.upTo)
		}
		if upTo >= tc.need {
			if got := r.reserve(tc.written, upTo); got != tc.reserve || got > max(tc.left, 0) {
				t.Errorf("%+v: reserve %d, want %d (at most left)", tc, got, tc.reserve)
			}
		}
	}
}

// The stats an egress proxy reports are read as a record the neuron's
// side writes: a link, a FIFO, an oversized or negative report counts as
// none (-1), and a FIFO does not hold the reader.
func TestEgressStatsAreARecord(t *testing.T) {
	lay := layout.Layout{Overlays: t.TempDir()}
	st := &sandbox.State{ID: "n1", Policy: &sandbox.Policy{Network: sandbox.Network{Mode: sandbox.NetworkEgress}}}
	p := filepath.Join(lay.OverlayDir("n1"), egressStatsName)
	os.MkdirAll(lay.OverlayDir("n1"), 0o700)
	os.WriteFile(p, []byte(`{"bytes":42,"connections":3}`+"\n"), 0o600)
	if b, c := egressStats(lay, st); b != 42 || c != 3 {
		t.Fatalf("a report: %d %d", b, c)
	}
	for name, plant := range map[string]func() error{
		"link":      func() error { return os.Symlink(filepath.Join(t.TempDir(), "x"), p) },
		"fifo":      func() error { return unix.Mkfifo(p, 0o600) },
		"oversized": func() error { return os.WriteFile(p, []byte(`{"bytes":1}`+strings.Repeat(" ", 5000)), 0o600) },
		"negative":  func() error { return os.WriteFile(p, []byte(`{"bytes":-5,"connections":1}`), 0o600) },
	} {
		os.Remove(p)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if b, c := egressStats(lay, st); b != -1 || c != -1 {
			t.Errorf("%s: %d %d, want none", name, b, c)
		}
	}
}
