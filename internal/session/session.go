package session

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/llm"
)

// Session is one open session file. Its methods are safe for concurrent
// use; several Sessions (in one process or several) may append to the same
// file, each keeping its own leaf.
//
// The leaf survives a reopen: on load it is the last tree entry of the
// file, unless a later leaf entry (written by Branch) names another.
type Session struct {
	mu     sync.Mutex
	path   string
	dir    string
	opts   options
	f      *os.File // O_RDWR|O_APPEND; nil once closed
	header *Header

	entries []*Entry          // file order, every entry
	byID    map[string]*Entry // every entry
	labels  map[string]string // label name → entry id
	leaf    string

	lines  int   // complete lines read or written (skipped ones included)
	end    int64 // file offset after the last good line
	report Report
}

func openFile(path string, o options) (*Session, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("session %s: %w", sessionID(path), ErrNotFound)
		}
		return nil, fmt.Errorf("opening session: %w", err)
	}
	s := newSession(path, f, o)
	if err := s.load(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func newSession(path string, f *os.File, o options) *Session {
	return &Session{path: path, dir: filepath.Dir(path), opts: o, f: f,
		byID: map[string]*Entry{}, labels: map[string]string{}}
}

func sessionID(path string) string {
	base := filepath.Base(path)
	return base[:len(base)-len(filepath.Ext(base))]
}

// ID returns the session's id.
func (s *Session) ID() string { return s.header.SessionID }

// File returns the path of the session file.
func (s *Session) File() string { return s.path }

// Header returns a copy of the session's header.
func (s *Session) Header() Header { return *s.header }

// Report says what loading the file stepped over (torn tail, skipped lines).
func (s *Session) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.report
}

// Close closes the file. Reading methods keep working; appends fail.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Stale reports whether the session's file changed since this Session
// last read or wrote it: another writer appended to it, or another file
// took its place (an import). Such a Session's tree, and what an agent
// loaded from it, lag the file's: reopen it before writing.
func (s *Session) Stale() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return true
	}
	fst, err := s.f.Stat()
	if err != nil {
		return true
	}
	pst, err := os.Stat(s.path)
	if err != nil || !os.SameFile(fst, pst) {
		return true
	}
	return pst.Size() != s.end
}

// apply adds a read or written entry to the in-memory tree.
func (s *Session) apply(e *Entry, moveLeaf bool) {
	s.entries = append(s.entries, e)
	s.byID[e.ID] = e
	switch e.Type {
	case TypeLabel:
		if e.Label.Removed {
			if s.labels[e.Label.Name] == e.ParentID {
				delete(s.labels, e.Label.Name)
			}
		} else {
			s.labels[e.Label.Name] = e.ParentID
		}
	case TypeLeaf:
		if moveLeaf {
			s.leaf = e.ParentID
		}
	default:
		if moveLeaf {
			s.leaf = e.ID
		}
	}
}

