package launch

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Audit appends one fact to the audit log: a JSON line, written with
// O_APPEND so lines of concurrent writers never mix. Its lines are ASCII:
// every other character is written as a \u escape, so that a value an
// API client chose (a neuron id in a path) cannot carry terminal controls
// (C1, bidirectional overrides) to whoever reads the log.
type Audit struct {
	mu     sync.Mutex
	path   string
	mirror *mirror
}

// NewAudit returns the audit log at path.
func NewAudit(path string) *Audit { return &Audit{path: path} }

// MirrorTo also sends each fact's line to w (the daemon's stderr with
// log.console: in a cluster, its logs keep the facts that a replica's
// own home loses with the replica). The lines go through a queue of
// their own: a w that stops taking them (a pipe nobody reads) holds no
// request; what does not fit in the queue is dropped, and the next line
// that gets through is preceded by a fact saying how many were. Close
// ends it.
func (a *Audit) MirrorTo(w io.Writer) {
	m := &mirror{w: w, lines: make(chan []byte, mirrorQueue), done: make(chan struct{})}
	go m.run()
	a.mu.Lock()
	a.mirror = m
	a.mu.Unlock()
}

// mirrorQueue is how many lines wait for the mirror's writer.
const mirrorQueue = 1024

// Close ends the mirror: the lines queued are written, for at most a
// second (a writer that takes none does not hold the daemon's exit).
func (a *Audit) Close() {
	a.mu.Lock()
	m := a.mirror
	a.mirror = nil
	a.mu.Unlock()
	if m == nil {
		return
	}
	close(m.lines)
	select {
	case <-m.done:
	case <-time.After(time.Second):
	}
}

// Record appends event with its fields.
func (a *Audit) Record(event string, fields map[string]any) error {
	rec := map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "event": event}
	for k, v := range fields {
		rec[k] = v
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	line := append(asciiJSON(b), '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mirror != nil {
		a.mirror.send(line) // whether or not the file can be written
	}
	if err := os.MkdirAll(filepath.Dir(a.path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// asciiJSON rewrites every non-ASCII character of JSON text b as a \u
// escape (two, for one beyond the Basic Multilingual Plane): the same
// JSON, in ASCII. Outside strings JSON has no such characters.
func asciiJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			out = append(out, b[0])
			b = b[1:]
			continue
		}
		r, n := utf8.DecodeRune(b) // json.Marshal wrote valid UTF-8
		b = b[n:]
		if r > 0xffff {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, r)
	}
	return out
}

// mirror writes an audit log's lines to another writer, from a goroutine
// of its own.
type mirror struct {
	w       io.Writer
	lines   chan []byte
	dropped atomic.Int64
	done    chan struct{}
}

func (m *mirror) send(line []byte) {
	select {
	case m.lines <- line:
	default:
		m.dropped.Add(1)
	}
}

func (m *mirror) run() {
	defer close(m.done)
	for line := range m.lines {
		m.reportDropped()
		m.w.Write(line) // one write: the line whole
	}
	m.reportDropped()
}

// reportDropped writes how many lines were dropped since it last did.
func (m *mirror) reportDropped() {
	if n := m.dropped.Swap(0); n > 0 {
		fmt.Fprintf(m.w, "{\"event\":\"audit.dropped\",\"lines\":%d,\"time\":%q}\n", n, time.Now().UTC().Format(time.RFC3339Nano))
	}
}
