package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Snapshotter is a Neuron that can be saved and restored: its overlay's
// files, or, where its mode snapshots whole neurons (a VM), its memory,
// processes and disk.
type Snapshotter interface {
	CreateSnapshot(ctx context.Context, name string) (*store.Snapshot, error)
	Snapshots(ctx context.Context) ([]store.Snapshot, error)
	// RestoreSnapshot brings the neuron back as the snapshot left it: a
	// copy of files stops the neuron, puts the overlay back and starts it
	// again (processes end); a whole-VM snapshot brings back its memory
	// and processes too. A snapshot of the other kind is refused
	// (store.ErrSnapshotMismatch) before anything is stopped.
	RestoreSnapshot(ctx context.Context, name string) (*store.Snapshot, error)
}

type neuronIn struct {
	Action string `json:"action" jsonschema:"status, health or restart"`
}

var neuronTool = define("neuron", GroupNeuron, Annotations{Destructive: true}, // restart ends every process
	"The neuron you work in: status (mode, workdir, limits, network), health (the agent's view: uptime, memory, processes, identity, mounts), or restart (stops every process and starts the neuron again; files are kept).",
	func(s *jsonschema.Schema) { enum(s, "action", "status", "health", "restart") },
	func(in *neuronIn) *subject { return &subject{Action: in.Action} },
	func(ctx context.Context, c *call, in *neuronIn) (*Result, error) {
		n := c.kit.neuron
		switch in.Action {
		case "status":
			st, err := n.State(ctx)
			if err != nil {
				return nil, err
			}
			return jsonText(st)
		case "health":
			cl, err := c.channel(ctx)
			if err != nil {
				return nil, err
			}
			h, err := cl.Health(ctx)
			if err != nil {
				return nil, err
			}
			return jsonText(h)
		default:
			r, ok := n.(Restarter)
			if !ok {
				return nil, errors.New("this neuron cannot be restarted from here")
			}
			if err := r.Restart(ctx); err != nil {
				return nil, err
			}
			return textf("restarted %s: every process was stopped; files are kept", n.ID()), nil
		}
	})

type snapshotIn struct {
	Action string `json:"action" jsonschema:"create, list or restore"`
	Name   string `json:"name,omitempty" jsonschema:"snapshot name (create, restore): letters, digits, '.', '_', '-'"`
}

var snapshotTool = define("snapshot", GroupSnapshot, Annotations{Destructive: true},
	"Snapshots of the neuron: create NAME saves a full copy of its files; list shows them; restore NAME stops the neuron, puts every file back exactly as it was in the snapshot, and starts it again (running processes end). "+
		"On a microVM neuron a snapshot is the whole VM: restore also brings back its memory and the processes that ran at the snapshot, which go on from there.",
	func(s *jsonschema.Schema) { enum(s, "action", "create", "list", "restore") },
	func(in *snapshotIn) *subject { return &subject{Action: in.Action} },
	func(ctx context.Context, c *call, in *snapshotIn) (*Result, error) {
		s, ok := c.kit.neuron.(Snapshotter)
		if !ok {
			return nil, errors.New("snapshots are not available for this neuron")
		}
		if in.Action != "list" && in.Name == "" {
			return nil, &InputError{Tool: "snapshot", Field: "name", Msg: "is required for action " + in.Action}
		}
		switch in.Action {
		case "create":
			if cl, err := c.channel(ctx); err == nil {
				// Flush the neuron's page cache so the copy sees what was written.
				_, _ = cl.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"sync"}, Env: systemEnv}, Timeout: 30 * time.Second}) // best effort: an image without sync still snapshots
			}
			snap, err := s.CreateSnapshot(ctx, in.Name)
			if err != nil {
				return nil, err
			}
			if snap.Whole() {
				return textf("snapshot %q created: the whole VM (memory, processes and disk), %s on disk", snap.Name, sizeText(snap.Bytes)), nil
			}
			return textf("snapshot %q created: %d files, %s", snap.Name, snap.Files, sizeText(snap.Bytes)), nil
		case "list":
			all, err := s.Snapshots(ctx)
			if err != nil {
				return nil, err
			}
			if len(all) == 0 {
				return text("no snapshots"), nil
			}
			var b strings.Builder
			for _, snap := range all {
				what := fmt.Sprintf("%d files", snap.Files)
				if snap.Whole() {
					what = "whole VM (memory, processes, disk)"
				}
				fmt.Fprintf(&b, "%s  %s  %s  %s\n", snap.Name, snap.Created.Format(time.RFC3339), what, sizeText(snap.Bytes))
			}
			return text(strings.TrimSuffix(b.String(), "\n")), nil
		default:
			snap, err := s.RestoreSnapshot(ctx, in.Name)
			if err != nil {
				return nil, err
			}
			c.kit.forget()
			if snap.Whole() {
				return textf("restored snapshot %q: the whole VM is as it was then, files, memory and the processes that ran (they go on from there; processes started since are gone)", snap.Name), nil
			}
			return textf("restored snapshot %q (%d files); the neuron was restarted", snap.Name, snap.Files), nil
		}
	})

