package ctxfs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// fake is an in-memory cortex: neurons, processes with output, host
// records in a temp dir, and a log of the commands it was given.
type fake struct {
	dir  string
	snap atomic.Pointer[ctxfs.Snapshot]

	mu    sync.Mutex
	procs map[string][]protocol.ProcInfo
	out   map[string][]byte // neuron/pid/stream
	cmds  []ctxfs.Command
	facts []map[string]any
	// asked is every command the gate was asked about; deny refuses them.
	asked []ctxfs.Command
	deny  bool
	// refuse, when set, is the controller's answer to every command.
	refuse error
	// asks counts the requests that reached a neuron's agent (Health,
	// Processes, Output).
	asks int
}

// Authorize is the fake's gate: it records what it is asked, and allows
// unless deny is set.
func (f *fake) Authorize(ctx context.Context, operator bool, c *ctxfs.Command) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, *c)
	if f.deny {
		return errors.New("denied by the fake gate")
	}
	return nil
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newFake(t testing.TB, uids map[string]int) *fake {
	f := &fake{dir: t.TempDir(), procs: map[string][]protocol.ProcInfo{}, out: map[string][]byte{}}
	ids := make([]string, 0, len(uids))
	for id := range uids {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var ns []*ctxfs.Neuron
	for _, id := range ids {
		ns = append(ns, fakeNeuron(id, uids[id], true))
	}
	f.snap.Store(ctxfs.NewSnapshot(1, t0, ns))
	// host records
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(f.dir, "receipts"), 0o700))
	must(os.WriteFile(filepath.Join(f.dir, "receipts", "r1.json"), []byte(`{"id":"r1"}`+"\n"), 0o600))
	must(os.WriteFile(filepath.Join(f.dir, "s1.jsonl"), []byte(`{"a":1}`+"\n"+`{"b":2}`+"\n"), 0o600))
	must(os.WriteFile(filepath.Join(f.dir, "AGENTS.md"), []byte("# agent\n"), 0o600))
	must(os.WriteFile(filepath.Join(f.dir, "audit.log"), []byte(`{"event":"x"}`+"\n"), 0o600))
	return f
}

func fakeNeuron(id string, uid int, running bool) *ctxfs.Neuron {
	status := "running"
	if !running {
		status = "stopped"
	}
	return &ctxfs.Neuron{ID: id, UID: uid, Running: running, Created: t0,
		Status: []byte(status + " mode=fake pid=1 created=" + t0.Format(time.RFC3339) + "\n"),
		State:  []byte(fmt.Sprintf(`{"id":%q,"status":%q}`+"\n", id, status)),
		Policy: []byte(`{"network":{"mode":"none"}}` + "\n")}
}

func (f *fake) Snapshot() *ctxfs.Snapshot { return f.snap.Load() }

func (f *fake) setRunning(id string, running bool) {
	f.replace(id, func(n *ctxfs.Neuron) *ctxfs.Neuron { return fakeNeuron(id, n.UID, running) })
}

// setPaused pauses (or resumes) neuron id as the model would show it.
func (f *fake) setPaused(id string, paused bool) {
	f.replace(id, func(n *ctxfs.Neuron) *ctxfs.Neuron {
		c := fakeNeuron(id, n.UID, !paused)
		if paused {
			c.Paused = true
			c.Status = []byte("paused mode=fake pid=1 created=" + t0.Format(time.RFC3339) + " paused=" + t0.Format(time.RFC3339) + "\n")
		}
		return c
	})
}

func (f *fake) replace(id string, with func(*ctxfs.Neuron) *ctxfs.Neuron) {
	old := f.snap.Load()
	ns := make([]*ctxfs.Neuron, len(old.Neurons))
	for i, n := range old.Neurons {
		ns[i] = n
		if n.ID == id {
			ns[i] = with(n)
		}
	}
	f.snap.Store(ctxfs.NewSnapshot(old.Version+1, time.Now(), ns))
}

func (f *fake) addProc(neuron string, p protocol.ProcInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[neuron] = append(f.procs[neuron], p)
}

// appendOut adds output to a process's stream and its size.
func (f *fake) appendOut(neuron string, pid int, stream string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := neuron + "/" + strconv.Itoa(pid) + "/" + stream
	f.out[k] = append(f.out[k], b...)
	for i := range f.procs[neuron] {
		p := &f.procs[neuron][i]
		if p.PID == pid {
			if stream == ctxfs.Stderr {
				p.StderrEnd = int64(len(f.out[k]))
			} else {
				p.StdoutEnd = int64(len(f.out[k]))
			}
		}
	}
}

