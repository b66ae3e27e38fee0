package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits on what a reader takes from an archive it does not trust.
const (
	maxRecord   = 1 << 20
	maxManifest = 256 << 20
	maxEntries  = 10_000_000
	maxPath     = 4096
	maxRanges   = 1 << 20
	// maxKept bounds what a reader holds of the entries until the
	// manifest at the end checks them (names, links, data maps, the
	// headers of directories, whose times are set last): each header may
	// carry up to 1 MiB of extended records, and a few hundred of them
	// in a small upload would otherwise hold gigabytes. The per-entry
	// rest is bounded by maxEntries.
	maxKept = 64 << 20
)

// ErrBad is the class of an archive that is not whole or not what its
// manifest says: every error Extract returns for one wraps it.
var ErrBad = errors.New("the archive is damaged or altered")

// errNotLinked is what a light build's archives answer (codec_light.go).
var errNotLinked = errors.New("exports and imports are made by the full nsys-cortex program, not this light one: run nsys-cortex export or import")

// decompressor is a stream being decompressed; Close releases it.
type decompressor interface {
	io.Reader
	Close()
}

// Reader reads an archive: Open reads its record, Extract the rest.
type Reader struct {
	dec    decompressor
	tr     *tar.Reader
	rec    Record
	recSum string
}

// Open starts reading an archive from r: it reads the record (the first
// entry) and leaves the rest for Extract. Close releases the decoder.
func Open(r io.Reader) (*Reader, error) {
	dec, err := decompress(r)
	if errors.Is(err, errNotLinked) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: not a zstd stream: %v", ErrBad, err)
	}
	ar := &Reader{dec: dec, tr: tar.NewReader(dec)}
	h, err := ar.tr.Next()
	if notCompressed(err) {
		dec.Close()
		return nil, fmt.Errorf("%w: not zstd-compressed (an nsys-cortex export is a tar.zst)", ErrBad)
	}
	if err != nil {
		dec.Close()
		return nil, fmt.Errorf("%w: no record: %v (is it an nsys-cortex export?)", ErrBad, err)
	}
	if h.Name != RecordName || h.Typeflag != tar.TypeReg || h.Size > maxRecord {
		dec.Close()
		return nil, fmt.Errorf("%w: the first entry is %q, not %s (is it an nsys-cortex export?)", ErrBad, h.Name, RecordName)
	}
	b, err := io.ReadAll(io.LimitReader(ar.tr, maxRecord))
	if err != nil {
		dec.Close()
		return nil, fmt.Errorf("%w: the record: %v", ErrBad, err)
	}
	if err := json.Unmarshal(b, &ar.rec); err != nil {
		dec.Close()
		return nil, fmt.Errorf("%w: the record: %v", ErrBad, err)
	}
	if ar.rec.Version != Version {
		dec.Close()
		return nil, fmt.Errorf("an export of format %d: this nsys-cortex reads format %d", ar.rec.Version, Version)
	}
	sum := sha256.Sum256(b)
	ar.recSum = hex.EncodeToString(sum[:])
	return ar, nil
}

// Record returns the archive's record, as read (not yet verified: Extract
// checks it against the manifest).
func (ar *Reader) Record() Record { return ar.rec }

// Relabel makes the neuron imported from ar get these labels instead of
// those its record holds (an API key's tenant labels).
func (ar *Reader) Relabel(l map[string]string) { ar.rec.Labels = l }

// Close releases the reader.
func (ar *Reader) Close() { ar.dec.Close() }

// Owners says who extracted files belong to: it gives each owner of the
// archive (a uid or gid) the one its file gets. Nil leaves owners as the
// process makes them (not root: its own).
type Owners func(id int) int

// ExtractOptions shape an Extract.
type ExtractOptions struct {
	Owners Owners
	// MaxBytes bounds the data extracted (0: no bound): an archive that
	// holds more is refused when it passes it, so a damaged or hostile
	// one cannot fill the host's disk.
	MaxBytes int64
	// MaxEntries bounds the entries (0, or past 10 million: 10 million).
	MaxEntries int
	// Grant, when set, is asked before the extraction takes more of the
	// disk than it last granted: charged is what it took so far, need
	// what it will have taken in all after the step at hand, and Grant
	// returns how much it may take in all (at least need), or why not
	// (the extraction then fails with that error). What is charged: the
	// data as it is written (asked as it arrives, not when a header
	// announces it, so a slow or lying archive is granted only what it
	// sent), each entry's inode (a block for a directory) and extended
	// attributes, and the blocks a file's ranges fill only partly.
	Grant func(charged, need int64) (upTo int64, err error)
	// EntryCost, when more than what an entry takes, is charged for each
	// entry instead: the filesystem's bytes per inode, so that the room
	// granted bounds the inodes taken as well as the blocks.
	EntryCost int64
}