// forget drops what the kit knows of file contents (after a restore).
func (k *Kit) forget() {
	k.mu.Lock()
	clear(k.files)
	k.fileBytes = 0
	clear(k.reads)
	k.mu.Unlock()
}

func jsonText(v any) (*Result, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return text(string(b)), nil
}

// SetNeuron is a neuron of a sandbox set, found by id: what the CLI and the
// MCP server hand a kit. It reconnects after a restart.
type SetNeuron struct {
	set *sandbox.Set
	lay layout.Layout
	id  string

	mu     sync.Mutex
	client *link.Client
}

var (
	_ Neuron      = (*SetNeuron)(nil)
	_ Restarter   = (*SetNeuron)(nil)
	_ Snapshotter = (*SetNeuron)(nil)
)

// NewSetNeuron returns neuron id of set.
func NewSetNeuron(set *sandbox.Set, lay layout.Layout, id string) *SetNeuron {
	return &SetNeuron{set: set, lay: lay, id: id}
}

// ID names the neuron.
func (n *SetNeuron) ID() string { return n.id }

// LeftSnapshots returns the snapshots of neuron id when the neuron itself
// is gone (destroyed with its data: snapshots outlive a wipe), so they can
// still be listed and removed; nil when id is no valid id or has none.
// Creating or restoring needs the neuron.
func LeftSnapshots(set *sandbox.Set, lay layout.Layout, id string) *SetNeuron {
	if ids.Validate(id) != nil {
		return nil
	}
	if fi, err := os.Stat(lay.SnapshotsDir(id)); err != nil || !fi.IsDir() {
		return nil
	}
	return NewSetNeuron(set, lay, id)
}

// State returns the neuron's record.
func (n *SetNeuron) State(ctx context.Context) (*sandbox.State, error) {
	_, st, err := n.set.FindExact(ctx, n.id)
	return st, err
}

// Client returns the channel, connecting on first use.
func (n *SetNeuron) Client(ctx context.Context) (*link.Client, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// A client whose link was closed talks to a neuron that is gone: this
	// one was restored or restarted by someone else (the API, another
	// tool kit of this process) since.
	if n.client != nil && !n.client.Closed() {
		return n.client, nil
	}
	m, st, err := n.set.FindExact(ctx, n.id)
	if err != nil {
		return nil, err
	}
	if st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused { // a paused one resumes on Connect
		return nil, fmt.Errorf("neuron %s is %s: start it with nsys-cortex create %s", n.id, st.Status, n.id)
	}
	cl, err := m.Connect(ctx, n.id)
	if err != nil {
		return nil, err
	}
	n.client = cl
	return cl, nil
}

// Restart stops the neuron and starts it again with the policy it ran
// under. The environment given at its first create is not replayed (the
// state does not keep values, which may be secrets).
func (n *SetNeuron) Restart(ctx context.Context) error {
	return n.stopped(ctx, func(string) error { return nil })
}

