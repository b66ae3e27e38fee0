// Package archive writes and reads a neuron's export (nsys-cortex export,
// import): one tar stream compressed with zstd, holding the neuron's
// record, its data, optionally its snapshots, and last a manifest with a
// SHA-256 of every file, so a reader verifies everything before anything
// it extracted is used (docs/export.md).
//
// The layout of the tar:
//
//	cortex-export.json     the Record (first)
//	data/...               the neuron's data, as its data root holds it
//	snapshots/NAME/...     each snapshot's directory (with --snapshots)
//	MANIFEST.json          the Manifest (last)
//
// A regular file's entry holds only the ranges its source held data in:
// PAX records CORTEX.size (its length) and CORTEX.map ("off+len,..."; none
// when it has no holes) say where they go, so a sparse VM disk stays
// sparse in the archive and after import. Extended attributes travel as
// SCHILY.xattr.* records. Hard links are tar links to the first path.
package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/hostfs"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Version is this package's format.
const Version = 1

// Names of the fixed entries.
const (
	RecordName   = "cortex-export.json"
	ManifestName = "MANIFEST.json"
	dataDir      = "data"
	snapsDir     = "snapshots"
)

// PAX records of a regular file.
const (
	paxSize = "CORTEX.size"
	paxMap  = "CORTEX.map"
	paxAttr = "SCHILY.xattr."
)

// Record is what an export says of its neuron.
type Record struct {
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Mode    string    `json:"mode"`
	Created time.Time `json:"created"`
	// Policy is the neuron's policy in force when it was exported (none
	// for a stopped neuron), as JSON the sandbox package reads.
	Policy json.RawMessage   `json:"policy,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// UID is the host uid the neuron's files belonged to (0: not known);
	// an import gives its files to the new neuron's uid.
	UID int `json:"uid,omitempty"`
	// DiskBytes is the neuron's disk ceiling (0: none).
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// Snapshots names the snapshots the archive holds.
	Snapshots []string `json:"snapshots,omitempty"`
}

// Manifest lists every entry after the record, in order.
type Manifest struct {
	Version int `json:"version"`
	// Record is the SHA-256 of the record entry.
	Record  string  `json:"record"`
	Entries []Entry `json:"entries"`
}

// Entry is one entry of the manifest.
type Entry struct {
	Path string `json:"path"`
	Type string `json:"type"` // file, dir, symlink, link, whiteout, fifo
	// Size and Map: a file's length and its data ranges (CORTEX.map).
	Size int64  `json:"size,omitempty"`
	Map  string `json:"map,omitempty"`
	// SHA256 is of a file's data ranges, in order.
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target, or the first path of a hard link.
	Link string `json:"link,omitempty"`
}

// Stats say what an export or an import moved.
type Stats struct {
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"` // data (holes count nothing)
	Entries int   `json:"entries"`
}

// Tree is a directory tree to put in an archive under Name ("data", or
// "snapshots/NAME"), read by descriptor from Dir; Skip says which of its
// top-level entries to leave out.
type Tree struct {
	Name string
	Dir  string
	Skip func(name string) bool
}

// Write writes rec and the trees to w as one archive. The trees are read
// by descriptor, never through a symlink, as a snapshot copy reads a
// neuron's data (which its owner keeps still meanwhile: paused, or
// stopped). Sockets are left out; a device node other than an overlay
// whiteout is an error.
func Write(ctx context.Context, w io.Writer, rec Record, trees []Tree) (Stats, error) {
	enc, err := compress(w)
	if err != nil {
		return Stats{}, err
	}
	aw := &writer{ctx: ctx, tw: tar.NewWriter(enc), links: map[[2]uint64]string{}, now: time.Now()}
	rec.Version = Version
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return Stats{}, err
	}
	sum := sha256.Sum256(b)
	aw.manifest = Manifest{Version: Version, Record: hex.EncodeToString(sum[:])}
	if err := aw.bytes(RecordName, b); err != nil {
		return Stats{}, err
	}
	for _, t := range trees {
		if err := aw.tree(t); err != nil {
			return Stats{}, err
		}
	}
	m, err := json.Marshal(aw.manifest)
	if err != nil {
		return Stats{}, err
	}
	if err := aw.bytes(ManifestName, m); err != nil {
		return Stats{}, err
	}
	if err := aw.tw.Close(); err != nil {
		return Stats{}, err
	}
	if err := enc.Close(); err != nil {
		return Stats{}, err
	}
	return aw.stats, nil
}

type writer struct {
	ctx      context.Context
	tw       *tar.Writer
	links    map[[2]uint64]string
	manifest Manifest
	stats    Stats
	now      time.Time
	buf      []byte
}

func (w *writer) bytes(name string, b []byte) error {
	if err := w.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(b)), ModTime: w.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := w.tw.Write(b)
	return err
}

func (w *writer) tree(t Tree) error {
	d, err := hostfs.Open(t.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return err
	}
	if err := w.header(t.Name+"/", st, tar.TypeDir, "", nil); err != nil {
		return err
	}
	w.manifest.Entries = append(w.manifest.Entries, Entry{Path: t.Name + "/", Type: "dir"})
	return w.dir(d, t.Name, t.Skip)
}

