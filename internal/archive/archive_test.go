//go:build !cortex_light

package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// tree makes a tree with a bit of everything an export must keep.
func tree(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(d, "a/b/empty"), 0o755))
	must(os.WriteFile(filepath.Join(d, "a/text.txt"), []byte("hello\n"), 0o640))
	must(os.WriteFile(filepath.Join(d, "a/b/exec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Link(filepath.Join(d, "a/text.txt"), filepath.Join(d, "a/b/hard.txt")))
	must(os.Symlink("../text.txt", filepath.Join(d, "a/b/rel")))
	must(os.Symlink("/etc/hostname", filepath.Join(d, "a/abs")))
	must(unix.Mkfifo(filepath.Join(d, "a/fifo"), 0o600))
	// A sparse file: 64 MiB long, two small data ranges.
	f, err := os.Create(filepath.Join(d, "sparse.img"))
	must(err)
	f.WriteAt([]byte("start"), 0)
	f.WriteAt([]byte("middle"), 32<<20)
	must(f.Truncate(64 << 20))
	f.Close()
	must(os.WriteFile(filepath.Join(d, "empty.txt"), nil, 0o600))
	unix.Lsetxattr(filepath.Join(d, "a/text.txt"), "user.note", []byte("kept"), 0)
	old := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	must(os.Chtimes(filepath.Join(d, "a/text.txt"), old, old))
	must(os.Chtimes(filepath.Join(d, "a/b/empty"), old, old))
	must(os.WriteFile(filepath.Join(d, ".neuron.json"), []byte("{}"), 0o600)) // a host record
	return d
}

func export(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	skip := func(n string) bool { return strings.HasPrefix(n, ".") }
	if _, err := Write(context.Background(), &buf, Record{ID: "n1", Mode: "nsbox", UID: 1234}, []Tree{{Name: "data", Dir: dir, Skip: skip}}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func extract(b []byte, stage string) (Record, error) {
	return extractWith(b, stage, ExtractOptions{})
}

func extractWith(b []byte, stage string, o ExtractOptions) (Record, error) {
	ar, err := Open(bytes.NewReader(b))
	if err != nil {
		return Record{}, err
	}
	defer ar.Close()
	_, err = ar.Extract(context.Background(), stage, o)
	return ar.Record(), err
}

// describe lists a tree: each path's type, mode, size, link target,
// times, data and extended attributes (a hard link shares its inode).
func describe(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		unix.Lstat(p, &st)
		s := strings.Join([]string{d.Type().String(), fs.FileMode(st.Mode & 0o7777).String()}, " ")
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			s += " " + hex.EncodeToString(sum[:8]) + " " + time.Unix(st.Mtim.Unix()).UTC().String()
			if first, ok := inodes[st.Ino]; ok {
				s += " link of " + first
			}
			inodes[st.Ino] = rel
			v := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, "user.note", v); err == nil {
				s += " xattr " + string(v[:n])
			}
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			s += " -> " + l
		case unix.S_IFDIR:
			if rel != "." {
				s += " " + time.Unix(st.Mtim.Unix()).UTC().String()
			}
		}
		out[rel] = s
		return nil
	})
	return out
}

// An export read back is the tree it was made of: contents, modes,
// symlinks, hard links, FIFOs, empty directories, times, extended
// attributes and holes; host records are left out.
func TestRoundTrip(t *testing.T) {
	src := tree(t)
	b := export(t, src)
	stage := t.TempDir()
	rec, err := extract(b, stage)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != "n1" || rec.Mode != "nsbox" || rec.UID != 1234 || rec.Version != Version {
		t.Fatalf("record %+v", rec)
	}
	want, got := describe(t, src), describe(t, filepath.Join(stage, "data"))
	delete(want, ".neuron.json")
	delete(want, ".") // the data root's own mode and time are the neuron's directory's
	delete(got, ".")
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: not in the source", p)
		}
	}
	var st unix.Stat_t
	unix.Stat(filepath.Join(stage, "data/sparse.img"), &st)
	if st.Size != 64<<20 || st.Blocks*512 > 1<<20 {
		t.Errorf("the sparse file: %d bytes, %d allocated", st.Size, st.Blocks*512)
	}
	if len(b) > 64<<10 {
		t.Errorf("the archive of a 64 MiB sparse file takes %d bytes", len(b))
	}
}