// stopped stops the neuron, runs f on its overlay, and starts it again
// (also when f fails, so the neuron is not left down).
func (n *SetNeuron) stopped(ctx context.Context, f func(overlay string) error) error {
	m, st, err := n.set.FindExact(ctx, n.id)
	if err != nil {
		return err
	}
	opts := sandbox.CreateOptions{}
	if st.Policy != nil {
		opts.Network, opts.Limits, opts.Image, opts.NestedUserns = st.Policy.Network, st.Policy.Limits, st.Policy.Image, st.Policy.NestedUserns
	}
	// Its deadline and idle rule go on: a restart is no way around them.
	if st.Deadline != nil {
		opts.Timeout, opts.OnTimeout = max(time.Until(*st.Deadline), time.Millisecond), st.OnTimeout
	}
	opts.AutoPause = st.AutoPause
	if err := ctx.Err(); err != nil {
		return err // nothing stopped yet
	}
	n.dropClient()
	if err := m.Destroy(ctx, n.id, sandbox.DestroyOptions{}); err != nil {
		return err
	}
	ferr := f(st.OverlayPath)
	// Started again even when ctx ended meanwhile (Ctrl-C, an API client
	// that went away): once stopped, the neuron must not be left down.
	// Create is bounded by the mode's boot timeout.
	if _, err := m.Create(context.WithoutCancel(ctx), n.id, opts); err != nil {
		return errors.Join(ferr, fmt.Errorf("start %s again: %w", n.id, err))
	}
	return ferr
}

// CreateSnapshot saves the neuron: through its manager where that
// snapshots whole neurons itself (sandbox.Snapshotter: a VM's memory,
// processes and disk; the neuron must run), else as a copy of its
// overlay's files.
func (n *SetNeuron) CreateSnapshot(ctx context.Context, name string) (*store.Snapshot, error) {
	unlock, err := store.LockSnapshots(ctx, n.lay.SnapshotsDir(n.id))
	if err != nil {
		return nil, err
	}
	defer unlock()
	m, st, err := n.set.FindExact(ctx, n.id)
	if err != nil {
		return nil, err
	}
	room, err := n.checkCaps()
	if err != nil {
		return nil, err
	}
	var snap *store.Snapshot
	if vm, ok := m.(sandbox.Snapshotter); ok {
		snap, err = vm.Snapshot(ctx, n.id, name)
	} else {
		// A copy of files: a paused neuron's are as they were, and stay
		// paused.
		var root string
		if root, err = dataRoot(ctx, m, n.id, st.OverlayPath); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err // the copy below runs to its end once begun
		}
		snap, err = store.CreateSnapshotWithin(n.lay.SnapshotsDir(n.id), name, n.id, root, room)
	}
	if err != nil {
		return nil, err
	}
	n.event(ctx, events.SnapshotCreated, st, name)
	return snap, nil
}

// event records what happened to the neuron (as st describes it).
func (n *SetNeuron) event(ctx context.Context, typ events.Type, st *sandbox.State, snapshot string) {
	events.Open(n.lay).Append(events.Event{Type: typ, Neuron: n.id, Mode: st.Mode, Labels: st.Labels,
		Reason: "snapshot " + snapshot, Principal: events.PrincipalOf(ctx)}) // a record lost is no reason to fail the snapshot
}

// dataRoot is where the neuron's data is (sandbox.DataRooter): its
// overlay directory, unless its manager says otherwise.
func dataRoot(ctx context.Context, m sandbox.Manager, id, overlay string) (string, error) {
	if dr, ok := m.(sandbox.DataRooter); ok {
		return dr.DataRoot(ctx, id)
	}
	return overlay, nil
}

// checkCaps refuses a new snapshot past the home's caps on a neuron's
// snapshots (their number, their bytes together), and returns the bytes a
// new one may hold (0: no cap): snapshots take the host's disk, and a
// neuron (or its agent's snapshot tool, or its /ctx ctl) must not fill it
// with them.
func (n *SetNeuron) checkCaps() (room int64, err error) {
	env := n.set.Env()
	if env.MaxSnapshots <= 0 && env.MaxSnapshotBytes <= 0 {
		return 0, nil
	}
	all, err := store.ListSnapshots(n.lay.SnapshotsDir(n.id))
	if err != nil {
		return 0, err
	}
	var bytes int64
	for _, s := range all {
		bytes += s.Bytes
	}
	switch {
	case env.MaxSnapshots > 0 && len(all) >= env.MaxSnapshots:
		return 0, &sandbox.CapacityError{Reason: fmt.Sprintf("neuron %s has %d snapshots, the most it may keep (snapshots.max): remove one first (nsys-cortex snapshot rm)", n.id, len(all))}
	case env.MaxSnapshotBytes > 0 && bytes >= env.MaxSnapshotBytes:
		return 0, &sandbox.CapacityError{Reason: fmt.Sprintf("neuron %s's snapshots hold %d MiB, the most it may keep (snapshots.max_bytes %d MiB): remove one first", n.id, bytes>>20, env.MaxSnapshotBytes>>20)}
	case env.MaxSnapshotBytes > 0:
		// The copy itself stops at what is left.
		return env.MaxSnapshotBytes - bytes, nil
	}
	return 0, nil
}