func (w *writer) dir(d *hostfs.Dir, name string, skip func(string) bool) error {
	names, err := d.Names()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if skip != nil && skip(n) {
			continue
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if err := w.entry(d, n, name+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

// entry writes entry n of d as p: what is written is what the opened
// descriptor is, never what a name led to.
func (w *writer) entry(d *hostfs.Dir, n, p string) error {
	st, err := d.Lstat(n)
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := d.Sub(n)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		defer sub.Close()
		if st, err = sub.Stat(); err != nil {
			return err
		}
		if err := w.header(p+"/", st, tar.TypeDir, "", xattrs(int(sub.Fd()))); err != nil {
			return err
		}
		w.manifest.Entries = append(w.manifest.Entries, Entry{Path: p + "/", Type: "dir"})
		return w.dir(sub, p, nil)
	case unix.S_IFREG:
		f, fst, err := d.OpenFile(n, unix.O_RDONLY, 0)
		if err != nil {
			return fmt.Errorf("%s: %w (it changed while it was exported?)", p, err)
		}
		defer f.Close()
		if first, ok := w.linked(fst, p); ok {
			w.manifest.Entries = append(w.manifest.Entries, Entry{Path: p, Type: "link", Link: first})
			return w.header(p, fst, tar.TypeLink, first, nil)
		}
		return w.file(f, fst, p)
	case unix.S_IFLNK:
		target, err := d.Readlink(n)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		w.manifest.Entries = append(w.manifest.Entries, Entry{Path: p, Type: "symlink", Link: target})
		return w.header(p, st, tar.TypeSymlink, target, nil)
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return fmt.Errorf("%s: a device node (%d:%d) that is not an overlay whiteout is never exported", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		w.manifest.Entries = append(w.manifest.Entries, Entry{Path: p, Type: "whiteout"})
		return w.header(p, st, tar.TypeChar, "", nil)
	case unix.S_IFIFO:
		w.manifest.Entries = append(w.manifest.Entries, Entry{Path: p, Type: "fifo"})
		return w.header(p, st, tar.TypeFifo, "", nil)
	case unix.S_IFSOCK:
		return nil // a socket is not data
	}
	return fmt.Errorf("%s: a file of type %o is never exported", p, st.Mode&unix.S_IFMT)
}

func (w *writer) linked(st *unix.Stat_t, p string) (string, bool) {
	if st.Nlink <= 1 {
		return "", false
	}
	key := [2]uint64{uint64(st.Dev), st.Ino}
	if first, ok := w.links[key]; ok {
		return first, true
	}
	w.links[key] = p
	return "", false
}

// file writes a regular file's data ranges (SEEK_DATA/SEEK_HOLE).
func (w *writer) file(f *os.File, st *unix.Stat_t, p string) error {
	ranges := store.DataRanges(int(f.Fd()), st.Size)
	if len(ranges) == 0 && st.Size > 0 {
		ranges = [][2]int64{{st.Size, 0}} // all hole: an empty range at its end says so
	}
	var stored int64
	for _, r := range ranges {
		stored += r[1]
	}
	e := Entry{Path: p, Type: "file", Size: st.Size}
	pax := xattrs(int(f.Fd()))
	if pax == nil {
		pax = map[string]string{}
	}
	pax[paxSize] = strconv.FormatInt(st.Size, 10)
	if stored != st.Size {
		e.Map = encodeMap(ranges)
		pax[paxMap] = e.Map
	}
	hdr := w.hdr(p, st, tar.TypeReg, "", pax)
	hdr.Size = stored
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	h := sha256.New()
	if w.buf == nil {
		w.buf = make([]byte, 1<<20)
	}
	out := io.MultiWriter(w.tw, h)
	for _, r := range ranges {
		n, err := io.CopyBuffer(out, io.NewSectionReader(f, r[0], r[1]), w.buf)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n < r[1] {
			// Shorter than it was (written meanwhile): zeros keep the
			// archive whole, and the manifest says what was written.
			if _, err := io.CopyN(out, zeroReader{}, r[1]-n); err != nil {
				return err
			}
		}
		w.stats.Bytes += r[1]
	}
	e.SHA256 = hex.EncodeToString(h.Sum(nil))
	w.manifest.Entries = append(w.manifest.Entries, e)
	w.stats.Files++
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func encodeMap(ranges [][2]int64) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = strconv.FormatInt(r[0], 10) + "+" + strconv.FormatInt(r[1], 10)
	}
	return strings.Join(parts, ",")
}

func (w *writer) header(p string, st *unix.Stat_t, typ byte, link string, pax map[string]string) error {
	return w.tw.WriteHeader(w.hdr(p, st, typ, link, pax))
}

func (w *writer) hdr(p string, st *unix.Stat_t, typ byte, link string, pax map[string]string) *tar.Header {
	w.stats.Entries++
	return &tar.Header{Name: path.Clean(p) + suffix(typ), Typeflag: typ, Linkname: link, Mode: int64(st.Mode & 0o7777),
		Uid: int(st.Uid), Gid: int(st.Gid), ModTime: time.Unix(st.Mtim.Unix()), AccessTime: time.Unix(st.Atim.Unix()),
		PAXRecords: pax, Format: tar.FormatPAX}
}

func suffix(typ byte) string {
	if typ == tar.TypeDir {
		return "/"
	}
	return ""
}

// xattrs returns the extended attributes of the open file fd this process
// may read (up to 64 KiB each), as PAX records.
func xattrs(fd int) map[string]string {
	var out map[string]string
	for _, x := range store.Xattrs(fd) {
		if len(x.Value) > 64<<10 {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[paxAttr+x.Name] = string(x.Value)
	}
	return out
}
