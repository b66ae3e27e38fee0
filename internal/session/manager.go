package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// Option configures a Manager.
type Option func(*options)

type options struct {
	lenient bool
	sync    bool
}

// Lenient makes Open skip corrupt lines in the middle of a file (each is
// listed in Session.Report) instead of failing.
func Lenient() Option { return func(o *options) { o.lenient = true } }

// SyncWrites makes every append fsync the file: an appended entry then
// survives a power loss, at the cost of a disk flush per entry.
func SyncWrites() Option { return func(o *options) { o.sync = true } }

// Manager creates, opens, lists and deletes the sessions of one directory.
type Manager struct {
	dir  string
	opts options
}

// NewManager manages the sessions in dir (created 0700 on the first Create).
func NewManager(dir string, opts ...Option) *Manager {
	m := &Manager{dir: dir}
	for _, o := range opts {
		o(&m.opts)
	}
	return m
}

// ForLayout manages the sessions of a Cortex home (l.SessionsDir()).
func ForLayout(l layout.Layout, opts ...Option) *Manager {
	return NewManager(l.SessionsDir(), opts...)
}

// Dir returns the directory holding the session files.
func (m *Manager) Dir() string { return m.dir }

const ext = ".jsonl"

func (m *Manager) file(id string) (string, error) {
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return filepath.Join(m.dir, id+ext), nil
}

// Create starts a session with header h. An empty h.SessionID gets a fresh
// id ("s" and 9 characters of [a-z0-9]); a given one must be new. Version
// and a zero Created are filled in.
func (m *Manager) Create(h Header) (*Session, error) {
	h.Version = Version
	return createFile(m.dir, h, "", nil, nil, m.opts)
}

// Open loads the session id.
func (m *Manager) Open(id string) (*Session, error) {
	path, err := m.file(id)
	if err != nil {
		return nil, err
	}
	return openFile(path, m.opts)
}

// Continue opens the most recently modified session.
func (m *Manager) Continue() (*Session, error) {
	ids, err := m.ids()
	if err != nil {
		return nil, err
	}
	var latest string
	var when time.Time
	for _, id := range ids {
		st, err := os.Stat(filepath.Join(m.dir, id+ext))
		if err == nil && (latest == "" || st.ModTime().After(when)) {
			latest, when = id, st.ModTime()
		}
	}
	if latest == "" {
		return nil, fmt.Errorf("no session in %s to continue: %w", m.dir, ErrNotFound)
	}
	return m.Open(latest)
}

// Info describes a session for a listing.
type Info struct {
	ID       string
	Title    string
	Created  time.Time
	Modified time.Time
	// Entries counts the lines of the file, the header included.
	Entries int
	Size    int64
	// Provider and Model are those the session was created with.
	Provider, Model string
	Agent, Neuron   string
	ParentSession   string
	// Err is set for a file whose header cannot be read (then only ID,
	// Modified and Size are).
	Err error
}

// List describes every session, most recently modified first. It reads
// only each file's header line and the end of its last line, never a whole
// file.
func (m *Manager) List() ([]Info, error) {
	ids, err := m.ids()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(ids))
	for _, id := range ids {
		info, err := readInfo(filepath.Join(m.dir, id+ext))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted since ReadDir
		}
		if err != nil {
			info = Info{Err: fmt.Errorf("reading session %s: %w", id, err)}
		}
		info.ID = id
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Modified.After(out[j].Modified) })
	return out, nil
}

// Info describes session id as List does, reading only its file; a file
// whose header cannot be read gives its Info with Err, and Err.
func (m *Manager) Info(id string) (Info, error) {
	path, err := m.file(id)
	if err != nil {
		return Info{}, err
	}
	info, err := readInfo(path)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("reading session %s: %w", id, err)
	}
	info.ID = id
	return info, info.Err
}

// Delete removes the session id.
func (m *Manager) Delete(id string) error {
	path, err := m.file(id)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("session %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("deleting session %s: %w", id, err)
	}
	return nil
}

