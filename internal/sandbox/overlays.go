package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Overlay is a neuron's directory among the home's overlays, with the
// mode its .mode file names ("" when it has none).
type Overlay struct {
	ID   string
	Mode string
}

// OverlayMode returns the mode neuron id's overlay is marked with (its
// .mode file), "" when it has none or it cannot be read. The mark is read
// as a record: not through a link, a regular file of at most 64 bytes.
func OverlayMode(lay layout.Layout, id string) string {
	b, err := store.ReadRecord(filepath.Join(lay.OverlayDir(id), ".mode"), 64)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ScanOverlays returns the home's overlays (directories named with a
// valid id; nothing when there is no overlays directory), each with its
// mode.
func ScanOverlays(lay layout.Layout) ([]Overlay, error) {
	entries, err := os.ReadDir(lay.Overlays)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", lay.Overlays, err)
	}
	out := make([]Overlay, 0, len(entries))
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || ids.Validate(id) != nil {
			continue
		}
		out = append(out, Overlay{ID: id, Mode: OverlayMode(lay, id)})
	}
	return out, nil
}

// OverlayLister is a Manager whose neurons are the home's overlays
// marked with its mode (the modes built on the shared lifecycle). A Set
// scans the overlays once for all of them (ScanOverlays) and hands each
// only the overlays marked as its own, where each List would read every
// overlay's mark again: a list of 100 neurons read 500 marks, with five
// such modes. A find skips those whose mark is another's.
type OverlayLister interface {
	// OwnsMark reports whether an overlay marked mode ("": unmarked) is
	// this manager's.
	OwnsMark(mode string) bool
	// ListOverlays is List of those of the overlays it owns by their mark
	// as scanned; it checks each again before it looks at it.
	ListOverlays(ctx context.Context, overlays []Overlay) ([]*State, error)
}

// ownedBy returns the overlays m owns by their mark.
func ownedBy(m OverlayLister, overlays []Overlay) []Overlay {
	var out []Overlay
	for _, o := range overlays {
		if m.OwnsMark(o.Mode) {
			out = append(out, o)
		}
	}
	return out
}