// Append adds e as a child of the leaf and moves the leaf to it. The
// caller sets Type and the matching payload; Append sets ID, ParentID, Time
// (when zero) and Line, and returns the stored entry. Header, label and leaf
// entries are written by Create, SetLabel and Branch instead.
//
// Payloads are stored as given: the caller redacts tool results (and any
// other text) before appending.
func (s *Session) Append(e Entry) (*Entry, error) {
	switch {
	case e.Type == TypeHeader || e.Type == TypeLabel || e.Type == TypeLeaf:
		return nil, fmt.Errorf("%w: %s entries are written by Create, SetLabel and Branch, not Append", ErrInvalidEntry, e.Type)
	case !e.Type.Known():
		return nil, fmt.Errorf("%w: unknown type %q", ErrInvalidEntry, e.Type)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e.ParentID = s.leaf
	return s.write(&e, true)
}

// AppendMessage appends a message (user, assistant with its tool calls, or
// tool results — already redacted).
func (s *Session) AppendMessage(m llm.Message) (*Entry, error) {
	return s.Append(Entry{Type: TypeMessage, Message: &m})
}

// AppendCompaction appends a compaction: Messages then starts with its
// summary.
func (s *Session) AppendCompaction(c Compaction) (*Entry, error) {
	return s.Append(Entry{Type: TypeCompaction, Compaction: &c})
}

// AppendModelChange records a switch of provider and model.
func (s *Session) AppendModelChange(provider, model string) (*Entry, error) {
	return s.Append(Entry{Type: TypeModelChange, ModelChange: &ModelChange{Provider: provider, Model: model}})
}

// AppendSnapshot records the neuron snapshot taken before a turn.
func (s *Session) AppendSnapshot(name string) (*Entry, error) {
	return s.AppendCheckpoint(Snapshot{Name: name})
}

// AppendCheckpoint records a checkpoint: the snapshot of a neuron taken
// (or, with Error set, not taken) before a turn's first change.
func (s *Session) AppendCheckpoint(c Snapshot) (*Entry, error) {
	return s.Append(Entry{Type: TypeSnapshot, Snapshot: &c})
}

// AppendUsage records the usage of one model call.
func (s *Session) AppendUsage(u llm.Usage) (*Entry, error) {
	return s.Append(Entry{Type: TypeUsage, Usage: &u})
}

// SetLabel puts name on the entry id (moving it from any entry that had
// it). It does not move the leaf.
func (s *Session) SetLabel(id, name string) error {
	return s.label(id, Label{Name: name})
}

// RemoveLabel takes name off the entry that has it.
func (s *Session) RemoveLabel(name string) error {
	s.mu.Lock()
	id, ok := s.labels[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("label %q: %w", name, ErrNotFound)
	}
	return s.label(id, Label{Name: name, Removed: true})
}

func (s *Session) label(id string, l Label) error {
	if l.Name == "" {
		return fmt.Errorf("%w: an empty label", ErrInvalidEntry)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.treeEntry(id); err != nil {
		return err
	}
	_, err := s.write(&Entry{Type: TypeLabel, ParentID: id, Label: &l}, true)
	return err
}

// Branch moves the leaf to the entry id (rewind): later appends become
// children of it, siblings of what followed it. The move is recorded (a
// leaf entry) so it survives a reopen. Branching to the header rewinds to
// an empty conversation.
func (s *Session) Branch(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.treeEntry(id); err != nil {
		return err
	}
	if id == s.leaf {
		return nil
	}
	_, err := s.write(&Entry{Type: TypeLeaf, ParentID: id}, true)
	return err
}

// treeEntry checks that id names a node of the tree. Called with s.mu held.
func (s *Session) treeEntry(id string) error {
	e := s.byID[id]
	if e == nil {
		return fmt.Errorf("entry %q of session %s: %w", id, s.header.SessionID, ErrNotFound)
	}
	if !e.Type.inTree() {
		return fmt.Errorf("%w: entry %q is a %s entry, not a point of the conversation", ErrInvalidEntry, id, e.Type)
	}
	return nil
}

// write stores e: under the file lock it reads what other writers appended,
// cuts off a torn tail, then writes the line in one write. Called with s.mu
// held.
func (s *Session) write(e *Entry, moveLeaf bool) (*Entry, error) {
	if s.f == nil {
		return nil, ErrClosed
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	unlock, err := lockFile(s.f)
	if err != nil {
		return nil, fmt.Errorf("locking session %s: %w", s.path, err)
	}
	defer unlock()
	if err := s.catchUp(); err != nil {
		return nil, err
	}
	e.ID = s.newEntryID()
	e.Line = s.lines + 1
	line, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding %s entry: %v", ErrInvalidEntry, e.Type, err)
	}
	if len(line)+1 > MaxLineSize {
		return nil, fmt.Errorf("%w: %s entry %s is %d bytes (limit %d): trim it before appending", ErrTooLarge, e.Type, e.ID, len(line)+1, MaxLineSize)
	}
	line = append(line, '\n')
	if _, err := s.f.Write(line); err != nil {
		// Leave a clean boundary if part of the line got out; if even that
		// fails, the next append (or load) treats the part as a torn tail.
		_ = s.f.Truncate(s.end)
		return nil, fmt.Errorf("appending to session %s: %w", s.path, err)
	}
	faultpoint.Hit("session.written")
	if s.opts.sync {
		if err := s.f.Sync(); err != nil {
			return nil, fmt.Errorf("syncing session %s: %w", s.path, err)
		}
	}
	s.end += int64(len(line))
	s.lines++
	s.apply(e, moveLeaf)
	return e, nil
}

func (s *Session) newEntryID() string {
	for {
		if id := randomID("", 8); s.byID[id] == nil {
			return id
		}
	}
}

// Len returns the number of entries (every type, the header included).
func (s *Session) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Leaf returns the id of the current position.
func (s *Session) Leaf() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaf
}

// Get returns the entry id.
func (s *Session) Get(id string) (*Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	return e, ok
}

// Entries returns every entry in file order (metadata and other branches
// included).
func (s *Session) Entries() []*Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Entry(nil), s.entries...)
}