// Export returns session id's file as it is, and when it last changed.
func (m *Manager) Export(id string) ([]byte, time.Time, error) {
	path, err := m.file(id)
	if err != nil {
		return nil, time.Time{}, err
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, time.Time{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading session %s: %w", id, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading session %s: %w", id, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reading session %s: %w", id, err)
	}
	return data, st.ModTime(), nil
}

// Import makes data session id's file, in place of the one there (if
// any): a file of another daemon's, which it reads as any input. It must
// load whole, as Open loads a file, and its header must name id; it is
// written to a temporary file and renamed into place, so a reader sees
// the old file or the new one.
func (m *Manager) Import(id string, data []byte) error {
	path, err := m.file(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fmt.Errorf("creating the sessions directory: %w", err)
	}
	tmp, err := os.CreateTemp(m.dir, "."+id+".import-*")
	if err != nil {
		return fmt.Errorf("importing session %s: %w", id, err)
	}
	defer os.Remove(tmp.Name()) // once renamed, nothing to remove
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("importing session %s: %w", id, err)
	}
	s, err := openFile(tmp.Name(), options{})
	if err != nil {
		return fmt.Errorf("importing session %s: %w", id, err)
	}
	got := s.ID()
	s.Close()
	if got != id {
		return fmt.Errorf("%w: importing session %s: the file is session %q's", ErrInvalidID, id, got)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("importing session %s: %w", id, err)
	}
	return nil
}

// ids lists the session files of the directory (none if it does not exist).
func (m *Manager) ids() ([]string, error) {
	des, err := os.ReadDir(m.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	var ids []string
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), ext)
		if ok && de.Type().IsRegular() && ValidateID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// createFile writes a new session file — header, copied entries, labels —
// through a temporary file linked into place, so the file appears whole
// and an existing one is never replaced.
func createFile(dir string, h Header, oldRoot string, copied, labels []*Entry, o options) (*Session, error) {
	if h.SessionID == "" {
		h.SessionID = randomID("s", 9)
	}
	if err := ValidateID(h.SessionID); err != nil {
		return nil, err
	}
	if h.Created.IsZero() {
		h.Created = time.Now().UTC()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the sessions directory: %w", err)
	}
	data, err := encodeNew(&h, oldRoot, copied, labels)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, h.SessionID+ext)
	tmp, err := os.CreateTemp(dir, "."+h.SessionID+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("creating session %s: %w", h.SessionID, err)
	}
	defer os.Remove(tmp.Name()) // the link below keeps the file
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: session %s already exists", ErrInvalidID, h.SessionID)
		}
		return nil, fmt.Errorf("creating session %s: %w", h.SessionID, err)
	}
	return openFile(path, o)
}

// encodeNew encodes the lines of a new file. Copied entries keep their ids;
// what hung from oldRoot (the root of the session they come from) hangs
// from the new header.
func encodeNew(h *Header, oldRoot string, copied, labels []*Entry) ([]byte, error) {
	var buf bytes.Buffer
	root := &Entry{ID: randomID("", 8), Type: TypeHeader, Time: h.Created, Header: h}
	used := map[string]bool{}
	for _, e := range copied {
		used[e.ID] = true
	}
	for used[root.ID] {
		root.ID = randomID("", 8)
	}
	all := append(append([]*Entry{root}, copied...), labels...)
	for i, src := range all {
		e := *src
		e.Line = i + 1
		if i > 0 && oldRoot != "" && e.ParentID == oldRoot {
			e.ParentID = root.ID
		}
		if i > len(copied) { // a label: a fresh id
			for e.ID = randomID("", 8); used[e.ID] || e.ID == root.ID; e.ID = randomID("", 8) {
			}
			used[e.ID] = true
		}
		line, err := encodeEntry(&e)
		if err != nil {
			return nil, err
		}
		if len(line)+1 > MaxLineSize {
			return nil, fmt.Errorf("%w: %s entry %s is %d bytes (limit %d)", ErrTooLarge, e.Type, e.ID, len(line)+1, MaxLineSize)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// encodeEntry encodes e; an entry of an unknown type is its Raw line with
// parentId and n replaced (and n kept last).
func encodeEntry(e *Entry) ([]byte, error) {
	if e.Raw == nil {
		return json.Marshal(e)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e.Raw, &fields); err != nil {
		return nil, err
	}
	parent, _ := json.Marshal(e.ParentID)
	fields["parentId"] = parent
	delete(fields, "n")
	line, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return append(line[:len(line)-1], `,"n":`+strconv.Itoa(e.Line)+`}`...), nil
}
