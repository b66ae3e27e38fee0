package store

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A reader never sees a half-written file, however the writes interleave.
func TestWriteJSONIsAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	type rec struct {
		N    int
		Fill string
	}
	if err := WriteJSON(p, rec{0, strings.Repeat("x", 100000)}, 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad error
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var r rec
			if err := ReadJSON(p, &r); err != nil || len(r.Fill) != 100000 {
				mu.Lock()
				bad = errors.Join(bad, err)
				mu.Unlock()
			}
		}
	}()
	for i := 1; i < 300; i++ {
		if err := WriteJSON(p, rec{i, strings.Repeat(string(rune('a'+i%26)), 100000)}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatalf("a reader saw a partial file: %v", bad)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
}

func TestReadJSONErrors(t *testing.T) {
	d := t.TempDir()
	var v map[string]any
	if err := ReadJSON(filepath.Join(d, "missing"), &v); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%v", err)
	}
	os.WriteFile(filepath.Join(d, "bad"), []byte("{half"), 0o600)
	if err := ReadJSON(filepath.Join(d, "bad"), &v); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("%v", err)
	}
}

func TestLockSharedAndExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, b, c := NewLock(p), NewLock(p), NewLock(p)
	defer a.Release()
	defer b.Release()
	defer c.Release()
	mustGet := func(got bool, err error, want bool, what string) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: %v %v, want %v", what, got, err, want)
		}
	}
	ok, err := a.TryShared()
	mustGet(ok, err, true, "a shared")
	ok, err = b.TryShared()
	mustGet(ok, err, true, "b shared beside a")
	ok, err = c.TryExclusive()
	mustGet(ok, err, false, "c exclusive while shared")
	a.Release()
	b.Release()
	ok, err = c.TryExclusive()
	mustGet(ok, err, true, "c exclusive when free")
	ok, err = a.TryShared()
	mustGet(ok, err, false, "a shared while exclusive")
	// A failed upgrade keeps the shared lock it started from.
	c.Release()
	ok, err = a.TryShared()
	mustGet(ok, err, true, "a shared again")
	ok, err = b.TryShared()
	mustGet(ok, err, true, "b shared again")
	ok, err = a.TryExclusive()
	mustGet(ok, err, false, "a upgrade beside b")
	ok, err = c.TryExclusive()
	mustGet(ok, err, false, "c exclusive: a must still hold its shared lock")
	b.Release()
	ok, err = c.TryExclusive()
	mustGet(ok, err, false, "c exclusive: a still shares")
	a.Release()
	ok, err = c.TryExclusive()
	mustGet(ok, err, true, "c exclusive at last")
	// Wiping the file under a holder: a new lock on the new file must not
	// be fooled by the old inode.
	os.Remove(p)
	ok, err = a.TryExclusive()
	mustGet(ok, err, true, "a on the new file")
}

// The kernel drops a lock when its holder dies.
func TestLockDiesWithItsHolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	cmd := exec.Command("flock", "-x", p, "sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("flock(1) unavailable: %v", err)
	}
	l := NewLock(p)
	defer l.Release()
	held := func() bool {
		ok, _ := l.TryShared()
		if ok {
			l.Release()
		}
		return !ok // the child holds it
	}
	if !waittest.Until(30*time.Second, held) {
		t.Fatal("the child never took the lock")
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // flock and the sleep that inherited its descriptor
	cmd.Wait()
	// The sleep is not our child: its exit (and the lock's release) follows
	// the SIGKILL asynchronously.
	released := func() bool {
		ok, err := l.TryExclusive()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !waittest.Until(30*time.Second, released) {
		t.Fatal("lock not released by its dead holder")
	}
}

func TestProcStartAndAlive(t *testing.T) {
	start, ok := ProcStart(os.Getpid())
	if !ok || start == 0 {
		t.Fatal("own process")
	}
	if !Alive(os.Getpid(), start) || Alive(os.Getpid(), start+1) {
		t.Fatal("start time must identify the process")
	}
	cmd := exec.Command("true")
	cmd.Start()
	pid := cmd.Process.Pid
	// Wait for it to exit without reaping it: a zombie until cmd.Wait.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := ProcStart(pid); ok {
		t.Fatal("a zombie counts as alive")
	}
	cmd.Wait()
	if Alive(0, 0) || Alive(-1, 0) {
		t.Fatal("bad pids")
	}
}

func TestFlagValue(t *testing.T) {
	argv := []string{"/x/cortex-agent", "--id", "demo", "-channel-dir=/h/sockets/demo", "--root"}
	if flagValue(argv, "id") != "demo" || flagValue(argv, "channel-dir") != "/h/sockets/demo" || flagValue(argv, "root") != "" {
		t.Fatal(argv)
	}
}