// rawArchive builds an archive from headers and bodies, with a record
// and a manifest made to match (or not: manifest edits it).
func rawArchive(t testing.TB, entries []rawEntry, manifest func(*Manifest)) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(enc)
	rec, _ := json.Marshal(Record{Version: Version, ID: "x", Mode: "process"})
	sum := sha256.Sum256(rec)
	m := Manifest{Version: Version, Record: hex.EncodeToString(sum[:])}
	tw.WriteHeader(&tar.Header{Name: RecordName, Mode: 0o600, Size: int64(len(rec)), Typeflag: tar.TypeReg})
	tw.Write(rec)
	for _, e := range entries {
		h := e.h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		tw.WriteHeader(&h)
		tw.Write(e.body)
		me := Entry{Path: strings.TrimSuffix(h.Name, "/"), Link: h.Linkname}
		switch h.Typeflag {
		case tar.TypeDir:
			me.Type, me.Path, me.Link = "dir", strings.TrimSuffix(h.Name, "/")+"/", ""
		case tar.TypeReg:
			s := sha256.Sum256(e.body)
			me.Type, me.Size, me.SHA256 = "file", int64(len(e.body)), hex.EncodeToString(s[:])
		case tar.TypeSymlink:
			me.Type = "symlink"
		case tar.TypeLink:
			me.Type = "link"
		}
		m.Entries = append(m.Entries, me)
	}
	if manifest != nil {
		manifest(&m)
	}
	mb, _ := json.Marshal(m)
	tw.WriteHeader(&tar.Header{Name: ManifestName, Mode: 0o600, Size: int64(len(mb)), Typeflag: tar.TypeReg})
	tw.Write(mb)
	tw.Close()
	enc.Close()
	return buf.Bytes()
}

type rawEntry struct {
	h    tar.Header
	body []byte
}

func dir(n string) rawEntry {
	return rawEntry{h: tar.Header{Name: n + "/", Typeflag: tar.TypeDir, Mode: 0o755}}
}
func file(n, body string) rawEntry {
	return rawEntry{h: tar.Header{Name: n, Typeflag: tar.TypeReg}, body: []byte(body)}
}
func symlink(n, to string) rawEntry {
	return rawEntry{h: tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: to}}
}

