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
// .mode file), "" when it has none or cannot be read.
func OverlayMode(lay layout.Layout, id string) string {
	b, err := store.ReadFile(filepath.Join(lay.OverlayDir(id), ".mode"))
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
// the whole scan to take its own from, where each List would read every
// overlay's mark again: a list of 100 neurons read 500 marks, with five
// such modes.
type OverlayLister interface {
	ListOverlays(ctx context.Context, overlays []Overlay) ([]*State, error)
}

// modeFirst returns the backends with the one named mode first, the
// others in their order.
func modeFirst(backends []Backend, mode string) []Backend {
	for i, b := range backends {
		if b.Name == mode && i > 0 {
			out := make([]Backend, 0, len(backends))
			out = append(out, b)
			out = append(out, backends[:i]...)
			return append(out, backends[i+1:]...)
		}
	}
	return backends
}