// Children returns the tree entries whose parent is id, in file order.
func (s *Session) Children(id string) []*Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Entry
	for _, e := range s.entries {
		if e.ParentID == id && e.Type.inTree() && e.Type != TypeHeader {
			out = append(out, e)
		}
	}
	return out
}

// Path returns the tree entries from the root (the header) to the leaf.
func (s *Session) Path() []*Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pathTo(s.leaf)
}

// PathTo returns the tree entries from the root to the entry id.
func (s *Session) PathTo(id string) ([]*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.treeEntry(id); err != nil {
		return nil, err
	}
	return s.pathTo(id), nil
}

// pathTo walks parents from id up. A parent missing from the file (only in
// a leniently opened one) ends the walk. Called with s.mu held.
func (s *Session) pathTo(id string) []*Entry {
	var rev []*Entry
	for e := s.byID[id]; e != nil; e = s.byID[e.ParentID] {
		rev = append(rev, e)
		if e.ParentID == "" || len(rev) > len(s.entries) {
			break
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// SummaryPrefix and SummarySuffix wrap a compaction's summary in the user
// message Messages puts first; IsSummary recognises it.
const (
	SummaryPrefix = "<conversation-summary>\nThe conversation before this point was compacted. Summary:\n\n"
	SummarySuffix = "\n</conversation-summary>"
)

// IsSummary reports whether m is the summary message Messages made from a
// compaction.
func IsSummary(m llm.Message) bool {
	if m.Role != llm.RoleUser || len(m.Parts) != 1 {
		return false
	}
	t := m.Parts[0].Text
	return len(t) >= len(SummaryPrefix)+len(SummarySuffix) &&
		t[:len(SummaryPrefix)] == SummaryPrefix && t[len(t)-len(SummarySuffix):] == SummarySuffix
}

// Messages returns the conversation on the path to the leaf as the model
// should see it. Without a compaction on the path: every message entry.
// With one: the latest compaction's summary as a first user message
// (IsSummary), then the messages from its FirstKeptID up to it, then the
// messages after it. Entries of other types are skipped.
func (s *Session) Messages() []llm.Message {
	s.mu.Lock()
	path := s.pathTo(s.leaf)
	s.mu.Unlock()
	out, _ := messages(path, false)
	return out
}

// History returns Messages and, beside each message, the id of the entry
// it comes from (the compaction entry's for the summary message): what a
// writer needs to name a compaction's first kept entry.
func (s *Session) History() ([]llm.Message, []string) {
	s.mu.Lock()
	path := s.pathTo(s.leaf)
	s.mu.Unlock()
	return messages(path, true)
}

func messages(path []*Entry, withIDs bool) ([]llm.Message, []string) {
	start := 0
	var out []llm.Message
	var ids []string
	for i := len(path) - 1; i >= 0; i-- {
		c := path[i].Compaction
		if path[i].Type != TypeCompaction || c == nil {
			continue
		}
		out = append(make([]llm.Message, 0, len(path)-i+1), llm.Message{Role: llm.RoleUser,
			Parts: []llm.Part{{Text: SummaryPrefix + c.Summary + SummarySuffix}}})
		if withIDs {
			ids = append(make([]string, 0, len(path)-i+1), path[i].ID)
		}
		start = i + 1
		for j := 0; j < i; j++ {
			if path[j].ID == c.FirstKeptID {
				start = j
				break
			}
		}
		break
	}
	if out == nil {
		out = make([]llm.Message, 0, len(path))
	}
	for _, e := range path[start:] {
		if e.Type == TypeMessage && e.Message != nil {
			out = append(out, *e.Message)
			if withIDs {
				ids = append(ids, e.ID)
			}
		}
	}
	return out, ids
}

// Model returns the provider and model in force at the leaf: the header's,
// or the latest model change on the path.
func (s *Session) Model() (provider, model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	provider, model = s.header.Provider, s.header.Model
	for _, e := range s.pathTo(s.leaf) {
		if e.Type == TypeModelChange && e.ModelChange != nil {
			provider, model = e.ModelChange.Provider, e.ModelChange.Model
		}
	}
	return provider, model
}

// Labels returns every label name and the id of the entry it marks.
func (s *Session) Labels() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.labels))
	for k, v := range s.labels {
		out[k] = v
	}
	return out
}

