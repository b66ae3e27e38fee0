// Package events is the durable record of what happens to neurons: created,
// started, paused, resumed, stopped, destroyed, wiped, timed out,
// auto-paused, their agent died, OOM-killed, snapshotted, restored.
//
// Every host process that changes a neuron (a CLI in one terminal, the
// daemon, the keeper that enforces deadlines) appends to one log under the
// home, logs/events/events.jsonl, one JSON object a line, rotated by size
// with a few older files kept. Appends and rotations take an flock, so
// lines never interleave and nothing is lost across a rotation. Readers
// (`nsys-cortex events`, GET /v1/events) read the files in order and then
// follow the current one, across rotations, so `--since` works across
// daemon restarts and one process sees what another recorded.
package events

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Type is what happened.
type Type string

// The event types.
const (
	Created          Type = "created"   // a neuron was made (no data under its id before)
	Started          Type = "started"   // its agent came up (every create, restart, restore)
	Paused           Type = "paused"    // its processes were frozen on request
	Resumed          Type = "resumed"   // they run again
	Stopped          Type = "stopped"   // it stopped, data kept, other than by destroy (a timeout, ctl stop)
	Destroyed        Type = "destroyed" // destroy: stopped, data kept
	Wiped            Type = "wiped"     // destroy --wipe: data gone
	Timeout          Type = "timeout"   // its deadline passed; the action taken is in the reason
	AutoPaused       Type = "auto-paused"
	AgentDied        Type = "agent-died" // its agent ended without being asked
	OOMKilled        Type = "oom-killed" // the kernel killed a process of it for memory
	SnapshotCreated  Type = "snapshot-created"
	SnapshotRestored Type = "snapshot-restored"
)

// Types lists every type, in the order above.
var Types = []Type{Created, Started, Paused, Resumed, Stopped, Destroyed, Wiped, Timeout, AutoPaused, AgentDied, OOMKilled,
	SnapshotCreated, SnapshotRestored}

// Event is one thing that happened to one neuron.
type Event struct {
	Time   time.Time  `json:"time"`
	Type   Type       `json:"type"`
	Neuron string     `json:"neuron"`
	Mode   string     `json:"mode,omitempty"`
	Labels labels.Set `json:"labels,omitempty"`
	// Reason says why, in words ("deadline 30m passed: stopped",
	// "requested", "exit status 137").
	Reason string `json:"reason,omitempty"`
	// Principal is who asked ("operator", an API key's name, "keeper").
	Principal string `json:"principal,omitempty"`
}

// Log is the event log of one home.
type Log struct {
	dir string
	// MaxBytes is the size past which the current file is rotated.
	MaxBytes int64
	// Keep is how many rotated files are kept.
	Keep int
}

// Defaults of a Log.
const (
	DefaultMaxBytes = 8 << 20
	DefaultKeep     = 4
	maxLine         = 64 << 10
	current         = "events.jsonl"
)

// Open returns the event log of lay's home. It makes nothing until the
// first Append.
func Open(lay layout.Layout) *Log {
	return &Log{dir: lay.EventsDir(), MaxBytes: DefaultMaxBytes, Keep: DefaultKeep}
}

func (l *Log) path(n int) string {
	if n == 0 {
		return filepath.Join(l.dir, current)
	}
	return filepath.Join(l.dir, current+"."+strconv.Itoa(n))
}

