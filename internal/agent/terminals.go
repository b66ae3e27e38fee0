//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Terminals are kept on disk, in the neuron's persistent home
// (<home>/.cortex/terminals/<id>/: meta.json and replay, the last bytes of
// its output as its ring holds them), so that their history outlives the
// host process, the agent and a destroy/create of the neuron. The neuron's
// own user can read (and change) them: they are its terminals' output.
const (
	keepTerminals = 32              // records kept on disk, newest first
	snapshotEvery = 2 * time.Second // a running terminal's replay is saved this often when it grew
)

type termStore struct {
	dir  string
	logf func(string, ...any)
	mu   sync.Mutex // serialises writes of one record at a time
}

func newTermStore(dir string, logf func(string, ...any)) *termStore {
	return &termStore{dir: dir, logf: logf}
}

func newTermID() string {
	var b [5]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// keep saves p now, every snapshotEvery while its output grows, and when
// it exits; the goroutine belongs to wg (the process table's).
func (s *termStore) keep(p *proc, wg *sync.WaitGroup) {
	s.save(p)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(snapshotEvery)
		defer tick.Stop()
		saved := p.out.End()
		for {
			select {
			case <-p.done:
				s.save(p)
				s.prune()
				return
			case <-tick.C:
				if end := p.out.End(); end != saved {
					s.save(p)
					saved = end
				}
			}
		}
	}()
}

// saveMeta rewrites p's metadata only.
func (s *termStore) saveMeta(p *proc) {
	if p.id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(p, false)
}

// save rewrites p's metadata and replay.
func (s *termStore) save(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(p, true)
}

func (s *termStore) write(p *proc, replay bool) {
	dir := filepath.Join(s.dir, p.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		s.logf("terminal %s: not kept on disk: %v", p.id, err)
		return
	}
	info := p.info()
	if replay {
		// The bytes and the offset they end at, read at one instant.
		data, end := p.out.Snapshot()
		info.StdoutEnd = end
		if err := writeFileAtomic(filepath.Join(dir, "replay"), data); err != nil {
			s.logf("terminal %s: saving its replay: %v", p.id, err)
		}
	}
	b, _ := json.MarshalIndent(&info, "", "  ")
	if err := writeFileAtomic(filepath.Join(dir, "meta.json"), b); err != nil {
		s.logf("terminal %s: saving its metadata: %v", p.id, err)
	}
}

// writeFileAtomic writes a temporary file beside path, never through a
// link planted there, and renames it over path.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readKept reads a file the neuron's user could have replaced: only a
// regular file, not through a link, never blocking (a FIFO), at most max
// bytes.
func readKept(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// prune forgets all but the newest keepTerminals ended terminals on disk.
func (s *termStore) prune() {
	ents, err := os.ReadDir(s.dir)
	if err != nil || len(ents) <= keepTerminals {
		return
	}
	type kept struct {
		id      string
		started time.Time
		running bool
	}
	var all []kept
	for _, e := range ents {
		b, err := readKept(filepath.Join(s.dir, e.Name(), "meta.json"), maxMeta)
		var info protocol.ProcInfo
		if err != nil || json.Unmarshal(b, &info) != nil {
			all = append(all, kept{id: e.Name()}) // unreadable: oldest
			continue
		}
		all = append(all, kept{id: e.Name(), started: info.Started, running: info.Running})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].started.After(all[j].started) })
	for _, k := range all[keepTerminals:] {
		if !k.running {
			os.RemoveAll(filepath.Join(s.dir, k.id))
		}
	}
}

// maxMeta bounds a terminal's meta.json.
const maxMeta = 64 << 10

// load brings back the terminals kept on disk as ended records (one that
// was running went down with the previous agent), and forgets all but the
// newest keepTerminals.
func (s *termStore) load(t *procTable) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return // none kept yet
	}
	var infos []protocol.ProcInfo
	for _, e := range ents {
		b, err := readKept(filepath.Join(s.dir, e.Name(), "meta.json"), maxMeta)
		if err != nil {
			continue
		}
		var info protocol.ProcInfo
		if json.Unmarshal(b, &info) != nil || info.ID != e.Name() {
			continue
		}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Started.After(infos[j].Started) })
	for i, info := range infos {
		if i >= keepTerminals {
			os.RemoveAll(filepath.Join(s.dir, info.ID))
			continue
		}
		replay, err := readKept(filepath.Join(s.dir, info.ID, "replay"), protocol.MaxRingBytes)
		if err != nil {
			replay = nil // its history is lost; its record stays
		}
		if info.Running {
			// It ended with the agent that ran it (PTY children die with it).
			info.Running, info.ExitCode, info.Signal = false, 128+9, "SIGKILL"
			if info.Ended.IsZero() {
				info.Ended = time.Now()
			}
		}
		p := &proc{pid: info.PID, id: info.ID, argv: info.Argv, cwd: info.Cwd, started: info.Started, isPty: true,
			out: ringFrom(replay, info.StdoutEnd), done: make(chan struct{}), exited: true, exitCode: info.ExitCode,
			signal: info.Signal, ended: info.Ended, cols: info.Cols, rows: info.Rows}
		close(p.done)
		if t.procs[p.pid] != nil { // a newer record has this pid
			key := -1
			for t.procs[key] != nil {
				key--
			}
			p.pid = key
		}
		t.procs[p.pid] = p
		t.order = append(t.order, p.pid)
	}
	sort.Slice(t.order, func(i, j int) bool { return t.procs[t.order[i]].started.Before(t.procs[t.order[j]].started) })
}
