package chatrun

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/store"
)

// CheckpointPrefix starts the name of every checkpoint: the neuron
// snapshots a chat takes itself, and prunes (other snapshots are never
// touched).
const CheckpointPrefix = "ckpt-"

// Checkpoint is a snapshot of the neuron's files (of the whole VM, on a
// microVM neuron) taken before a turn's first call that may change them.
type Checkpoint struct {
	Name   string `json:"name"`
	Neuron string `json:"neuron"`
	Files  int    `json:"files,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Whole: a whole-VM snapshot (a microVM neuron's): a rewind to it
	// brings back the neuron's memory and processes too.
	Whole bool `json:"vm,omitempty"`
	// Err says why it could not be taken: the turn goes on, and a rewind to
	// before it cannot put the files back.
	Err string `json:"error,omitempty"`
	// Pruned names the older checkpoints deleted to keep the bound.
	Pruned []string `json:"pruned,omitempty"`
}

// takeCheckpoint snapshots the neuron's overlay, once per turn, before the
// first call that may change it, records it in the session and prunes the
// oldest checkpoints beyond the bound. A failure is recorded and reported,
// never fatal to the turn.
func (r *Runner) takeCheckpoint(ctx context.Context) {
	r.noted = true
	if r.opts.Checkpoints < 0 {
		return
	}
	c := &Checkpoint{Name: checkpointName(r.sess.ID()), Neuron: r.neuron.ID()}
	if cl, err := r.neuron.Client(ctx); err == nil {
		// Flush the neuron's page cache so the copy sees what was written
		// (a VM's disk); best effort, as the snapshot tool does it.
		_, _ = cl.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"sync"}}, Timeout: 30 * time.Second})
	}
	snap, err := r.neuron.CreateSnapshot(ctx, c.Name)
	if err != nil {
		c.Err = err.Error()
	} else {
		c.Files, c.Bytes, c.Whole = snap.Files, snap.Bytes, snap.Whole()
	}
	if _, err := r.sess.AppendCheckpoint(session.Snapshot{Name: c.Name, Neuron: c.Neuron, Error: c.Err}); err != nil {
		r.noteWriteErr(err)
	}
	if c.Err == "" {
		pruned, err := r.prune(ctx)
		c.Pruned = pruned
		if err != nil {
			r.noteWriteErr(fmt.Errorf("pruning checkpoints: %w", err))
		}
	}
	r.checkpoint = c
	if r.onEvent != nil {
		text := fmt.Sprintf("checkpoint %s: %d files", c.Name, c.Files)
		if c.Whole {
			text = fmt.Sprintf("checkpoint %s: the whole VM (memory, processes and disk)", c.Name)
		}
		if c.Err != "" {
			text = "no checkpoint: " + c.Err + " (a rewind to before this turn cannot put the files back)"
		}
		r.onEvent(Event{Event: loop.Event{Kind: EventCheckpoint, Text: text}, Checkpoint: c})
	}
}

// checkpointName is a new checkpoint's name: the prefix, the session, and
// a random part (a snapshot name is at most 64 characters).
func checkpointName(sessionID string) string {
	b := make([]byte, 5)
	rand.Read(b) // never fails (crypto/rand panics if the OS source breaks)
	const digits = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	if len(sessionID) > 40 {
		sessionID = sessionID[:40]
	}
	return CheckpointPrefix + sessionID + "-" + string(b)
}

// snapshotsDir is where the neuron's snapshots are.
func (r *Runner) snapshotsDir() string { return r.host.Layout.SnapshotsDir(r.neuron.ID()) }

// prune deletes the neuron's oldest checkpoints beyond the bound (every
// session's: the bound is on the neuron's disk) and returns their names.
// Each goes under the neuron's snapshot lock, as every snapshot
// operation does: never while a restore or another removal of it runs.
func (r *Runner) prune(ctx context.Context) ([]string, error) {
	dir := r.snapshotsDir()
	all, err := store.ListSnapshots(dir) // oldest first
	if err != nil {
		return nil, err
	}
	var ours []store.Snapshot
	for _, s := range all {
		if strings.HasPrefix(s.Name, CheckpointPrefix) {
			ours = append(ours, s)
		}
	}
	var pruned []string
	for len(ours) > r.opts.Checkpoints {
		name := ours[0].Name
		ours = ours[1:]
		if err := r.neuron.RemoveSnapshot(ctx, name); err != nil && !errors.Is(err, store.ErrSnapshotNotFound) {
			return pruned, err
		}
		pruned = append(pruned, name)
	}
	return pruned, nil
}

// Files says what a rewind does to the neuron's files.
type Files int

// What a rewind to before a turn does to the files.
const (
	// FilesUnchanged: no turn since changed files; they are left as they are.
	FilesUnchanged Files = iota
	// FilesRestored: the checkpoint of the first later turn that changed
	// files puts them back.
	FilesRestored
	// FilesLost: a later turn changed files but its checkpoint is gone
	// (pruned, never taken, of another neuron): only the conversation can
	// be rewound (keepFiles).
	FilesLost
	// FilesUnknown: checkpoints are off; whether files changed is not known.
	FilesUnknown
)

var filesNames = [...]string{"unchanged", "restored", "lost", "unknown"}

func (f Files) String() string {
	if f < 0 || int(f) >= len(filesNames) {
		return fmt.Sprintf("Files(%d)", int(f))
	}
	return filesNames[f]
}

// MarshalText writes the name (JSON: "restored").
func (f Files) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText reads a name.
func (f *Files) UnmarshalText(b []byte) error {
	v, err := ParseFiles(string(b))
	*f = v
	return err
}

// ParseFiles returns the Files named s.
func ParseFiles(s string) (Files, error) {
	for i, n := range filesNames {
		if n == s {
			return Files(i), nil
		}
	}
	return 0, fmt.Errorf("files %q: one of %s", s, strings.Join(filesNames[:], ", "))
}

// Turn is one request of the conversation, a point a rewind can go back to.
type Turn struct {
	N       int    `json:"n"`     // 1-based, in the order of the conversation
	Entry   string `json:"entry"` // the request's session entry
	Request string `json:"request"`
	// Files is what a rewind to before this request does to the files;
	// Checkpoint is the snapshot it restores, Why says why files are lost.
	Files      Files  `json:"files"`
	Checkpoint string `json:"checkpoint,omitempty"`
	Why        string `json:"why,omitempty"`
}

// Turns lists the requests on the path to the current point, oldest
// first, with what a rewind to before each does to the files.
func (r *Runner) Turns() []Turn {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	path := sess.Path()
	var turns []Turn
	var next *session.Snapshot // the first checkpoint after the entry looked at
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		switch {
		case e.Type == session.TypeSnapshot && e.Snapshot != nil:
			next = e.Snapshot
		case e.Type == session.TypeMessage && e.Message != nil && e.Message.Role == llm.RoleUser:
			t := Turn{Entry: e.ID, Request: e.Message.Text()}
			t.Files, t.Checkpoint, t.Why = r.filesFor(next)
			turns = append(turns, t)
		}
	}
	for i, j := 0, len(turns)-1; i < j; i, j = i+1, j-1 {
		turns[i], turns[j] = turns[j], turns[i]
	}
	for i := range turns {
		turns[i].N = i + 1
	}
	return turns
}

// filesFor says what restoring checkpoint c (nil: none) does.
func (r *Runner) filesFor(c *session.Snapshot) (Files, string, string) {
	switch {
	case c == nil && r.opts.Checkpoints < 0:
		return FilesUnknown, "", "checkpoints are off: whether later turns changed files is not known"
	case c == nil:
		return FilesUnchanged, "", ""
	case c.Error != "":
		return FilesLost, c.Name, "the checkpoint could not be taken: " + c.Error
	case c.Neuron != "" && c.Neuron != r.neuron.ID():
		return FilesLost, c.Name, fmt.Sprintf("the checkpoint is of neuron %s, and this chat works in %s", c.Neuron, r.neuron.ID())
	}
	if _, err := os.Stat(filepath.Join(r.snapshotsDir(), c.Name, "snapshot.json")); err != nil {
		return FilesLost, c.Name, fmt.Sprintf("checkpoint %s was pruned (a neuron keeps its last %d)", c.Name, r.opts.Checkpoints)
	}
	return FilesRestored, c.Name, ""
}

// Rewound is what a rewind did.
type Rewound struct {
	Turn Turn
	// Restored is the checkpoint whose files were put back ("": none).
	Restored string
	// Whole: the checkpoint was a whole-VM snapshot, so the neuron's
	// memory and the processes that ran then came back too.
	Whole bool
}

// ErrFilesLost says a rewind cannot put the files back; the conversation
// alone can be rewound (keepFiles).
var ErrFilesLost = errdefs.New(errdefs.Invalid, "the files cannot be put back")

// Rewind goes back to just before the request entry (see Turns): the
// session branches back there (the old branch stays in the file) and the
// neuron's files are restored to the checkpoint of the first later turn
// that changed them (none: they are left as they are). The files go back
// first; when they cannot (ErrFilesLost), nothing changes unless keepFiles
// says to rewind the conversation alone. A restore restarts the neuron:
// its processes end (a VM neuron's checkpoint is the whole VM: its
// memory and the processes of then come back instead).
func (r *Runner) Rewind(ctx context.Context, entry string, keepFiles bool) (*Rewound, error) {
	if err := r.acquire(); err != nil {
		return nil, err
	}
	defer r.busy.Unlock()
	var turn *Turn
	for _, t := range r.Turns() {
		if t.Entry == entry {
			turn = &t
			break
		}
	}
	if turn == nil {
		return nil, fmt.Errorf("entry %q is not a request on the current path of session %s", entry, r.sess.ID())
	}
	e, _ := r.sess.Get(entry)
	out := &Rewound{Turn: *turn}
	if !keepFiles {
		switch turn.Files {
		case FilesLost, FilesUnknown:
			return nil, fmt.Errorf("rewind to before request %d: %w: %s (rewind the conversation alone, keeping the files as they are, to go on)", turn.N, ErrFilesLost, turn.Why)
		case FilesRestored:
			snap, err := r.neuron.RestoreSnapshot(ctx, turn.Checkpoint)
			if err != nil {
				return nil, fmt.Errorf("rewind to before request %d: restoring checkpoint %s: %w", turn.N, turn.Checkpoint, err)
			}
			out.Restored, out.Whole = turn.Checkpoint, snap.Whole()
			if err := r.refreshKit(ctx); err != nil {
				return out, fmt.Errorf("the files were put back (checkpoint %s), but the tool kit could not be rebuilt: %w", turn.Checkpoint, err)
			}
		}
	}
	if err := r.sess.Branch(e.ParentID); err != nil {
		if out.Restored != "" {
			return out, fmt.Errorf("the files were put back (checkpoint %s), but the conversation could not be rewound: %w", out.Restored, err)
		}
		return nil, err
	}
	r.reload()
	return out, r.keepModel()
}

// refreshKit rebuilds the tool kit (its caches knew the files before the
// restore) and the system prompt (the workspace's AGENTS.md may differ).
func (r *Runner) refreshKit(ctx context.Context) error {
	kit, err := r.host.newKit(r.neuron, r.opts.Agent, &r.mem, r.extra)
	if err != nil {
		return err
	}
	system, err := r.host.systemPrompt(ctx, r.neuron, kit, r.opts.Agent)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.kit = kit
	r.mu.Unlock()
	r.agent.SetSystem(system)
	return nil
}
