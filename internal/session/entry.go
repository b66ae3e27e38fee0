package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Version is the format version written in new headers. A reader loads
// files of any version; entry types it does not know are kept and skipped.
const Version = 1

// MaxLineSize is the longest line Append writes (and a reader accepts).
const MaxLineSize = 8 << 20

// Type names the kind of an entry.
type Type string

// Entry types. Header, message, compaction, model_change, snapshot and usage
// entries (and types this version does not know) are nodes of the tree: the
// path to the leaf runs through them. Label and leaf entries are metadata
// about another entry (their parentId): they are never on a path and never
// move the leaf by being appended.
const (
	TypeHeader      Type = "header"
	TypeMessage     Type = "message"
	TypeCompaction  Type = "compaction"
	TypeModelChange Type = "model_change"
	TypeLabel       Type = "label"
	TypeSnapshot    Type = "snapshot"
	TypeUsage       Type = "usage"
	// TypeLeaf records a Branch: the leaf moved to the entry named by its
	// parentId.
	TypeLeaf Type = "leaf"
)

func (t Type) String() string { return string(t) }

// Known reports whether t is a type this version of the package knows.
func (t Type) Known() bool {
	switch t {
	case TypeHeader, TypeMessage, TypeCompaction, TypeModelChange, TypeLabel, TypeSnapshot, TypeUsage, TypeLeaf:
		return true
	}
	return false
}

// ParseType returns the Type named s; an unknown name is an error (an entry
// of an unknown type read from a file is kept, not parsed with this).
func ParseType(s string) (Type, error) {
	if t := Type(s); t.Known() {
		return t, nil
	}
	return "", fmt.Errorf("unknown session entry type %q", s)
}

// inTree reports whether entries of type t are nodes of the tree.
func (t Type) inTree() bool { return t != TypeLabel && t != TypeLeaf }

// Entry is one line of a session file. Exactly the payload field named by
// Type is set (none for leaf entries and for types this version does not
// know, whose line is kept in Raw).
//
// Entries returned by a Session are shared: callers must not modify them.
type Entry struct {
	ID       string    `json:"id"`
	ParentID string    `json:"parentId"`
	Type     Type      `json:"type"`
	Time     time.Time `json:"time"`

	Header      *Header      `json:"header,omitempty"`
	Message     *llm.Message `json:"message,omitempty"`
	Compaction  *Compaction  `json:"compaction,omitempty"`
	ModelChange *ModelChange `json:"model_change,omitempty"`
	Label       *Label       `json:"label,omitempty"`
	Snapshot    *Snapshot    `json:"snapshot,omitempty"`
	Usage       *llm.Usage   `json:"usage,omitempty"`

	// Line is the entry's 1-based line number in its file. It is written
	// last on every line so List can read a session's length from the end
	// of its last line without reading the file.
	Line int `json:"n"`

	// Raw is the line as read, for entries of unknown types (nil otherwise).
	Raw json.RawMessage `json:"-"`
}

// Header is the first entry of every session, the root of its tree.
type Header struct {
	Version   int       `json:"version"`
	SessionID string    `json:"sessionId"`
	Created   time.Time `json:"created"`
	// Cwd is the working directory of the agent; Neuron the neuron it runs in.
	Cwd    string `json:"cwd,omitempty"`
	Neuron string `json:"neuron,omitempty"`
	// Provider and Model at creation (model_change entries change them).
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Title    string `json:"title,omitempty"`
	// ParentSession and ParentEntry name where a fork came from.
	ParentSession string `json:"parentSession,omitempty"`
	ParentEntry   string `json:"parentEntry,omitempty"`
}

// Compaction replaces the history before it with a summary. FirstKeptID
// names the first entry still sent verbatim (an ancestor of the compaction
// entry; "" keeps nothing before the compaction).
type Compaction struct {
	Summary      string `json:"summary"`
	FirstKeptID  string `json:"firstKeptId,omitempty"`
	TokensBefore int    `json:"tokensBefore,omitempty"`
	TokensAfter  int    `json:"tokensAfter,omitempty"`
}

// ModelChange switches the provider and model for the entries after it.
type ModelChange struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// Label puts Name on the entry named by the label entry's parentId. A name
// marks one entry at a time: the latest label with a name wins. Removed
// takes the name off instead.
type Label struct {
	Name    string `json:"name"`
	Removed bool   `json:"removed,omitempty"`
}

// Snapshot names a neuron snapshot taken before a turn that changed files
// (a checkpoint): restoring it puts the neuron's overlay back to this point
// of the conversation (see Session.SnapshotFor).
type Snapshot struct {
	Name string `json:"name"`
	// Neuron is the neuron whose overlay was saved ("" in files written
	// before it was recorded).
	Neuron string `json:"neuron,omitempty"`
	// Error says why the snapshot could not be taken: the turn went on,
	// and a rewind to before it cannot put the files back.
	Error string `json:"error,omitempty"`
}

// Errors. Failures wrap one of these with %w (or are a *CorruptError).
var (
	// ErrNotFound: no session, or no entry, with that id or label.
	ErrNotFound = errdefs.New(errdefs.NotFound, "not found")
	// ErrInvalidID: an id that is not safe as a file name.
	ErrInvalidID = errors.New("invalid session id")
	// ErrTooLarge: an entry over MaxLineSize.
	ErrTooLarge = errors.New("entry too large")
	// ErrInvalidEntry: an entry whose type and payload do not agree.
	ErrInvalidEntry = errors.New("invalid entry")
	// ErrClosed: the session was closed.
	ErrClosed = errors.New("session closed")
)

// CorruptError is a line of a session file that cannot be read.
type CorruptError struct {
	Path string
	Line int // 1-based
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("session file %s is corrupt at line %d: %v (open it leniently to skip the line)", e.Path, e.Line, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// IsNotFound reports whether err says a session or entry does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsCorrupt reports whether err is a corrupt line of a session file.
func IsCorrupt(err error) bool {
	var c *CorruptError
	return errors.As(err, &c)
}

// check reports whether the entry's payload agrees with its type.
func (e *Entry) check() error {
	var set int
	for _, p := range []bool{e.Header != nil, e.Message != nil, e.Compaction != nil, e.ModelChange != nil,
		e.Label != nil, e.Snapshot != nil, e.Usage != nil} {
		if p {
			set++
		}
	}
	var ok bool
	switch e.Type {
	case TypeHeader:
		ok = e.Header != nil
	case TypeMessage:
		ok = e.Message != nil
	case TypeCompaction:
		ok = e.Compaction != nil
	case TypeModelChange:
		ok = e.ModelChange != nil
	case TypeLabel:
		ok = e.Label != nil && e.Label.Name != ""
	case TypeSnapshot:
		ok = e.Snapshot != nil && e.Snapshot.Name != ""
	case TypeUsage:
		ok = e.Usage != nil
	case TypeLeaf:
		ok, set = true, set+1
	default:
		return nil // unknown types are carried as they are
	}
	if !ok || set != 1 {
		return fmt.Errorf("%w: a %s entry must carry exactly its %s payload", ErrInvalidEntry, e.Type, e.Type)
	}
	return nil
}