// Archives that would write outside the staging directory, or anything
// but a neuron's kinds of files, are refused with the entry named, and
// nothing lands outside.
func TestHostileArchives(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	for name, tc := range map[string]struct {
		entries []rawEntry
		want    string
	}{
		"dot-dot":            {[]rawEntry{dir("data"), file("data/../../victim", "x")}, `"data/../../victim"`},
		"absolute":           {[]rawEntry{dir("data"), file(victim, "x")}, "absolute"},
		"outside data":       {[]rawEntry{dir("data"), file("etc/passwd", "x")}, "outside data/"},
		"through a symlink":  {[]rawEntry{dir("data"), symlink("data/out", outside), file("data/out/victim", "x")}, "never through a link"},
		"symlink climbs out": {[]rawEntry{dir("data"), symlink("data/up", "../../../victim")}, "out of the neuron's tree"},
		"hard link out":      {[]rawEntry{dir("data"), {h: tar.Header{Name: "data/h", Typeflag: tar.TypeLink, Linkname: victim}}}, "hard link"},
		"hard link to a dir": {[]rawEntry{dir("data"), dir("data/d"), {h: tar.Header{Name: "data/h", Typeflag: tar.TypeLink, Linkname: "data/d"}}}, "hard link"},
		"device node":        {[]rawEntry{dir("data"), {h: tar.Header{Name: "data/sda", Typeflag: tar.TypeBlock, Devmajor: 8}}}, "never taken"},
		"char device":        {[]rawEntry{dir("data"), {h: tar.Header{Name: "data/mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}}}, "device node (1:1)"},
		"twice":              {[]rawEntry{dir("data"), file("data/a", "1"), file("data/a", "2")}, "second entry"},
		"no parent":          {[]rawEntry{file("data/a", "1")}, "never through a link"},
		"data a link":        {[]rawEntry{symlink("data", outside)}, "data/ is not a directory"},
		"data a relative link": {[]rawEntry{dir("snapshots"), dir("snapshots/s"), dir("snapshots/s/data"), symlink("data", "snapshots/s/data")},
			"data/ is not a directory"},
		"snapshots a link": {[]rawEntry{dir("data"), symlink("snapshots", outside)}, "snapshots/ is not a directory"},
	} {
		t.Run(name, func(t *testing.T) {
			stage := t.TempDir()
			_, err := extract(rawArchive(t, tc.entries, nil), stage)
			if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want ErrBad saying %q", err, tc.want)
			}
			if _, err := os.Lstat(victim); err == nil {
				t.Fatal("an entry was written outside the stage")
			}
		})
	}
}

// A small archive cannot make the reader hold gigabytes until its
// manifest: directories whose headers carry a megabyte of extended
// records each are refused past maxKept, before the manifest is read.
func TestHeadersAreBounded(t *testing.T) {
	pad := strings.Repeat("x", 1<<20-100)
	entries := []rawEntry{dir("data")}
	for i := range maxKept>>20 + 4 {
		d := dir(fmt.Sprintf("data/d%03d", i))
		d.h.PAXRecords = map[string]string{"NSYS.pad": pad}
		entries = append(entries, d)
	}
	_, err := extract(rawArchive(t, entries, nil), t.TempDir())
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "directory headers hold more than 64 MiB") {
		t.Fatalf("%v, want ErrTooLarge", err)
	}
}

// A damaged or altered archive is refused, naming the first bad entry.
func TestAlteredArchives(t *testing.T) {
	good := []rawEntry{dir("data"), file("data/a", "one"), file("data/b", "two")}
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"a file's data changed": {rawArchive(t, good, func(m *Manifest) { m.Entries[2].SHA256 = strings.Repeat("0", 64) }), `entry "data/b"`},
		"an entry left out":     {rawArchive(t, good, func(m *Manifest) { m.Entries = append(m.Entries, Entry{Path: "data/c", Type: "file"}) }), `"data/c" of the manifest is missing`},
		"an entry slipped in":   {rawArchive(t, good, func(m *Manifest) { m.Entries = m.Entries[:2] }), `"data/b" is not in the manifest`},
		"the record changed":    {rawArchive(t, good, func(m *Manifest) { m.Record = "x" }), "record"},
		"no manifest":           {truncateAt(t, rawArchive(t, good, nil), ManifestName), "truncated"},
		"not zstd":              {[]byte("hello, world"), "zstd"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := extract(tc.b, t.TempDir())
			if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want ErrBad saying %q", err, tc.want)
			}
		})
	}
	if _, err := extract(rawArchive(t, good, nil), t.TempDir()); err != nil {
		t.Fatalf("the unaltered archive: %v", err)
	}
	big := rawArchive(t, []rawEntry{dir("data"), file("data/a", strings.Repeat("x", 5000))}, nil)
	if _, err := extractWith(big, t.TempDir(), ExtractOptions{MaxBytes: 4096}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past MaxBytes: %v", err)
	}
}

// truncateAt returns the archive cut where entry name begins (decompressed,
// cut, compressed again: a download that stopped there).
func truncateAt(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	// A decoder for DecodeAll only: one made over a reader also starts a
	// stream decode of it, and DecodeAll then waited forever for the
	// decoder that stream held (a CI run hung 15 minutes here).
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(name))
	if i < 0 {
		t.Fatalf("no %s in the archive", name)
	}
	enc, _ := zstd.NewWriter(nil)
	return enc.EncodeAll(raw[:i-i%512], nil)
}

// FuzzExtract: whatever the bytes, Extract returns (an error or not),
// and nothing is written outside its stage.
func FuzzExtract(f *testing.F) {
	f.Add(rawArchive(f, []rawEntry{dir("data"), file("data/a", "one"), symlink("data/l", "a")}, nil))
	f.Add(rawArchive(f, []rawEntry{dir("data"), file("data/../x", "one")}, nil))
	outside := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		stage := filepath.Join(parent, "stage")
		os.Mkdir(stage, 0o700)
		extractWith(b, stage, ExtractOptions{MaxBytes: 1 << 20, MaxEntries: 1000})
		entries, _ := os.ReadDir(parent)
		if len(entries) != 1 {
			t.Fatalf("the extract wrote beside its stage: %v", entries)
		}
		if left, _ := os.ReadDir(outside); len(left) != 0 {
			t.Fatalf("the extract wrote outside: %v", left)
		}
	})
}