// ErrTooLarge: the archive holds more than ExtractOptions allow.
var ErrTooLarge = errors.New("the archive holds more than this import may take")

// Extract writes the rest of the archive under stage, an empty directory
// of the host's that nothing else reaches, and verifies it against the
// manifest: every entry listed, in order, of its type, every file's
// SHA-256 and ranges. Any failure names the first bad entry and wraps
// ErrBad; the caller removes stage then, so nothing of a bad archive is
// ever used. Entries are never written through a link: an entry must lie
// under a directory the archive made, an absolute path or one with ".."
// is refused, as is a hard link to anything but a file before it, a
// relative symlink that climbs out of its tree, and any device node but an
// overlay whiteout. Set-id bits are kept only on files owners maps to
// themselves.
func (ar *Reader) Extract(ctx context.Context, stage string, o ExtractOptions) (Stats, error) {
	x := &extractor{stage: stage, owners: o.Owners, kinds: map[string]string{"": "dir"}, root: os.Geteuid() == 0, maxBytes: o.MaxBytes, grant: o.Grant, entryCost: o.EntryCost}
	maxN := o.MaxEntries
	if maxN <= 0 || maxN > maxEntries {
		maxN = maxEntries
	}
	var manifest *Manifest
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, err
		}
		h, err := ar.tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.stats, fmt.Errorf("%w: after %d entries: %v (truncated?)", ErrBad, len(x.got), err)
		}
		if manifest != nil {
			return x.stats, fmt.Errorf("%w: entry %q after the manifest", ErrBad, h.Name)
		}
		if h.Name == ManifestName {
			if h.Size > maxManifest {
				return x.stats, fmt.Errorf("%w: a manifest of %d bytes", ErrBad, h.Size)
			}
			b, err := io.ReadAll(io.LimitReader(ar.tr, maxManifest))
			if err != nil {
				return x.stats, fmt.Errorf("%w: the manifest: %v", ErrBad, err)
			}
			manifest = &Manifest{}
			if err := json.Unmarshal(b, manifest); err != nil {
				return x.stats, fmt.Errorf("%w: the manifest: %v", ErrBad, err)
			}
			continue
		}
		if len(x.got) >= maxN {
			return x.stats, fmt.Errorf("%w: more than %d entries", ErrTooLarge, maxN)
		}
		var refused grantRefused
		if err := x.entry(h, ar.tr); errors.Is(err, ErrTooLarge) {
			return x.stats, fmt.Errorf("entry %q: %w", h.Name, err)
		} else if errors.As(err, &refused) {
			return x.stats, fmt.Errorf("entry %q: %w", h.Name, refused.err)
		} else if err != nil {
			return x.stats, fmt.Errorf("%w: entry %q: %v", ErrBad, h.Name, err)
		}
	}
	if manifest == nil {
		return x.stats, fmt.Errorf("%w: no manifest at its end after %d entries (truncated?)", ErrBad, len(x.got))
	}
	if manifest.Record != ar.recSum {
		return x.stats, fmt.Errorf("%w: the record %s does not match the manifest's checksum", ErrBad, RecordName)
	}
	for i, want := range manifest.Entries {
		if i >= len(x.got) {
			return x.stats, fmt.Errorf("%w: entry %q of the manifest is missing (truncated?)", ErrBad, want.Path)
		}
		if got := x.got[i]; got != want {
			return x.stats, fmt.Errorf("%w: entry %q is not what the manifest says (%s)", ErrBad, got.Path, differs(got, want))
		}
	}
	if len(x.got) > len(manifest.Entries) {
		return x.stats, fmt.Errorf("%w: entry %q is not in the manifest", ErrBad, x.got[len(manifest.Entries)].Path)
	}
	if err := x.finish(); err != nil {
		return x.stats, err
	}
	return x.stats, nil
}

