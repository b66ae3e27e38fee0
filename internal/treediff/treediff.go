// Package treediff compares two neurons' layers: the directories that hold
// what each wrote over its image (an overlay's upper directory, a
// snapshot's copy of it). It reads both by descriptor, never through a
// link, as neurons' trees are read everywhere on the host, and walks only
// what was written, never the image below (docs/diff.md).
package treediff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/hostfs"
)

// Kinds of change.
const (
	Added    = "added"
	Removed  = "removed"
	Modified = "modified" // contents, size, kind or link target
	Mode     = "mode"     // only its mode
)

// Change is one path that differs, from the base (B) to the tree (A).
type Change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Type is what the path is in A (in B when removed): file, dir,
	// symlink, other.
	Type    string `json:"type"`
	Size    int64  `json:"size,omitempty"`
	OldSize int64  `json:"oldSize,omitempty"`
	Mode    string `json:"mode,omitempty"`
	OldMode string `json:"oldMode,omitempty"`
	Link    string `json:"link,omitempty"`
	// Patch is a unified diff of a text file (Options.Patch).
	Patch string `json:"patch,omitempty"`
}

// Layer is one part of a neuron's layer to compare: the directory Dir (A)
// and Base (B; may not exist) shown as the neuron's path At.
type Layer struct {
	At   string
	Dir  string
	Base string
}

// Options shape a Compare.
type Options struct {
	// Patch adds unified diffs of text files (both sides at most
	// MaxPatchFile bytes, valid UTF-8 without NUL).
	Patch bool
	// Max bounds the changes listed (0: DefaultMax); past it Truncated.
	Max int
}

// Limits.
const (
	DefaultMax   = 100_000
	MaxPatchFile = 1 << 20
)

// Result is what Compare found.
type Result struct {
	Changes   []Change `json:"changes"`
	Truncated bool     `json:"truncated,omitempty"`
}

// Compare lists what differs between the layers' trees and their bases.
// An overlay whiteout (a character device 0:0) is a path deleted over the
// image: a removal in A, a path B deleted that A still has when only B has
// it.
func Compare(ctx context.Context, layers []Layer, o Options) (*Result, error) {
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	c := &comparer{ctx: ctx, o: o, res: &Result{}}
	for _, l := range layers {
		a, err := openOrNil(l.Dir)
		if err != nil {
			return nil, err
		}
		b, err := openOrNil(l.Base)
		if err != nil {
			closeDir(a)
			return nil, err
		}
		err = c.dirs(a, b, l.At)
		closeDir(a)
		closeDir(b)
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(c.res.Changes, func(i, j int) bool { return c.res.Changes[i].Path < c.res.Changes[j].Path })
	return c.res, nil
}

func openOrNil(p string) (*hostfs.Dir, error) {
	if p == "" {
		return nil, nil
	}
	d, err := hostfs.Open(p)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return d, err
}

func closeDir(d *hostfs.Dir) {
	if d != nil {
		d.Close()
	}
}

type comparer struct {
	ctx context.Context
	o   Options
	res *Result
}

func (c *comparer) add(ch Change) {
	if len(c.res.Changes) >= c.o.Max {
		c.res.Truncated = true
		return
	}
	c.res.Changes = append(c.res.Changes, ch)
}

func names(d *hostfs.Dir) (map[string]bool, error) {
	out := map[string]bool{}
	if d == nil {
		return out, nil
	}
	ns, err := d.Names()
	for _, n := range ns {
		out[n] = true
	}
	return out, err
}

// dirs compares directories a and b (either may be nil: absent), shown
// as at.
func (c *comparer) dirs(a, b *hostfs.Dir, at string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	na, err := names(a)
	if err != nil {
		return err
	}
	nb, err := names(b)
	if err != nil {
		return err
	}
	all := make([]string, 0, len(na)+len(nb))
	for n := range na {
		all = append(all, n)
	}
	for n := range nb {
		if !na[n] {
			all = append(all, n)
		}
	}
	sort.Strings(all)
	for _, n := range all {
		if c.res.Truncated {
			return nil
		}
		if err := c.entry(a, b, n, path.Join(at, n), na[n], nb[n]); err != nil {
			return err
		}
	}
	return nil
}

type side struct {
	st   *unix.Stat_t
	link string
}

func look(d *hostfs.Dir, n string) (*side, error) {
	st, err := d.Lstat(n)
	if err != nil {
		return nil, err
	}
	s := &side{st: st}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		s.link, _ = d.Readlink(n)
	}
	return s, nil
}