func (f *fake) Health(ctx context.Context, neuron string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks++
	return []byte(`{"version":"fake"}` + "\n"), nil
}

func (f *fake) Processes(ctx context.Context, neuron string) ([]protocol.ProcInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks++
	return append([]protocol.ProcInfo(nil), f.procs[neuron]...), nil
}

// Metrics is the fake's Meter: host records, never the agent.
func (f *fake) Metrics(ctx context.Context, neuron string) ([]byte, error) {
	return []byte(fmt.Sprintf(`{"id":%q,"cpuSeconds":1.5}`+"\n", neuron)), nil
}

func (f *fake) Output(ctx context.Context, neuron string, pid int, stream string, off int64, max int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks++
	b := f.out[neuron+"/"+strconv.Itoa(pid)+"/"+stream]
	if off >= int64(len(b)) {
		return nil, nil
	}
	b = b[off:]
	if len(b) > max {
		b = b[:max]
	}
	return append([]byte(nil), b...), nil
}

func (f *fake) Control(ctx context.Context, c *ctxfs.Command) error {
	f.mu.Lock()
	f.cmds = append(f.cmds, *c)
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		return refuse
	}
	switch {
	case c.Target == ctxfs.TargetNeuron && c.Verb == "stop":
		f.setRunning(c.Neuron, false)
	case c.Target == ctxfs.TargetNeuron && (c.Verb == "pause" || c.Verb == "resume"):
		f.setPaused(c.Neuron, c.Verb == "pause")
	case c.Verb == "input":
		f.appendOut(c.Neuron, c.PID, ctxfs.PTY, c.Data) // an echoing terminal
	}
	return nil
}

func (f *fake) commands() []ctxfs.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ctxfs.Command(nil), f.cmds...)
}

func (f *fake) Record(event string, fields map[string]any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := map[string]any{"event": event}
	for k, v := range fields {
		rec[k] = v
	}
	f.facts = append(f.facts, rec)
	b, _ := json.Marshal(rec)
	af, err := os.OpenFile(f.AuditLog(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer af.Close()
	_, err = af.Write(append(b, '\n'))
	return err
}

func hostFile(p string) ctxfs.HostFile {
	fi, err := os.Stat(p)
	if err != nil {
		return ctxfs.HostFile{Name: filepath.Base(p), Path: p}
	}
	return ctxfs.HostFile{Name: filepath.Base(p), Path: p, Size: fi.Size(), ModTime: fi.ModTime()}
}

func (f *fake) Receipts(ctx context.Context, neuron string) ([]ctxfs.HostFile, error) {
	return []ctxfs.HostFile{hostFile(filepath.Join(f.dir, "receipts", "r1.json"))}, nil
}

func (f *fake) Sessions(ctx context.Context) ([]ctxfs.Session, error) {
	return []ctxfs.Session{{ID: "s1", Meta: []byte(`{"id":"s1","entries":2}` + "\n"),
		Transcript: hostFile(filepath.Join(f.dir, "s1.jsonl"))}}, nil
}

func (f *fake) Agents(ctx context.Context) ([]ctxfs.Agent, error) {
	return []ctxfs.Agent{{Name: "coder", Files: []ctxfs.HostFile{hostFile(filepath.Join(f.dir, "AGENTS.md"))}}}, nil
}

func (f *fake) AuditLog() string { return filepath.Join(f.dir, "audit.log") }

// tree returns a tree over f with operator uid 0.
func (f *fake) tree(opts ...func(*ctxfs.Options)) *ctxfs.Tree {
	o := ctxfs.Options{Source: f, Channel: f, Controller: f, Meter: f, Gate: f, Records: f, Auditor: f, Token: "tok"}
	for _, fn := range opts {
		fn(&o)
	}
	return ctxfs.NewTree(o)
}

// standard: neurons a (uid 1001) and b (uid 1002); a has process 10 with
// output and terminal t1.
func standard(t testing.TB) *fake {
	f := newFake(t, map[string]int{"a": 1001, "b": 1002})
	f.addProc("a", protocol.ProcInfo{PID: 10, Argv: []string{"sh", "-c", "echo hi"}, Running: true, Started: t0})
	f.appendOut("a", 10, ctxfs.Stdout, []byte("hello\n"))
	f.addProc("a", protocol.ProcInfo{PID: 11, ID: "t1", Pty: true, Argv: []string{"bash"}, Running: true, Started: t0, Cols: 80, Rows: 24})
	f.appendOut("a", 11, ctxfs.PTY, []byte("\x1b[1m$\x1b[0m "))
	return f
}