// Append records ev (stamped now when its time is zero).
func (l *Log) Append(ev Event) error {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	ev.Time = ev.Time.UTC()
	line, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if len(line) >= maxLine {
		ev.Reason = ev.Reason[:min(len(ev.Reason), 1024)] + "…"
		if line, err = json.Marshal(ev); err != nil || len(line) >= maxLine {
			return errdefs.Errorf(errdefs.TooLarge, "event of %s is too large to record", ev.Neuron)
		}
	}
	line = append(line, '\n')
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(l.path(0), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Size() > 0 && st.Size()+int64(len(line)) > l.MaxBytes {
		f.Close()
		if err := l.rotate(); err != nil {
			return err
		}
		if f, err = os.OpenFile(l.path(0), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
			return fmt.Errorf("event log: %w", err)
		}
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	return nil
}

// lock takes the log's flock: one appender or rotator at a time, across
// processes.
func (l *Log) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(l.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("event log lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// rotate shifts events.jsonl to .1, .1 to .2, ..., dropping the oldest.
func (l *Log) rotate() error {
	os.Remove(l.path(l.Keep))
	for n := l.Keep - 1; n >= 0; n-- {
		if err := os.Rename(l.path(n), l.path(n+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("event log rotation: %w", err)
		}
	}
	return nil
}

// Filter says which events a reader wants.
type Filter struct {
	// Since drops events before it (zero: from the oldest kept).
	Since time.Time
	// Until drops events after it (zero: no end).
	Until time.Time
	// Selector keeps events whose neuron's labels (when it happened) match.
	Selector labels.Selector
	// Neurons keeps events of these ids only (none: all).
	Neurons []string
}

// Match reports whether ev passes f.
func (f Filter) Match(ev Event) bool {
	if !f.Since.IsZero() && ev.Time.Before(f.Since) || !f.Until.IsZero() && ev.Time.After(f.Until) {
		return false
	}
	if len(f.Neurons) > 0 {
		found := false
		for _, id := range f.Neurons {
			found = found || id == ev.Neuron
		}
		if !found {
			return false
		}
	}
	return f.Selector.Matches(ev.Labels)
}

// Read returns the recorded events that pass f, oldest first.
func (l *Log) Read(f Filter) ([]Event, error) {
	var out []Event
	err := l.scan(f, func(ev Event) error { out = append(out, ev); return nil })
	return out, err
}

// scan calls fn for every recorded event that passes f, oldest first.
func (l *Log) scan(f Filter, fn func(Event) error) error {
	for n := l.Keep; n >= 0; n-- {
		file, err := os.Open(l.path(n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("event log: %w", err)
		}
		// A rotated file last written before Since holds nothing newer.
		if st, err := file.Stat(); err == nil && n > 0 && !f.Since.IsZero() && st.ModTime().Before(f.Since) {
			file.Close()
			continue
		}
		_, err = readLines(file, 0, f, fn)
		file.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// readLines calls fn for each whole line of r from offset on that passes
// f; it returns the offset after the last whole line. A line that does not
// parse (a write cut short by a crash) is skipped.
func readLines(r io.ReaderAt, off int64, f Filter, fn func(Event) error) (int64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, off, 1<<62), 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than any line Append writes: skip to its end.
			off += int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				off += int64(len(line))
			}
			continue
		}
		if err != nil {
			return off, nil // EOF, or a last line not yet whole
		}
		off += int64(len(line))
		var ev Event
		if json.Unmarshal(bytes.TrimSpace(line), &ev) != nil || !f.Match(ev) {
			continue
		}
		if err := fn(ev); err != nil {
			return off, err
		}
	}
}

type principalKey struct{}

// WithPrincipal returns a context whose events name p as who asked (an API
// key's name, "keeper").
func WithPrincipal(ctx context.Context, p string) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf returns who ctx acts for: what WithPrincipal set, else
// "operator" (a local CLI, as the user who runs it).
func PrincipalOf(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(string); ok && p != "" {
		return p
	}
	return "operator"
}

// ParseTime reads a time as `events --since` and GET /v1/events?since=
// take it: an RFC 3339 time, or a duration meaning that long before now
// ("10m", "1h30m"; "0s" is now).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, errdefs.Errorf(errdefs.Invalid, "%q: give a duration before now without a sign (10m), or an RFC 3339 time", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, errdefs.Errorf(errdefs.Invalid, "%q is neither a duration (10m, 1h30m: that long ago) nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
}
