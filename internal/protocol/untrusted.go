package protocol

import (
	"fmt"
	"io/fs"
	"strings"
)

// What the host accepts of an agent's description of its files. The agent
// is inside the neuron, and whatever answers on the channel may be the
// neuron's own code: every value below is checked before the host acts on
// it (see docs/security.md, "The agent's answers are untrusted input").
const (
	// MaxNameBytes is the longest file name (one path element) accepted.
	MaxNameBytes = 255
	// MaxTargetBytes is the longest symlink target accepted (PATH_MAX).
	MaxTargetBytes = 4095
)

// CheckName fails unless name is a single path element a host may create
// in a directory of its own: not empty, not "." or "..", no "/" or NUL,
// at most MaxNameBytes.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("an empty file name")
	case name == "." || name == "..":
		return fmt.Errorf("the file name %q", name)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("a file name of %d bytes (at most %d)", len(name), MaxNameBytes)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("the file name %q, which holds a '/' or a NUL byte", name)
	}
	return nil
}

// Perm is the permission bits of fi's mode, and nothing else: never a
// set-id or sticky bit, never a file type, whatever the agent sent.
func (fi *FileInfo) Perm() fs.FileMode { return fs.FileMode(fi.Mode).Perm() }

// CheckEntry fails unless fi is a well-formed entry of a directory
// listing: a valid name, a known type, a size that is not negative, and,
// for a symlink, a target of bounded length without NUL.
func (fi *FileInfo) CheckEntry() error {
	if err := CheckName(fi.Name); err != nil {
		return err
	}
	switch fi.Type {
	case TypeFile, TypeDir, TypeOther:
		if fi.Target != "" {
			return fmt.Errorf("entry %q is a %s with a link target", fi.Name, fi.Type)
		}
	case TypeSymlink:
		if fi.Target == "" || len(fi.Target) > MaxTargetBytes || strings.IndexByte(fi.Target, 0) >= 0 {
			return fmt.Errorf("symlink %q has a target that is empty, longer than %d bytes or holds a NUL byte", fi.Name, MaxTargetBytes)
		}
	default:
		return fmt.Errorf("entry %q has the unknown type %q", fi.Name, fi.Type)
	}
	if fi.Size < 0 {
		return fmt.Errorf("entry %q has a negative size", fi.Name)
	}
	return nil
}
