package store

import (
	"context"
	"fmt"
)

// CopyStats say what CopyTree copied.
type CopyStats struct {
	// Files is the number of regular files copied (hard links count once).
	Files int `json:"files"`
	// Bytes is the data the copy holds (holes count nothing).
	Bytes int64 `json:"bytes"`
	// Cloned is the part of Bytes shared with the source by the
	// filesystem (reflinks) rather than written again: all of it on
	// btrfs or XFS, nothing on ext4.
	Cloned int64 `json:"cloned"`
}

// CopyOptions shape a CopyTree.
type CopyOptions struct {
	// Skip says which top-level entries of the source to leave out.
	Skip func(name string) bool
	// Owners maps owners of the source (a uid or a gid) to those the copy
	// gets: a neuron's files belong to its own host uid, and a copy for
	// another neuron must belong to that one's. Owners not in it are kept.
	// Only a root process sets owners at all.
	Owners map[uint32]uint32
}

// CopyTree copies the entries of directory from into the existing,
// empty directory to, as a snapshot copies a neuron's data: by
// descriptor, never following a link of the source, keeping modes,
// times, extended attributes, hard links, holes and overlay whiteouts,
// and sharing data with the source (FICLONE) where the filesystem can.
// The source may be written meanwhile (a running neuron's); to must be a
// directory of the host's that no neuron reaches yet.
// ctx ending stops the copy between two entries (or two chunks of a
// large file) with its error.
func CopyTree(ctx context.Context, from, to string, o CopyOptions) (CopyStats, error) {
	cp := newCopier()
	cp.ctx = ctx
	cp.owners = o.Owners
	if err := cp.copyEntries(from, to, o.Skip); err != nil {
		return CopyStats{}, fmt.Errorf("copy of %s: %w", from, err)
	}
	return CopyStats{Files: cp.files, Bytes: cp.bytes, Cloned: cp.cloned}, nil
}