func differs(got, want Entry) string {
	switch {
	case got.Path != want.Path:
		return "the manifest has " + want.Path + " there"
	case got.Type != want.Type:
		return "a " + got.Type + ", the manifest says " + want.Type
	case got.SHA256 != want.SHA256:
		return "its SHA-256 differs"
	}
	return "its size, ranges or link differ"
}

type extractor struct {
	stage  string
	owners Owners
	root   bool
	// kinds are the types of the entries made so far, by clean path.
	kinds map[string]string
	got   []Entry
	stats Stats
	dirs  []*tar.Header // set their times last
	buf   []byte
	// maxBytes bounds stats.Bytes (0: none).
	maxBytes int64
	// grant (ExtractOptions.Grant) let the extraction take granted bytes
	// of the disk in all; charged is what it took so far (charge).
	grant            func(charged, need int64) (int64, error)
	granted, charged int64
	entryCost        int64 // ExtractOptions.EntryCost
	// kept is what the entries so far hold in memory (maxKept).
	kept int
}

// keep counts what entry h holds until the manifest is checked.
func (x *extractor) keep(h *tar.Header) error {
	n := len(h.Name) + len(h.Linkname) + len(h.PAXRecords[paxMap])
	if h.Typeflag == tar.TypeDir {
		for k, v := range h.PAXRecords {
			n += len(k) + len(v)
		}
	}
	if x.kept += n; x.kept > maxKept {
		return fmt.Errorf("%w: its names, links, data maps and directory headers hold more than %d MiB", ErrTooLarge, maxKept>>20)
	}
	return nil
}

// clean checks an entry's name and returns it clean ("data/a/b").
func clean(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	switch {
	case n == "" || len(n) > maxPath:
		return "", errors.New("an empty or too long name")
	case strings.HasPrefix(n, "/"):
		return "", errors.New("an absolute path")
	case strings.ContainsRune(n, 0):
		return "", errors.New("a name with a NUL")
	case path.Clean(n) != n || slices.Contains(strings.Split(n, "/"), ".."):
		return "", errors.New("a path that is not clean (\"..\", \".\", \"//\")")
	}
	top, _, _ := strings.Cut(n, "/")
	if top != dataDir && top != snapsDir {
		return "", fmt.Errorf("outside %s/ and %s/", dataDir, snapsDir)
	}
	return n, nil
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	if err := x.keep(h); err != nil {
		return err
	}
	p, err := clean(h.Name)
	if err != nil {
		return err
	}
	// A body is read (or skipped) whole: only a file has one, within
	// the bound.
	switch {
	case h.Typeflag != tar.TypeReg && h.Size != 0:
		return fmt.Errorf("a %q entry with a body of %d bytes", h.Typeflag, h.Size)
	case h.Size < 0 || x.maxBytes > 0 && x.stats.Bytes+h.Size > x.maxBytes:
		return fmt.Errorf("%w (%d bytes at most)", ErrTooLarge, x.maxBytes)
	}
	if _, dup := x.kinds[p]; dup {
		return errors.New("a second entry of that path")
	}
	parent := path.Dir(p)
	if parent == "." {
		parent = ""
	}
	if x.kinds[parent] != "dir" {
		return errors.New("not under a directory the archive made (never through a link)")
	}
	if (p == snapsDir || p == dataDir) && h.Typeflag != tar.TypeDir {
		// The host moves what is under them into place by name: a link
		// here would have it move (or copy) whatever it names instead.
		return fmt.Errorf("%s/ is not a directory", p)
	}
	// What the entry takes of the disk beyond its data (whose blocks are
	// charged as it is written): an inode, a block for a directory or a
	// long link's target, its extended attributes; at least EntryCost.
	cost := int64(inodeCost)
	if h.Typeflag == tar.TypeDir || h.Typeflag == tar.TypeSymlink && len(h.Linkname) > 60 {
		cost = blockCost
	}
	cost = max(cost, x.entryCost)
	for k, v := range h.PAXRecords {
		if strings.HasPrefix(k, paxAttr) {
			cost += int64(len(k) + len(v))
		}
	}
	if err := x.charge(cost); err != nil {
		return err
	}
	dst := filepath.Join(x.stage, filepath.FromSlash(p))
	e := Entry{Path: p, Link: h.Linkname}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Path, e.Link = p+"/", ""
		e.Type = "dir"
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		x.dirs = append(x.dirs, h)
		if err := setXattrs(dst, h); err != nil {
			return err
		}
	case tar.TypeReg:
		e.Type = "file"
		if err := x.file(h, r, dst, &e); err != nil {
			return err
		}
	case tar.TypeLink:
		e.Type = "link"
		first, err := clean(h.Linkname)
		if err != nil || x.kinds[first] != "file" {
			return fmt.Errorf("a hard link to %q, which is no file before it in the archive", h.Linkname)
		}
		if err := os.Link(filepath.Join(x.stage, filepath.FromSlash(first)), dst); err != nil {
			return err
		}
		x.got = append(x.got, e)
		x.kinds[p] = "link"
		return nil // its attributes are its first path's
	case tar.TypeSymlink:
		e.Type = "symlink"
		if err := checkSymlink(p, h.Linkname); err != nil {
			return err
		}
		if err := os.Symlink(h.Linkname, dst); err != nil {
			return err
		}
	case tar.TypeChar:
		if h.Devmajor != 0 || h.Devminor != 0 {
			return fmt.Errorf("a device node (%d:%d): only overlay whiteouts (0:0) are taken", h.Devmajor, h.Devminor)
		}
		e.Type = "whiteout"
		if err := unix.Mknod(dst, unix.S_IFCHR|0o600, 0); err != nil {
			return fmt.Errorf("a whiteout needs privilege to make: %w", err)
		}
	case tar.TypeFifo:
		e.Type = "fifo"
		if err := unix.Mkfifo(dst, 0o600); err != nil {
			return err
		}
	default:
		return fmt.Errorf("an entry of type %q is never taken", h.Typeflag)
	}
	x.got = append(x.got, e)
	x.kinds[p] = e.Type
	if h.Typeflag != tar.TypeDir {
		return x.attrs(dst, h)
	}
	return nil
}

