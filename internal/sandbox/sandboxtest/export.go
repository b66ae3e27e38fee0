package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/archive"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunExporter runs the conformance suite of export and import
// (sandbox.Exporter) against a mode: a running neuron exported (and left
// running) is imported under a new id with the same data — contents,
// modes, symlinks, empty directories and times, walked on both sides —
// and its labels; it starts and serves its files; a damaged archive is
// refused and leaves nothing.
func RunExporter(t *testing.T, cfg Config) {
	f := newFixture(t, cfg)
	m := f.manager()
	ex, ok := m.(sandbox.Exporter)
	if !ok {
		t.Fatalf("%s mode's manager is no sandbox.Exporter", m.Mode())
	}
	opts := f.cfg.Options
	opts.Labels = labels.Set{"team": "a"}
	src, err := m.Create(f.ctx, "src", opts)
	if err != nil {
		t.Fatal(err)
	}
	c := f.connect(m, "src")
	f.shell(c, "mkdir -p d/empty && echo hello > d/f.txt && chmod 640 d/f.txt && ln -s f.txt d/link && "+
		"touch -d '2021-02-03 04:05:06' d/f.txt && dd if=/dev/zero of=zeros bs=1k count=256 2>/dev/null && sync")
	var buf bytes.Buffer
	start := time.Now()
	stats, err := ex.Export(f.ctx, "src", &buf, sandbox.ExportOptions{})
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	t.Logf("exported %d files, %d bytes of data, in %d bytes, in %s", stats.Files, stats.Bytes, buf.Len(), time.Since(start))
	if stats.Files == 0 {
		t.Fatalf("export stats %+v", stats)
	}
	if st, _ := m.Get(f.ctx, "src"); st.Status != sandbox.StatusRunning {
		t.Fatalf("the source after its export: %s, want running (paused for the copy only)", st.Status)
	}
	// The host's view of the data, with the neuron stopped, beside the
	// import's.
	if err := m.Destroy(f.ctx, "src", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	// The set of one mode, over the manager at hand.
	set := sandbox.NewSet(f.env, sandbox.Backend{Name: m.Mode(), Isolating: true, New: func(sandbox.Env) (sandbox.Manager, error) { return m, nil }})
	start = time.Now()
	imp, err := set.Import(f.ctx, bytes.NewReader(buf.Bytes()), "copy", nil)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	t.Logf("imported in %s", time.Since(start))
	if imp.ID != "copy" || imp.Status != sandbox.StatusStopped || imp.Labels["team"] != "a" {
		t.Fatalf("the import: %+v", imp)
	}
	want, got := walk(t, dataOf(t, m, f, "src")), walk(t, dataOf(t, m, f, "copy"))
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: imported %q, exported %q", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: in the import, not in the source", p)
		}
	}
	if _, err := m.Create(f.ctx, "copy", f.cfg.Options); err != nil {
		t.Fatalf("starting the import: %v", err)
	}
	if got := f.shell(f.connect(m, "copy"), "cat d/f.txt d/link; stat -c %a d/f.txt; ls -d d/empty; echo more >> d/f.txt"); got != "hello\nhello\n640\nd/empty" {
		t.Fatalf("the imported neuron's files: %q", got)
	}
	// An id with data is refused; so is a damaged archive, leaving nothing.
	if _, err := set.Import(f.ctx, bytes.NewReader(buf.Bytes()), "copy", nil); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("an import onto a neuron: %v", err)
	}
	bad := append([]byte{}, buf.Bytes()...)
	bad = bad[:len(bad)*2/3]
	if _, err := set.Import(f.ctx, bytes.NewReader(bad), "broken", nil); err == nil {
		t.Fatal("a truncated archive was imported")
	}
	if _, err := m.Get(f.ctx, "broken"); err == nil {
		t.Fatal("a refused import left a neuron")
	}
	if _, err := os.Lstat(f.env.Layout.OverlayDir("broken")); err == nil {
		t.Fatal("a refused import left its directory")
	}
	if src.ID != "src" {
		t.Fatalf("created %+v", src)
	}
	// An import reserves its share of the room where neurons are kept,
	// measured under a lock it holds for that only (an upload may be
	// slow: nothing waits for one): while another holds it, an import
	// waits, and one whose context ends meanwhile says so and leaves
	// nothing. What an import or a fork in flight (a live process's
	// .forking record) reserved is not room for the next; a record of a
	// process that is gone reserves nothing.
	turn := store.NewLock(filepath.Join(f.env.Layout.Overlays, ".room.lock"))
	if ok, err := turn.TryExclusive(); !ok || err != nil {
		t.Fatalf("taking the room lock: %v %v", ok, err)
	}
	wctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	_, err = set.Import(wctx, bytes.NewReader(buf.Bytes()), "waited", nil)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "waiting to measure the room") {
		t.Errorf("an import while the room lock is held: %v, want it to wait until its context ends", err)
	}
	if _, err := os.Lstat(f.env.Layout.OverlayDir("waited")); err == nil {
		t.Error("an import that waited for the room lock left its directory")
	}
	turn.Release()
	reserver := f.env.Layout.OverlayDir("reserver")
	os.MkdirAll(reserver, 0o700)
	myStart, _ := store.ProcStart(os.Getpid())
	for _, tc := range []struct {
		start   uint64
		refused bool
	}{{myStart, true}, {myStart + 1, false}} {
		rec, _ := json.Marshal(map[string]any{"src": "an import of x", "pid": os.Getpid(), "pidStart": tc.start, "reserve": int64(1) << 62})
		os.WriteFile(filepath.Join(reserver, ".forking"), rec, 0o600)
		_, err = set.Import(f.ctx, bytes.NewReader(buf.Bytes()), "waited", nil)
		if tc.refused {
			if !errors.As(err, new(*sandbox.CapacityError)) || !strings.Contains(err.Error(), "reserved by imports and forks in flight") {
				t.Errorf("an import with the room reserved by another in flight: %v, want CAPACITY naming the reservation", err)
			}
			if _, err := os.Lstat(f.env.Layout.OverlayDir("waited")); err == nil {
				t.Error("an import refused for want of room left its directory")
			}
		} else if err != nil {
			t.Errorf("an import beside the record of a process that is gone: %v", err)
		}
	}
	os.RemoveAll(reserver)
	// Uploads that stall after their first data (an attacker's trickle)
	// reserve a step each, not the room they might come to fill: an
	// import beside them runs, and each, cut off, leaves nothing.
	stallDir := t.TempDir()
	noise := make([]byte, 8<<20)
	rand.Read(noise)
	os.WriteFile(filepath.Join(stallDir, "noise"), noise, 0o644)
	var stallAr bytes.Buffer
	if _, err := archive.Write(f.ctx, &stallAr, archive.Record{ID: "stall", Mode: m.Mode()}, []archive.Tree{{Name: "data", Dir: stallDir}}); err != nil {
		t.Fatal(err)
	}
	const stalled = 4
	var pws []*io.PipeWriter
	stallErrs := make(chan error, stalled)
	for i := range stalled {
		pr, pw := io.Pipe()
		pws = append(pws, pw)
		go func() {
			_, err := set.Import(f.ctx, pr, fmt.Sprintf("stalled%d", i), nil)
			stallErrs <- err
		}()
		go pw.Write(stallAr.Bytes()[:stallAr.Len()/2])
	}
	reservation := func(id string) int64 {
		var rec struct{ Reserve int64 }
		b, err := os.ReadFile(filepath.Join(f.env.Layout.OverlayDir(id), ".forking"))
		if err != nil || json.Unmarshal(b, &rec) != nil {
			return 0
		}
		return rec.Reserve
	}
	if !waittest.Until(time.Minute, func() bool {
		for i := range stalled {
			if reservation(fmt.Sprintf("stalled%d", i)) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the stalled imports reserved nothing within a minute")
	}
	for i := range stalled {
		if r := reservation(fmt.Sprintf("stalled%d", i)); r > 2*(64<<20+8<<20) {
			t.Errorf("a stalled import reserved %d MiB, past a step", r>>20)
		}
	}
	if _, err := set.Import(f.ctx, bytes.NewReader(buf.Bytes()), "beside", nil); err != nil {
		t.Errorf("an import beside %d stalled ones: %v", stalled, err)
	} else if err := m.Destroy(f.ctx, "beside", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	for _, pw := range pws {
		pw.CloseWithError(errors.New("the uploader went away"))
	}
	for range stalled {
		if err := <-stallErrs; err == nil {
			t.Error("a stalled import cut off was made")
		}
	}
	for i := range stalled {
		if _, err := os.Lstat(f.env.Layout.OverlayDir(fmt.Sprintf("stalled%d", i))); err == nil {
			t.Errorf("stalled import %d, cut off, left its directory", i)
		}
	}
	if err := m.Destroy(f.ctx, "waited", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}

	// Archives made to have the host act on what they hold (an export
	// holds none of it): the host's records planted (a mark naming
	// another mode, a state file naming this test's process as the
	// neuron's agent) are left behind; a symbolic link where the host
	// keeps its own files (which it opens by name), and snapshots (whose
	// records a restore trusts), are refused, leaving nothing.
	plant := func(t *testing.T, rec archive.Record, files func(dir string)) *bytes.Buffer {
		t.Helper()
		dir := t.TempDir()
		files(dir)
		var b bytes.Buffer
		if _, err := archive.Write(f.ctx, &b, rec, []archive.Tree{{Name: "data", Dir: dir}}); err != nil {
			t.Fatal(err)
		}
		return &b
	}
	other := "docker"
	if m.Mode() == other {
		other = "nsbox"
	}
	pidStart, _ := store.ProcStart(os.Getpid())
	forged, _ := json.Marshal(sandbox.State{ID: "planted", Mode: m.Mode(), Status: sandbox.StatusRunning, PID: os.Getpid(), PIDStart: pidStart})
	records := plant(t, archive.Record{ID: "planted", Mode: m.Mode()}, func(dir string) {
		os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("data\n"), 0o644)
		os.WriteFile(filepath.Join(dir, ".mode"), []byte(other+"\n"), 0o600)
		os.WriteFile(filepath.Join(dir, ".neuron.json"), forged, 0o600)
	})
	st, err := set.Import(f.ctx, records, "planted", nil)
	if err != nil {
		t.Fatalf("an import with planted records: %v", err)
	}
	if st.Status == sandbox.StatusRunning || st.PID == os.Getpid() {
		t.Errorf("the planted state file was taken: %+v", st)
	}
	if got := sandbox.OverlayMode(f.env.Layout, "planted"); got != m.Mode() {
		t.Errorf("the planted neuron's mark: %q, want %q", got, m.Mode())
	}
	if b, err := os.ReadFile(filepath.Join(dataOf(t, m, f, "planted"), "kept.txt")); err != nil || string(b) != "data\n" {
		t.Errorf("the planted archive's data: %q %v", b, err)
	}
	if err := m.Destroy(f.ctx, "planted", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	for name, ar := range map[string]*bytes.Buffer{
		"a link where the host's files are": plant(t, archive.Record{ID: "linked", Mode: m.Mode()}, func(dir string) {
			os.Symlink("/", filepath.Join(dir, "planted-link"))
		}),
		"snapshots": plant(t, archive.Record{ID: "linked", Mode: m.Mode(), Snapshots: []string{"s1"}}, func(dir string) {
			os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("data\n"), 0o644)
		}),
		"a record naming no neuron": plant(t, archive.Record{ID: "../" + strings.Repeat("x", 300), Mode: m.Mode()}, func(dir string) {
			os.WriteFile(filepath.Join(dir, "kept.txt"), []byte("data\n"), 0o644)
		}),
	} {
		_, err := set.Import(f.ctx, ar, "linked", nil)
		want := map[string]string{"snapshots": "snapshots (s1)", "a record naming no neuron": "names no neuron"}[name]
		if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("an import of an archive with %s: %v, want it refused", name, err)
		}
		if _, err := os.Lstat(f.env.Layout.OverlayDir("linked")); err == nil {
			t.Errorf("a refused import (%s) left its directory", name)
		}
	}
}

