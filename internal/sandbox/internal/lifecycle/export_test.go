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

// An import onto a disk of its own stages its data on the overlays'
// filesystem and then copies it into the disk's image, on that same
// filesystem: it may take half the free room, and no more than the disk.
func TestImportRoom(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct{ room, disk, want int64 }{
		{10 * gib, 0, 10 * gib},      // no disk: the data is here once
		{10 * gib, 8 * gib, 5 * gib}, // here twice at its peak
		{10 * gib, 2 * gib, 2 * gib}, // never more than the disk holds
		{1, 8 * gib, 0},
	} {
		if got := importRoom(tc.room, tc.disk); got != tc.want {
			t.Errorf("importRoom(%d, %d) = %d, want %d", tc.room, tc.disk, got, tc.want)
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
