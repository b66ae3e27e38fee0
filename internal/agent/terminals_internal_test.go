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