// checkSymlink refuses a relative target that climbs out of the tree the
// link is in (data/, or its snapshot); an absolute target names a path in
// the neuron, and is kept (the host never follows it).
func checkSymlink(p, target string) error {
	if target == "" || len(target) > maxPath || strings.ContainsRune(target, 0) {
		return errors.New("an empty or bad symlink target")
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
	parts := strings.Split(p, "/")
	depth := len(parts) - 2 // below data/
	if parts[0] == snapsDir {
		depth -= 2 // below snapshots/NAME/data/ or so: at most out of NAME
	}
	for _, s := range strings.Split(target, "/") {
		switch s {
		case "..":
			depth--
		case "", ".":
		default:
			depth++
		}
		if depth < 0 {
			return fmt.Errorf("a symlink to %q, out of the neuron's tree", target)
		}
	}
	return nil
}

func (x *extractor) file(h *tar.Header, r io.Reader, dst string, e *Entry) error {
	size := h.Size
	if v, ok := h.PAXRecords[paxSize]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("a bad %s %q", paxSize, v)
		}
		size = n
	}
	ranges := [][2]int64{{0, h.Size}}
	if m, ok := h.PAXRecords[paxMap]; ok {
		var err error
		if ranges, err = decodeMap(m, size, h.Size); err != nil {
			return err
		}
		e.Map = m
	} else if size != h.Size {
		return fmt.Errorf("%d bytes stored for a file of %d without a map", h.Size, size)
	}
	e.Size = size
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	hash := sha256.New()
	if x.buf == nil {
		x.buf = make([]byte, 1<<20)
	}
	for _, rg := range ranges {
		if x.maxBytes > 0 && x.stats.Bytes+rg[1] > x.maxBytes {
			return fmt.Errorf("%w (%d bytes at most)", ErrTooLarge, x.maxBytes)
		}
		// The blocks a range only partly fills are taken whole.
		if err := x.charge(blockSpan(rg[0], rg[1]) - rg[1]); err != nil {
			return err
		}
		n, err := io.CopyBuffer(grantedWriter{x, io.NewOffsetWriter(f, rg[0])}, io.TeeReader(io.LimitReader(r, rg[1]), hash), x.buf)
		if err != nil {
			return err
		}
		if n != rg[1] {
			return fmt.Errorf("%d bytes of %d (truncated?)", n, rg[1])
		}
		x.stats.Bytes += n
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	e.SHA256 = hex.EncodeToString(hash.Sum(nil))
	x.stats.Files++
	if err := setXattrs(dst, h); err != nil {
		return err
	}
	return f.Close()
}

