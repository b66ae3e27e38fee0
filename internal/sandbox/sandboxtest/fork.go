package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunForker runs the conformance suite of forks (sandbox.Forker) against
// a mode: its checks are the interface's doc comment, one by one.
func RunForker(t *testing.T, cfg Config) {
	if cfg.New == nil || cfg.Env == nil {
		t.Fatal("sandboxtest: Config needs New and Env")
	}
	t.Run("Fork", func(t *testing.T) { testFork(t, newFixture(t, cfg)) })
	t.Run("Refusals", func(t *testing.T) { testForkRefusals(t, newFixture(t, cfg)) })
	t.Run("SharesData", func(t *testing.T) { testForkShares(t, cfg) })
	t.Run("Room", func(t *testing.T) { testForkRoom(t, cfg) })
}

func (f *fixture) forker() (sandbox.Manager, sandbox.Forker) {
	f.t.Helper()
	m := f.manager()
	fk, ok := m.(sandbox.Forker)
	if !ok {
		f.t.Fatalf("%s mode's manager is no sandbox.Forker", m.Mode())
	}
	return m, fk
}

// A fork has its source's files at the fork's instant, its labels, and a
// record of where it came from; afterwards each side writes only its own
// files, the source runs on (not left paused), and a fork forks again.
// Whole-machine modes carry the running processes over too.
func testFork(t *testing.T, f *fixture) {
	m, fk := f.forker()
	opts := f.cfg.Options
	opts.Labels = labels.Set{"team": "a"}
	src0, err := m.Create(f.ctx, "src", opts)
	if err != nil {
		t.Fatal(err)
	}
	c := f.connect(m, "src")
	f.shell(c, "echo hello > f.txt && mkdir -p d/e && echo deep > d/e/g.txt && ln -s f.txt link && chmod 640 f.txt")
	_, whole := m.(sandbox.Snapshotter)
	if whole && f.cfg.NoGuestState == "" {
		// A counter the fork must find still counting.
		f.shell(c, "(i=0; while :; do i=$((i+1)); echo $i > ticks; sleep 0.05; done) >/dev/null 2>&1 &")
	}
	sts, err := fk.Fork(f.ctx, "src", []string{"kid1", "kid2"}, sandbox.ForkOptions{})
	if f.lacks("fork", err) {
		return
	}
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	f.lacksNothing("fork")
	if len(sts) != 2 || sts[0].ID != "kid1" || sts[1].ID != "kid2" {
		t.Fatalf("fork returned %+v", sts)
	}
	for _, id := range []string{"kid1", "kid2"} {
		st, err := m.Get(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != sandbox.StatusRunning || st.ForkedFrom != "src" || st.ForkedAt == nil || st.Labels["team"] != "a" {
			t.Fatalf("%s: status %s, forkedFrom %q at %v, labels %v", id, st.Status, st.ForkedFrom, st.ForkedAt, st.Labels)
		}
		if a, b := readFile(t, src0.OverlayPath+"/.channel"), readFile(t, st.OverlayPath+"/.channel"); a == "" || a == b {
			t.Fatalf("%s proves its source's channel secret (%q), not one of its own", id, b)
		}
		kc := f.connect(m, id)
		if got := f.shell(kc, "cat f.txt d/e/g.txt link; stat -c %a f.txt; readlink link"); got != "hello\ndeep\nhello\n640\nf.txt" {
			t.Fatalf("%s's files: %q", id, got)
		}
		// Its files are its own to write (a mode that runs each neuron as a
		// uid of its own gave them to the fork's).
		f.shell(kc, "echo "+id+" >> f.txt && echo mine > new.txt")
		if whole && f.cfg.NoGuestState == "" {
			before := f.ticks(kc)
			waittest.For(t, 30*time.Second, "the fork's copy of the counter to count on", func() bool { return f.ticks(kc) > before })
		}
	}
	src, err := m.Get(f.ctx, "src")
	if err != nil || src.Status != sandbox.StatusRunning || src.ForkedFrom != "" {
		t.Fatalf("the source after the fork: %+v, %v", src, err)
	}
	if got := f.shell(c, "cat f.txt; ls new.txt 2>&1 || true"); !strings.HasPrefix(got, "hello\n") || strings.Contains(got, "kid") || !strings.Contains(got, "No such file") {
		t.Fatalf("a fork's writes reached the source: %q", got)
	}
	k1 := f.connect(m, "kid1")
	if got := f.shell(k1, "cat f.txt"); got != "hello\nkid1" {
		t.Fatalf("kid2's writes reached kid1: %q", got)
	}
	// A fork is an ordinary neuron: it forks again, with labels of its own.
	sts, err = fk.Fork(f.ctx, "kid1", []string{"grandkid"}, sandbox.ForkOptions{Labels: labels.Set{"team": "b"}})
	if err != nil {
		t.Fatalf("fork of a fork: %v", err)
	}
	if sts[0].ForkedFrom != "kid1" || sts[0].Labels["team"] != "b" {
		t.Fatalf("fork of a fork: %+v", sts[0])
	}
	if got := f.shell(f.connect(m, "grandkid"), "cat f.txt new.txt"); got != "hello\nkid1\nmine" {
		t.Fatalf("the grandkid's files: %q", got)
	}
	// Wiping a fork leaves its source whole.
	if err := m.Destroy(f.ctx, "kid1", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if got := f.shell(f.connect(m, "grandkid"), "cat d/e/g.txt"); got != "deep" {
		t.Fatalf("the grandkid after its parent was wiped: %q", got)
	}
	// A stopped source forks too: its data is the fork's.
	if err := m.Destroy(f.ctx, "src", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fk.Fork(f.ctx, "src", []string{"late"}, sandbox.ForkOptions{}); err != nil {
		if !whole {
			t.Fatalf("fork of a stopped neuron: %v", err)
		}
		if !errdefs.IsNotRunning(err) {
			t.Fatalf("a whole-machine mode's fork of a stopped neuron: %v, want NOT_RUNNING", err)
		}
	} else if got := f.shell(f.connect(m, "late"), "cat f.txt"); got != "hello" {
		t.Fatalf("the fork of a stopped neuron: %q", got)
	}
}

// A fork never lands on an id that has data, nor on its source's own id,
// and a refused fork leaves nothing: not under the new id, not in the
// neuron that was there.
func testForkRefusals(t *testing.T, f *fixture) {
	if why, ok := f.cfg.Lacks["fork"]; ok {
		t.Skipf("the mode lacks fork: %s", why)
	}
	m, fk := f.forker()
	f.create(m, "src")
	f.create(m, "taken")
	f.shell(f.connect(m, "taken"), "echo precious > keep.txt")
	for _, tc := range []struct {
		dsts []string
		ok   func(error) bool
	}{
		{[]string{"taken"}, errdefs.IsExists},
		{[]string{"fresh", "taken"}, errdefs.IsExists},
		{[]string{"src"}, errdefs.IsInvalid},
		{[]string{"../x"}, errdefs.IsInvalid},
		{[]string{"twice", "twice"}, errdefs.IsInvalid},
		{nil, errdefs.IsInvalid},
	} {
		if _, err := fk.Fork(f.ctx, "src", tc.dsts, sandbox.ForkOptions{}); err == nil || !tc.ok(err) {
			t.Errorf("fork onto %q: %v", tc.dsts, err)
		}
	}
	if _, err := fk.Fork(f.ctx, "nobody", []string{"new"}, sandbox.ForkOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("fork of a neuron that does not exist: %v", err)
	}
	for _, id := range []string{"fresh", "twice", "new"} {
		if _, err := m.Get(f.ctx, id); !errors.As(err, new(*sandbox.NotFoundError)) {
			t.Errorf("a refused fork left %s: %v", id, err)
		}
	}
	if got := f.shell(f.connect(m, "taken"), "cat keep.txt"); got != "precious" {
		t.Fatalf("a refused fork touched the neuron in its way: %q", got)
	}
	// While a fork copies (or, for a microVM, saves and restores), no
	// other create (another process) starts a neuron on its new id: the
	// id is claimed, and locked until the fork's own neuron holds it.
	f.shell(f.connect(m, "src"), "mkdir many && cd many && i=0; while [ $i -lt 4000 ]; do echo $i > f$i; i=$((i+1)); done")
	other := f.manager()
	done := make(chan error, 1)
	go func() { _, err := fk.Fork(f.ctx, "src", []string{"racer"}, sandbox.ForkOptions{}); done <- err }()
	marker := filepath.Join(f.env.Layout.OverlayDir("racer"), ".forking")
	if _, whole := m.(sandbox.Snapshotter); whole {
		marker = filepath.Join(f.env.Layout.OverlayDir("racer"), ".mode") // its mark goes before the restore
	}
	waittest.For(t, 30*time.Second, "the fork to claim its id", func() bool {
		_, err := os.Stat(marker)
		select {
		case err := <-done:
			done <- err
			return true // it was faster than this look: nothing to race
		default:
		}
		return err == nil
	})
	if _, err := os.Stat(marker); err == nil {
		if _, err := other.Create(f.ctx, "racer", f.cfg.Options); err == nil {
			t.Fatal("a create started a neuron on the id a fork was copying into")
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the fork raced: %v", err)
	}
	if got := f.shell(f.connect(m, "racer"), "ls many | wc -l"); got != "4000" {
		t.Fatalf("the fork that was raced has %s files of 4000", got)
	}
	// A fork cut short (its process gone) leaves a mark: its partial data
	// is never started.
	dir := f.env.Layout.OverlayDir("cut")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ".mode"), []byte(m.Mode()+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, ".forking"), []byte(`{"src":"src","pid":2147483646,"pidStart":1}`), 0o600)
	if _, err := m.Create(f.ctx, "cut", f.cfg.Options); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a create of a fork cut short: %v", err)
	}
	if err := m.Destroy(f.ctx, "cut", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatalf("wiping a fork cut short: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// On a filesystem with reflinks a fork shares its source's data: a fork
// of a neuron holding 256 MiB takes next to nothing of the disk, and
// reads the same bytes. (A microVM's fork copies its disk image sparse.)
func testForkShares(t *testing.T, cfg Config) {
	mnt := XFSMount(t)
	f := newFixtureAt(t, cfg, filepath.Join(mnt, "h"))
	m, fk := f.forker()
	if _, whole := m.(sandbox.Snapshotter); whole {
		t.Skip("a microVM's fork copies its disk image, sparse, with its memory")
	}
	if _, ok := f.cfg.Lacks["fork"]; ok {
		t.Skip("the mode lacks fork")
	}
	c := f.connect(m, f.create(m, "big").ID)
	sum := f.shell(c, "dd if=/dev/urandom of=blob bs=1M count=256 2>/dev/null && sync && md5sum blob")
	unix.Sync()
	before := freeBytes(t, mnt)
	if _, err := fk.Fork(f.ctx, "big", []string{"twin"}, sandbox.ForkOptions{}); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	if used := before - freeBytes(t, mnt); used > 32<<20 {
		t.Fatalf("the fork took %d MiB of the disk for 256 MiB its source holds: the data was copied, not shared", used>>20)
	}
	if got := f.shell(f.connect(m, "twin"), "md5sum blob"); got != sum {
		t.Fatalf("the fork's blob: %q, the source's %q", got, sum)
	}
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * s.Bsize
}

// Forks that would not fit where neurons are kept (keeping 5% and 1 GiB
// free) are refused before anything is paused or made, and say how much
// they need; forks that fit are made.
func testForkRoom(t *testing.T, cfg Config) {
	mnt := Ext4Mount(t, 1800<<20)
	f := newFixtureAt(t, cfg, filepath.Join(mnt, "h"))
	m, fk := f.forker()
	if _, whole := m.(sandbox.Snapshotter); whole {
		t.Skip("a microVM's fork is a restore of its snapshot")
	}
	if _, ok := f.cfg.Lacks["fork"]; ok {
		t.Skip("the mode lacks fork")
	}
	c := f.connect(m, f.create(m, "big").ID)
	f.shell(c, "dd if=/dev/urandom of=blob bs=1M count=200 2>/dev/null && sync")
	_, err := fk.Fork(f.ctx, "big", []string{"a", "b", "c"}, sandbox.ForkOptions{})
	if !errdefs.IsCapacity(err) || !strings.Contains(err.Error(), "MiB") {
		t.Fatalf("3 forks of 200 MiB with about 500 MiB of room: %v, want CAPACITY", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := os.Lstat(f.env.Layout.OverlayDir(id)); err == nil {
			t.Fatalf("a refused fork left %s", id)
		}
	}
	if st, _ := m.Get(f.ctx, "big"); st.Status != sandbox.StatusRunning {
		t.Fatalf("the source after a refused fork: %s", st.Status)
	}
	if _, err := fk.Fork(f.ctx, "big", []string{"one"}, sandbox.ForkOptions{}); err != nil {
		t.Fatalf("one fork that fits: %v", err)
	}
}