// Find returns the entry labelled name.
func (s *Session) Find(name string) (*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.labels[name]; ok {
		if e := s.byID[id]; e != nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("label %q in session %s: %w", name, s.header.SessionID, ErrNotFound)
}

// SnapshotFor returns the neuron snapshot that puts the overlay back to
// the state it had at entry id: the first snapshot entry after id on the
// path to the leaf (taken before the first later turn that changed files).
// ok is false when no turn after id changed files. Call it before Branch.
func (s *Session) SnapshotFor(id string) (name string, ok bool, err error) {
	c, ok, err := s.CheckpointAfter(id)
	if !ok {
		return "", ok, err
	}
	return c.Name, true, nil
}

// CheckpointAfter is SnapshotFor with the whole snapshot entry's payload:
// which neuron it saved, and whether taking it failed.
func (s *Session) CheckpointAfter(id string) (*Snapshot, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.treeEntry(id); err != nil {
		return nil, false, err
	}
	path := s.pathTo(s.leaf)
	after := false
	for _, e := range path {
		if after && e.Type == TypeSnapshot && e.Snapshot != nil {
			c := *e.Snapshot
			return &c, true, nil
		}
		after = after || e.ID == id
	}
	if !after {
		return nil, false, fmt.Errorf("%w: entry %q is not on the path to the leaf", ErrInvalidEntry, id)
	}
	return nil, false, nil
}

// Fork starts a new session whose history is the path from the root to
// the entry id ("": the leaf), copied with the same entry ids under a new
// header naming this session and id as its parent. Labels on copied entries
// are copied too. The new session's leaf is the copy of id.
func (s *Session) Fork(id string) (*Session, error) {
	s.mu.Lock()
	if id == "" {
		id = s.leaf
	}
	if err := s.treeEntry(id); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	path := s.pathTo(id)
	var labels []*Entry
	onPath := map[string]bool{}
	for _, e := range path {
		onPath[e.ID] = true
	}
	for name, target := range s.labels {
		if onPath[target] {
			labels = append(labels, &Entry{Type: TypeLabel, ParentID: target, Label: &Label{Name: name}})
		}
	}
	h := *s.header
	s.mu.Unlock()

	h.SessionID, h.Created, h.Version = "", time.Time{}, Version
	h.ParentSession, h.ParentEntry = s.header.SessionID, id
	return createFile(s.dir, h, path[0].ID, path[1:], labels, s.opts)
}