func typeOf(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

func whiteout(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 }

func modeOf(st *unix.Stat_t) string { return fmt.Sprintf("%04o", st.Mode&0o7777) }

func (c *comparer) entry(a, b *hostfs.Dir, n, p string, inA, inB bool) error {
	var sa, sb *side
	var err error
	if inA {
		if sa, err = look(a, n); err != nil {
			return nil // gone meanwhile
		}
	}
	if inB {
		if sb, err = look(b, n); err != nil {
			return nil
		}
	}
	switch {
	case sa != nil && whiteout(sa.st):
		if sb == nil || !whiteout(sb.st) {
			c.add(Change{Path: p, Kind: Removed, Type: "deleted over the image"})
		}
		return nil
	case sb != nil && whiteout(sb.st) && sa == nil:
		// B deleted it over the image; A still has the image's.
		c.add(Change{Path: p, Kind: Added, Type: "the image's"})
		return nil
	case sb != nil && whiteout(sb.st):
		sb = nil // deleted in B: whatever A has is new
	}
	switch {
	case sa != nil && sb == nil:
		return c.one(a, n, p, sa, Added)
	case sa == nil && sb != nil:
		return c.one(b, n, p, sb, Removed)
	}
	ta, tb := typeOf(sa.st), typeOf(sb.st)
	if ta == "dir" && tb == "dir" {
		if modeOf(sa.st) != modeOf(sb.st) {
			c.add(Change{Path: p + "/", Kind: Mode, Type: ta, Mode: modeOf(sa.st), OldMode: modeOf(sb.st)})
		}
		da, err := a.Sub(n)
		if err != nil {
			return nil
		}
		defer da.Close()
		db, err := b.Sub(n)
		if err != nil {
			return nil
		}
		defer db.Close()
		return c.dirs(da, db, p)
	}
	ch := Change{Path: p, Kind: Modified, Type: ta, Size: sa.st.Size, OldSize: sb.st.Size, Mode: modeOf(sa.st), OldMode: modeOf(sb.st), Link: sa.link}
	switch {
	case ta != tb:
		if tb == "dir" || ta == "dir" {
			// A whole tree became something else: list what went and came.
			if err := c.one(b, n, p, sb, Removed); err != nil {
				return err
			}
			return c.one(a, n, p, sa, Added)
		}
	case ta == "symlink":
		if sa.link == sb.link {
			ch.Kind = ""
		}
	case ta == "file":
		same, err := sameContents(a, b, n, sa.st, sb.st)
		if err != nil {
			return nil
		}
		if same {
			ch.Kind = ""
		} else if c.o.Patch {
			ch.Patch = c.patch(b, a, n, p)
		}
	default:
		ch.Kind = ""
	}
	// Owners are not compared: each neuron's files belong to its own
	// host uid.
	if ch.Kind == "" && ch.Mode != ch.OldMode {
		ch.Kind = Mode
	}
	if ch.Kind != "" {
		c.add(ch)
	}
	return nil
}

// one lists a path only one side has, and all below it (a directory).
func (c *comparer) one(d *hostfs.Dir, n, p string, s *side, kind string) error {
	t := typeOf(s.st)
	ch := Change{Path: p, Kind: kind, Type: t, Mode: modeOf(s.st), Link: s.link}
	if kind == Removed {
		ch.Mode, ch.OldMode = "", ch.Mode
	}
	switch t {
	case "file":
		if kind == Added {
			ch.Size = s.st.Size
			if c.o.Patch {
				ch.Patch = c.patch(nil, d, n, p)
			}
		} else {
			ch.OldSize = s.st.Size
			if c.o.Patch {
				ch.Patch = c.patch(d, nil, n, p)
			}
		}
	case "dir":
		ch.Path += "/"
		c.add(ch)
		sub, err := d.Sub(n)
		if err != nil {
			return nil
		}
		defer sub.Close()
		if kind == Added {
			return c.dirs(sub, nil, p)
		}
		return c.dirs(nil, sub, p)
	}
	c.add(ch)
	return nil
}

// sameContents compares two regular files byte for byte.
func sameContents(a, b *hostfs.Dir, n string, sa, sb *unix.Stat_t) (bool, error) {
	if sa.Size != sb.Size {
		return false, nil
	}
	fa, _, err := a.OpenFile(n, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, _, err := b.OpenFile(n, unix.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if erra != nil || errb != nil {
			return (erra == io.EOF || erra == io.ErrUnexpectedEOF) && (errb == io.EOF || errb == io.ErrUnexpectedEOF), nil
		}
	}
}

// patch is the unified diff of file n from old to new (either nil: the
// empty file), or "" when either is not text of at most MaxPatchFile.
func (c *comparer) patch(old, new *hostfs.Dir, n, p string) string {
	ot, ok := text(old, n)
	if !ok {
		return ""
	}
	nt, ok := text(new, n)
	if !ok {
		return ""
	}
	return udiff.Unified("a"+p, "b"+p, ot, nt)
}

func text(d *hostfs.Dir, n string) (string, bool) {
	if d == nil {
		return "", true
	}
	f, st, err := d.OpenFile(n, unix.O_RDONLY, 0)
	if err != nil || st.Size > MaxPatchFile {
		if f != nil {
			f.Close()
		}
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxPatchFile+1))
	if err != nil || len(b) > MaxPatchFile || bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}
