package lifecycle

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/treediff"
)

var _ sandbox.Differ = (*Manager)(nil)

// Diff lists what changed from the base o names to neuron id, comparing
// their layers (what each wrote over its image: docs/diff.md), read as
// they are now.
func (m *Manager) Diff(ctx context.Context, id string, o sandbox.DiffOptions) (*sandbox.Diff, error) {
	dp, ok := m.rt.(DataPather)
	if !ok {
		return nil, &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "diff", Reason: "a microVM's files are inside its disk image, which the host does not read"}
	}
	if err := m.known(id); err != nil {
		return nil, err
	}
	against := o.Against
	if against == "" && o.Snapshot == "" {
		st, err := m.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if against = st.ForkedFrom; against == "" {
			return nil, &sandbox.InvalidError{Reason: fmt.Sprintf("neuron %s was not forked: say what to compare it with (another neuron, or ID@SNAPSHOT)", id)}
		}
		if err := m.known(against); err != nil {
			return nil, fmt.Errorf("%s was forked from %s, which is gone: %w", id, against, err)
		}
	}
	rootA, err := m.DataRoot(ctx, id)
	if err != nil {
		return nil, err
	}
	var rootB, label string
	if o.Snapshot != "" {
		owner := against
		if owner == "" {
			owner = id
		} else if err := validID(owner); err != nil {
			return nil, err
		}
		snap, err := store.ReadSnapshot(m.lay.SnapshotsDir(owner), o.Snapshot)
		if err != nil {
			return nil, fmt.Errorf("neuron %s: %w", owner, err)
		}
		if snap.Whole() {
			return nil, &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "diff against a whole-VM snapshot"}
		}
		rootB, label = filepath.Join(m.lay.SnapshotsDir(owner), o.Snapshot, "data"), owner+"@"+o.Snapshot
	} else {
		if err := m.known(against); err != nil {
			return nil, err
		}
		if rootB, err = m.DataRoot(ctx, against); err != nil {
			return nil, err
		}
		label = against
	}
	var layers []treediff.Layer
	for _, p := range dp.DataPaths(m.lay, id) {
		layers = append(layers, treediff.Layer{At: p.At, Dir: filepath.Join(rootA, p.Rel), Base: filepath.Join(rootB, p.Rel)})
	}
	res, err := treediff.Compare(ctx, layers, treediff.Options{Patch: o.Patch})
	if err != nil {
		return nil, err
	}
	return &sandbox.Diff{Neuron: id, Against: label, Changes: res.Changes, Truncated: res.Truncated}, nil
}