// Grant is asked before the extraction takes more of the disk than it
// granted: each entry's inode and block (and its extended attributes),
// the blocks its ranges fill only partly, and the data as it is written.
// What it refuses ends the extraction with its own error, not as a bad
// archive.
func TestGrant(t *testing.T) {
	b := rawArchive(t, []rawEntry{dir("data"), file("data/a", strings.Repeat("x", 3000)), file("data/b", strings.Repeat("y", 3000))}, nil)
	var asked [][2]int64
	exact := func(charged, need int64) (int64, error) {
		asked = append(asked, [2]int64{charged, need})
		return need, nil
	}
	if _, err := extractWith(b, t.TempDir(), ExtractOptions{Grant: exact}); err != nil {
		t.Fatal(err)
	}
	// A directory (a block), two files (an inode each) of 3000 bytes in
	// a block of 4096 each.
	if last, want := asked[len(asked)-1][1], int64(blockCost+2*inodeCost+2*4096); last != want {
		t.Fatalf("charged %d in all (%v), want %d", last, asked, want)
	}
	for i := 1; i < len(asked); i++ {
		if asked[i][0] != asked[i-1][1] || asked[i][1] <= asked[i][0] {
			t.Fatalf("asks %v: each from what the one before granted, for more", asked)
		}
	}
	// A grant with room to spare is not asked again until it is used.
	asked = nil
	if _, err := extractWith(b, t.TempDir(), ExtractOptions{Grant: func(charged, need int64) (int64, error) {
		asked = append(asked, [2]int64{charged, need})
		return need + 1<<20, nil
	}}); err != nil || len(asked) != 1 {
		t.Fatalf("a grant of a megabyte more: %v, asked %v", err, asked)
	}
	refusal := errors.New("no room for it")
	_, err := extractWith(b, t.TempDir(), ExtractOptions{Grant: func(charged, need int64) (int64, error) {
		if charged >= blockCost {
			return 0, refusal
		}
		return need, nil
	}})
	if !errors.Is(err, refusal) || errors.Is(err, ErrBad) || !strings.Contains(err.Error(), `"data/a"`) {
		t.Fatalf("a refused grant: %v, want the refusal, at data/a", err)
	}
	_, err = extractWith(b, t.TempDir(), ExtractOptions{Grant: func(charged, need int64) (int64, error) { return need - 1, nil }})
	if err == nil {
		t.Fatal("a grant short of the need was taken")
	}
	for _, tc := range [][3]int64{{0, 0, 0}, {0, 1, 4096}, {0, 4096, 4096}, {4095, 2, 8192}, {8192, 4097, 8192},
		{math.MaxInt64 - 10, 5, 4096 - 11 + 5}, {math.MaxInt64 - 5, 5, 4095}} { // near the largest offset: no overflow, never negative
		if got := blockSpan(tc[0], tc[1]); got != tc[2] {
			t.Errorf("blockSpan(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
}

// An archive of little data and much metadata (the reviewer's probe:
// thousands of empty directories and files with extended attributes,
// 20,000 bytes of data for 157 MiB of disk) is charged for its entries,
// not only for its data.
func TestGrantChargesMetadata(t *testing.T) {
	entries := []rawEntry{dir("data")}
	for i := range 300 {
		entries = append(entries, dir(fmt.Sprintf("data/d%d", i)))
	}
	for i := range 100 {
		f := file(fmt.Sprintf("data/f%d", i), "x")
		f.h.PAXRecords = map[string]string{paxAttr + "user.pad": strings.Repeat("p", 3000)}
		entries = append(entries, f)
	}
	var charged int64
	if _, err := extractWith(rawArchive(t, entries, nil), t.TempDir(), ExtractOptions{Grant: func(_, need int64) (int64, error) {
		charged = need
		return need, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if want := int64(301)*blockCost + 100*(inodeCost+3000+4096); charged < want {
		t.Fatalf("charged %d for %d entries, want at least %d", charged, len(entries), want)
	}
	// EntryCost (the filesystem's bytes per inode) is charged where it is
	// more: the room granted bounds the inodes too.
	var perInode int64
	if _, err := extractWith(rawArchive(t, entries, nil), t.TempDir(), ExtractOptions{EntryCost: 16384, Grant: func(_, need int64) (int64, error) {
		perInode = need
		return need, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(entries)) * 16384; perInode < want {
		t.Fatalf("charged %d with 16 KiB an entry, want at least %d", perInode, want)
	}
}