func TestAgentBinary(t *testing.T) {
	d := t.TempDir()
	t.Setenv(EnvAgentBin, "")
	// Embedded: unpacked once by content hash, executable.
	p, err := AgentBinary(filepath.Join(d, "bin"), []byte("#!/bin/sh\necho agent\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o755 || !strings.HasPrefix(filepath.Base(p), "cortex-agent-") {
		t.Fatalf("%s %v %v", p, st, err)
	}
	p2, _ := AgentBinary(filepath.Join(d, "bin"), []byte("#!/bin/sh\necho agent\n"))
	p3, _ := AgentBinary(filepath.Join(d, "bin"), []byte("#!/bin/sh\necho other\n"))
	if p2 != p || p3 == p {
		t.Fatalf("content addressing: %s %s %s", p, p2, p3)
	}
	// The environment wins, and a bad one is a clear error.
	t.Setenv(EnvAgentBin, filepath.Join(d, "nope"))
	if _, err := AgentBinary(d, []byte("x")); err == nil || !strings.Contains(err.Error(), EnvAgentBin) {
		t.Fatalf("%v", err)
	}
	os.WriteFile(filepath.Join(d, "noexec"), []byte("x"), 0o644)
	t.Setenv(EnvAgentBin, filepath.Join(d, "noexec"))
	if _, err := AgentBinary(d, nil); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("%v", err)
	}
	// Nothing anywhere: the error says how to fix it.
	t.Setenv(EnvAgentBin, "")
	if _, err := AgentBinary(d, nil); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("%v", err)
	}
}

// ReadFile reads what os.ReadFile reads: a file past its first buffer, a
// /proc file whose size says 0, through a symbolic link; a missing file
// is fs.ErrNotExist in a *fs.PathError, a directory an error.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	data := []byte(strings.Repeat("0123456789", 1000)) // 10,000 bytes, past 512 and its doublings
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink(big, filepath.Join(dir, "link"))
	os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600)
	for _, name := range []string{big, filepath.Join(dir, "link"), filepath.Join(dir, "empty"), "/proc/self/stat"} {
		got, err := ReadFile(name)
		want, werr := os.ReadFile(name)
		if err != nil || werr != nil {
			t.Fatalf("%s: %v (os.ReadFile: %v)", name, err, werr)
		}
		if name == "/proc/self/stat" {
			// Its CPU times move between the two reads: compare its pid.
			got, want = got[:strings.IndexByte(string(got), ' ')], want[:strings.IndexByte(string(want), ' ')]
		}
		if string(got) != string(want) {
			t.Errorf("%s: read %d bytes, os.ReadFile %d", name, len(got), len(want))
		}
	}
	_, err := ReadFile(filepath.Join(dir, "missing"))
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != filepath.Join(dir, "missing") {
		t.Errorf("missing file: %#v", err)
	}
	if _, err := ReadFile(dir); err == nil {
		t.Errorf("reading a directory: no error")
	}
}

// ReadFile and ReadRecord close what they open, on every path.
func TestReadsCloseTheirFiles(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte("x"), 0o600)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	for range 200 {
		ReadFile(ok)
		ReadFile(dir) // read fails: EISDIR
		ReadRecord(ok, 64)
		ReadRecord(ok, 0) // too large
		ReadRecord(dir, 64)
	}
	if after := fds(); after > before+2 {
		t.Errorf("open descriptors: %d before, %d after 1,000 reads", before, after)
	}
}

// ReadRecord reads a regular file of at most max bytes, and refuses what
// a planted record could be instead: a symbolic link (not followed, even
// to a good record), a FIFO (refused, not waited on), a larger file.
func TestReadRecord(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec")
	os.WriteFile(rec, []byte("nsbox\n"), 0o600)
	if b, err := ReadRecord(rec, 6); err != nil || string(b) != "nsbox\n" {
		t.Fatalf("a record of exactly max bytes: %q %v", b, err)
	}
	if _, err := ReadRecord(rec, 5); err == nil || !strings.Contains(err.Error(), "more than the 5") {
		t.Errorf("a record over max: %v", err)
	}
	os.Symlink(rec, filepath.Join(dir, "link"))
	if _, err := ReadRecord(filepath.Join(dir, "link"), 64); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("through a link: %v, want ELOOP", err)
	}
	unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
	if _, err := ReadRecord(filepath.Join(dir, "fifo"), 64); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
	if _, err := ReadRecord(filepath.Join(dir, "none"), 64); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// A lock's file is opened without following a link and must be a regular
// file: a link planted where a lock goes makes no file where it points,
// and a FIFO there does not hold the taker.
func TestLockRefusesLinksAndFIFOs(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "made-elsewhere")
	link := filepath.Join(dir, "linked.lock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if ok, err := NewLock(link).TryExclusive(); ok || err == nil {
		t.Errorf("a lock through a link: %v %v, want refused", ok, err)
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("a lock through a link made the file it points to")
	}
	fifo := filepath.Join(dir, "fifo.lock")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := NewLock(fifo).TryExclusive(); ok || err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a lock on a FIFO: %v %v, want refused", ok, err)
	}
	l := NewLock(filepath.Join(dir, "plain.lock"))
	if ok, err := l.TryExclusive(); !ok || err != nil {
		t.Fatalf("a plain lock: %v %v", ok, err)
	}
	l.Release()
}