// decodeMap reads a CORTEX.map: ascending, non-overlapping ranges within
// size whose lengths add up to stored.
func decodeMap(m string, size, stored int64) ([][2]int64, error) {
	parts := strings.Split(m, ",")
	if len(parts) > maxRanges {
		return nil, fmt.Errorf("a map of %d ranges", len(parts))
	}
	out := make([][2]int64, 0, len(parts))
	var end, total int64
	for _, s := range parts {
		a, b, ok := strings.Cut(s, "+")
		off, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || off < end || n < 0 || off > size || n > size-off {
			return nil, fmt.Errorf("a bad map range %q", s)
		}
		out = append(out, [2]int64{off, n})
		end, total = off+n, total+n
	}
	if total != stored {
		return nil, fmt.Errorf("a map of %d bytes for %d stored", total, stored)
	}
	return out, nil
}

// setXattrs sets the extended attributes an entry carries (those this
// process may set; trusted.* needs root).
func setXattrs(dst string, h *tar.Header) error {
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, paxAttr)
		if !ok {
			continue
		}
		if err := unix.Lsetxattr(dst, name, []byte(v), 0); err != nil && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// attrs sets an entry's owner, mode and times (owner first: chown clears
// set-id bits).
func (x *extractor) attrs(dst string, h *tar.Header) error {
	mode := uint32(h.Mode & 0o7777)
	if x.root && x.owners != nil {
		uid, gid := x.owners(h.Uid), x.owners(h.Gid)
		if uid != h.Uid || gid != h.Gid {
			mode &^= unix.S_ISUID | unix.S_ISGID // set-id bits go with the owner they were for
			if uid == h.Uid && h.Mode&unix.S_ISUID != 0 {
				mode |= unix.S_ISUID
			}
		}
		if err := unix.Lchown(dst, uid, gid); err != nil {
			return err
		}
	}
	if h.Typeflag != tar.TypeSymlink {
		if err := unix.Chmod(dst, mode); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(h.AccessTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
	if h.AccessTime.IsZero() {
		ts[0] = ts[1]
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// finish sets the directories' owners, modes and times, deepest first
// (writing into a directory changes its time).
func (x *extractor) finish() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		h := x.dirs[i]
		p, _ := clean(h.Name)
		if err := x.attrs(filepath.Join(x.stage, filepath.FromSlash(p)), h); err != nil {
			return fmt.Errorf("%w: entry %q: %v", ErrBad, h.Name, err)
		}
	}
	return nil
}

// What an entry is charged beyond its data and extended attributes
// (ExtractOptions.Grant): an inode (ext4's are 256 bytes), or a block
// for a directory, or a link whose target does not fit in its inode.
const (
	inodeCost = 256
	blockCost = 4096
)

// blockSpan is what a range of n bytes at off takes in 4 KiB blocks
// (decodeMap has checked that off+n does not overflow; rounding up past
// the largest offset is left out).
func blockSpan(off, n int64) int64 {
	if n <= 0 || off < 0 {
		return max(n, 0)
	}
	end := off + n
	if end > math.MaxInt64-4095 {
		return end - off&^4095
	}
	return (end+4095)&^4095 - off&^4095
}

// charge counts n more bytes the extraction is about to take of the
// disk, asking Grant past what it granted.
func (x *extractor) charge(n int64) error {
	if n <= 0 {
		return nil
	}
	need := x.charged + n
	if x.grant != nil && need > x.granted {
		upTo, err := x.grant(x.charged, need)
		if err != nil {
			return grantRefused{err}
		}
		if upTo < need {
			return fmt.Errorf("granted %d bytes in all, for %d", upTo, need)
		}
		x.granted = upTo
	}
	x.charged = need
	return nil
}

// grantedWriter writes to w, charging what it writes (charge) first.
type grantedWriter struct {
	x *extractor
	w io.Writer
}

func (g grantedWriter) Write(p []byte) (int, error) {
	if err := g.x.charge(int64(len(p))); err != nil {
		return 0, err
	}
	return g.w.Write(p)
}

// grantRefused is Grant's refusal, handed to Extract's caller as it is
// (not as a bad archive).
type grantRefused struct{ err error }

func (g grantRefused) Error() string { return g.err.Error() }
