//go:build linux

package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

func keptTerminal(t *testing.T, dir, id string, pid int, started time.Time, replay func(path string)) {
	t.Helper()
	d := filepath.Join(dir, id)
	os.MkdirAll(d, 0o700)
	b, _ := json.Marshal(protocol.ProcInfo{PID: pid, ID: id, Pty: true, Started: started, StdoutEnd: 5, Argv: []string{"sh"}})
	os.WriteFile(filepath.Join(d, "meta.json"), b, 0o600)
	replay(filepath.Join(d, "replay"))
}

// Records read back keep their ids when pids repeat (a new agent's
// processes reuse them), and a planted FIFO or link does not stop the
// agent from starting.
func TestKeptTerminalsLoad(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	keptTerminal(t, dir, "ta", 7, now.Add(-time.Minute), func(p string) { os.WriteFile(p, []byte("hello"), 0o600) })
	keptTerminal(t, dir, "tb", 7, now.Add(-2*time.Minute), func(p string) { syscall.Mkfifo(p, 0o600) })
	keptTerminal(t, dir, "tc", 8, now.Add(-3*time.Minute), func(p string) { os.Symlink("/dev/zero", p) })
	a := &Agent{}
	tab := newProcTable(a)
	done := make(chan struct{})
	go func() { newTermStore(dir, t.Logf).load(tab); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loading the kept terminals hung (a FIFO?)")
	}
	ids := map[string]int{}
	for pid, p := range tab.procs {
		ids[p.id] = pid
		if p.pid != pid {
			t.Fatalf("%s: keyed %d, pid %d", p.id, pid, p.pid)
		}
	}
	if len(ids) != 3 || ids["ta"] != 7 || ids["tb"] >= 0 || ids["tc"] != 8 {
		t.Fatalf("%v", ids)
	}
	if got, _, _ := tab.procs[7].out.ReadFrom(0, 100); string(got) != "hello" {
		t.Fatalf("replay %q", got)
	}
	// A new process with a kept terminal's pid: the kept one moves aside.
	tab.pending++
	tab.add(&proc{pid: 7, id: "tnew", isPty: true, out: newRing(16), done: make(chan struct{})})
	if tab.procs[7].id != "tnew" || len(tab.procs) != 4 {
		t.Fatalf("after add: %v", tab.procs)
	}
	seen := map[int]bool{}
	for _, pid := range tab.order {
		if seen[pid] {
			t.Fatalf("pid %d twice in %v", pid, tab.order)
		}
		seen[pid] = true
	}
}

// A follower waits for more output only while output streams: an echo or
// a prompt after a quiet spell goes at once, a fast writer's PTY reads
// are gathered, and a follower that already has enough (at most half a
// small ring, which a paced writer fills and stops at) never waits.
func TestGathersOnlyWhileStreaming(t *testing.T) {
	for _, c := range []struct {
		ready, burst, enough int64
		want                 bool
	}{
		{1, 0, gatherMin, false},   // a key's echo
		{200, 1, gatherMin, false}, // a prompt after an echo
		{streamReady - 1, streamBurst - 1, gatherMin, false},
		{streamReady, 0, gatherMin, true},       // a near-full PTY read after a quiet spell
		{1, streamBurst, gatherMin, true},       // the tail of a stream
		{4 << 10, 64 << 10, gatherMin, true},    // a stream
		{gatherMin, 64 << 10, gatherMin, false}, // enough to send
		{gatherMin + 1, 0, gatherMin, false},
		{8 << 10, 64 << 10, 8 << 10, false}, // half of a 16 KiB ring
		{4 << 10, 64 << 10, 8 << 10, true},
	} {
		if got := gathers(c.ready, c.burst, c.enough); got != c.want {
			t.Errorf("gathers(ready %d, burst %d, enough %d) = %v, want %v", c.ready, c.burst, c.enough, got, c.want)
		}
	}
}