// RunExporterDisk: a neuron with a disk of its own is exported and
// imported onto a disk of the same ceiling, its data moved there from the
// import's staging directory (another filesystem); where no disk can be
// had, the mode refuses the ceiling and the test says so.
func RunExporterDisk(t *testing.T, cfg Config) {
	f := newFixture(t, cfg)
	m := f.manager()
	ex := m.(sandbox.Exporter)
	opts := f.cfg.Options
	opts.Limits.DiskBytes = 64 << 20
	if _, err := m.Create(f.ctx, "disky", opts); err != nil {
		if errors.As(err, new(*sandbox.UnenforceableError)) {
			t.Skipf("no disk of its own here: %v", err)
		}
		t.Fatal(err)
	}
	f.shell(f.connect(m, "disky"), "mkdir -p d && echo on-disk > d/f.txt")
	var buf bytes.Buffer
	if _, err := ex.Export(f.ctx, "disky", &buf, sandbox.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	set := sandbox.NewSet(f.env, sandbox.Backend{Name: m.Mode(), Isolating: true, New: func(sandbox.Env) (sandbox.Manager, error) { return m, nil }})
	if _, err := set.Import(f.ctx, bytes.NewReader(buf.Bytes()), "disky2", nil); err != nil {
		t.Fatalf("import onto a disk: %v", err)
	}
	if err := m.Destroy(f.ctx, "disky", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	want, got := walk(t, dataOf(t, m, f, "disky")), walk(t, dataOf(t, m, f, "disky2"))
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: imported %q, exported %q", p, got[p], w)
		}
	}
	st, err := m.Create(f.ctx, "disky2", opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy == nil || st.Policy.Limits.DiskBytes != 64<<20 {
		t.Fatalf("the import's disk: %+v", st.Policy)
	}
	if got := f.shell(f.connect(m, "disky2"), "cat d/f.txt"); got != "on-disk" {
		t.Fatalf("the import's file: %q", got)
	}
}

// dataOf is where neuron id's data is on the host.
func dataOf(t *testing.T, m sandbox.Manager, f *fixture, id string) string {
	t.Helper()
	if dr, ok := m.(sandbox.DataRooter); ok {
		root, err := dr.DataRoot(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return root
	}
	return f.env.Layout.OverlayDir(id)
}

// walk describes a neuron's data tree as an export keeps it: each path's
// type, mode, size, times, contents and link target; the host's records
// are left out, and owners (an import gives files to its new neuron).
func walk(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if top, _, _ := strings.Cut(rel, string(filepath.Separator)); store.HostRecord(top) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := d.Type().String() + " " + fs.FileMode(st.Mode&0o7777).String() + " " + time.Unix(st.Mtim.Unix()).UTC().Format(time.RFC3339Nano)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			sum, err := sparseSum(p, st.Size)
			if err != nil {
				return err
			}
			s += fmt.Sprintf(" %d %s", st.Size, sum)
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			s += " -> " + l
		case unix.S_IFDIR:
			s = strings.Replace(s, " "+time.Unix(st.Mtim.Unix()).UTC().Format(time.RFC3339Nano), "", 1) // a start writes in some
		}
		out[rel] = s
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sparseSum hashes a file's data ranges and where they are (a VM's disk is
// large and mostly holes: it is never read whole, and an import that
// filled its holes would not hash the same).
func sparseSum(p string, size int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	for _, r := range store.DataRanges(int(f.Fd()), size) {
		fmt.Fprintf(h, "%d+%d:", r[0], r[1])
		if _, err := io.Copy(h, io.NewSectionReader(f, r[0], r[1])); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}