// Snapshots lists the neuron's snapshots.
func (n *SetNeuron) Snapshots(context.Context) ([]store.Snapshot, error) {
	return store.ListSnapshots(n.lay.SnapshotsDir(n.id))
}

// RestoreSnapshot brings the neuron back as snapshot name left it. A
// whole-neuron snapshot is restored by the manager that took it (memory
// and processes too); a copy of files by stopping the neuron, restoring
// its overlay and starting it. A snapshot of the other kind is refused
// before the neuron is touched.
func (n *SetNeuron) RestoreSnapshot(ctx context.Context, name string) (_ *store.Snapshot, err error) {
	if err := store.CheckSnapshotName(name); err != nil {
		return nil, err
	}
	unlock, err := store.LockSnapshots(ctx, n.lay.SnapshotsDir(n.id))
	if err != nil {
		return nil, err
	}
	defer unlock()
	snap, err := store.ReadSnapshot(n.lay.SnapshotsDir(n.id), name)
	if err != nil {
		return nil, err
	}
	m, st, err := n.set.FindExact(ctx, n.id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			n.event(ctx, events.SnapshotRestored, st, name)
		}
	}()
	vm, whole := m.(sandbox.Snapshotter)
	if err := store.CheckRestore(snap, m.Mode(), whole); err != nil {
		return nil, err
	}
	if whole {
		n.dropClient() // the restore ends the VM it talks to
		if _, err := vm.Restore(ctx, n.id, name); err != nil {
			return nil, err
		}
		return snap, nil
	}
	err = n.stopped(ctx, func(overlay string) error {
		root, err := dataRoot(ctx, m, n.id, overlay)
		if err != nil {
			return err
		}
		snap, err = store.RestoreSnapshot(n.lay.SnapshotsDir(n.id), name, root)
		return err
	})
	return snap, err
}

// RemoveSnapshot deletes snapshot name of the neuron, once no other
// snapshot operation on it runs.
func (n *SetNeuron) RemoveSnapshot(ctx context.Context, name string) error {
	if err := store.CheckSnapshotName(name); err != nil {
		return err
	}
	unlock, err := store.LockSnapshots(ctx, n.lay.SnapshotsDir(n.id))
	if err != nil {
		return err
	}
	defer unlock()
	return store.RemoveSnapshot(n.lay.SnapshotsDir(n.id), name)
}

// dropClient forgets the channel: the next Client connects anew.
func (n *SetNeuron) dropClient() {
	n.mu.Lock()
	n.client = nil
	n.mu.Unlock()
}

// detached is no neuron at all: policy explanations without one. Paths are
// resolved lexically against its workdir and home.
type detached struct{ workdir, home string }

// ErrDetached is the error of a channel operation on a detached kit.
var ErrDetached = errors.New("no neuron: give one (--neuron ID) to run tools or resolve paths inside it")

// Detached returns a Neuron for explaining decisions without a neuron:
// relative paths are taken against /workspace and ~ is /home/agent (the
// docker mode's layout); symlinks are not resolved.
func Detached() Neuron { return &detached{workdir: "/workspace", home: "/home/agent"} }

func (d *detached) ID() string { return "(none)" }

func (d *detached) Client(context.Context) (*link.Client, error) { return nil, ErrDetached }

func (d *detached) State(context.Context) (*sandbox.State, error) {
	return &sandbox.State{ID: d.ID(), Workdir: d.workdir, Status: sandbox.StatusStopped}, nil
}
