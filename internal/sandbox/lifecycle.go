package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nsys-cortex/cortex/internal/archive"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/treediff"
)

// What a neuron carries besides its isolation (docs/lifecycle.md): labels,
// a deadline with the action it triggers, an idle rule; and the optional
// capabilities of a Manager that act on them.

// StatusPaused: every process of the neuron, its agent too, is stopped
// with its memory kept.
const StatusPaused Status = "paused"

// TimeoutAction is what happens to a neuron when its deadline passes.
type TimeoutAction string

// Timeout actions.
const (
	OnTimeoutStop    TimeoutAction = "stop"    // stop it; the data stays
	OnTimeoutDestroy TimeoutAction = "destroy" // the same: destroy keeps the data
	OnTimeoutPause   TimeoutAction = "pause"   // pause it, memory kept
	OnTimeoutWipe    TimeoutAction = "wipe"    // destroy it and delete its data
)

// ParseTimeoutAction checks an --on-timeout value ("" is stop).
func ParseTimeoutAction(s string) (TimeoutAction, error) {
	switch a := TimeoutAction(s); a {
	case "":
		return OnTimeoutStop, nil
	case OnTimeoutStop, OnTimeoutDestroy, OnTimeoutPause, OnTimeoutWipe:
		return a, nil
	}
	return "", &InvalidError{Reason: fmt.Sprintf("on-timeout %q: choose stop, pause, destroy or wipe", s)}
}

// Lifecycle is what the operator set about a neuron's life: kept in its
// record, shown in its State.
type Lifecycle struct {
	// Labels group the neuron; they outlive its runs (kept across destroy
	// and create, gone with a wipe).
	Labels labels.Set `json:"labels,omitempty"`
	// Deadline is when OnTimeout is applied (nil: never). It belongs to
	// one run: a stop clears it.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Timeout is the duration the deadline was last set from (for show).
	Timeout time.Duration `json:"timeoutNs,omitempty"`
	// OnTimeout is the action at the deadline.
	OnTimeout TimeoutAction `json:"onTimeout,omitempty"`
	// AutoPause pauses the neuron once it has been idle this long (0:
	// never). It belongs to one run, as the deadline does.
	AutoPause time.Duration `json:"autoPauseNs,omitempty"`
	// PausedAt is when the neuron was paused (nil: it is not).
	PausedAt *time.Time `json:"pausedAt,omitempty"`
	// ForkedFrom is the neuron this one was forked from, at ForkedAt
	// ("" and nil: it was not). They outlive its runs, as labels do.
	ForkedFrom string     `json:"forkedFrom,omitempty"`
	ForkedAt   *time.Time `json:"forkedAt,omitempty"`
}

// Copy returns a copy of l sharing nothing with it.
func (l Lifecycle) Copy() Lifecycle {
	c := l
	c.Labels = l.Labels.Clone()
	c.Deadline = copyTime(l.Deadline)
	c.PausedAt = copyTime(l.PausedAt)
	c.ForkedAt = copyTime(l.ForkedAt)
	return c
}

func copyTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// Expired reports whether l's deadline has passed at now.
func (l *Lifecycle) Expired(now time.Time) bool {
	return l.Deadline != nil && !now.Before(*l.Deadline)
}

// CheckLifecycle validates the lifecycle options of a create.
func (o *CreateOptions) CheckLifecycle() error {
	if err := o.Labels.Validate(); err != nil {
		return err
	}
	if o.Timeout < 0 {
		return &InvalidError{Reason: fmt.Sprintf("timeout %s is negative", o.Timeout)}
	}
	if o.AutoPause < 0 {
		return &InvalidError{Reason: fmt.Sprintf("auto-pause %s is negative", o.AutoPause)}
	}
	if _, err := ParseTimeoutAction(string(o.OnTimeout)); err != nil {
		return err
	}
	if o.OnTimeout != "" && o.Timeout == 0 {
		return &InvalidError{Reason: "on-timeout " + string(o.OnTimeout) + " needs a timeout (--timeout)"}
	}
	return nil
}

// Labeler is implemented by managers that keep labels with their neurons.
type Labeler interface {
	// SetLabels changes neuron id's labels (running or stopped) and
	// returns its state with them.
	SetLabels(ctx context.Context, id string, change labels.Change) (*State, error)
}

// Deadliner is implemented by managers that enforce deadlines.
type Deadliner interface {
	// SetTimeout gives running neuron id a new deadline d from now (0
	// clears it); action "" keeps the one it has (stop if none).
	SetTimeout(ctx context.Context, id string, d time.Duration, action TimeoutAction) (*State, error)
	// Enforce applies what is due to neuron id now: its deadline's action
	// if the deadline passed. It reports the action taken ("" for none).
	Enforce(ctx context.Context, id string, reason string) (TimeoutAction, error)
}

// PauseOptions shape a pause.
type PauseOptions struct {
	// ToDisk saves the whole machine to disk and lets its VMM exit (the
	// microVM modes); others refuse it with UnsupportedError.
	ToDisk bool
	// Reason is recorded with the event ("requested", "idle 5m0s",
	// "deadline passed").
	Reason string
}

// Pauser is implemented by managers that can pause neurons with their
// memory kept.
type Pauser interface {
	// Pause freezes every process of running neuron id. A paused neuron
	// answers ErrAlreadyPaused (and stays paused); a stopped one
	// NotRunningError.
	Pause(ctx context.Context, id string, opts PauseOptions) (*State, error)
	// Resume continues paused neuron id. A running one answers
	// ErrNotPaused (and runs on).
	Resume(ctx context.Context, id string) (*State, error)
}

// ForkOptions shape a fork.
type ForkOptions struct {
	// Labels replace the labels the forks take from their source (nil
	// keeps the source's).
	Labels labels.Set
}

// ExportOptions shape an export.
type ExportOptions struct {
	// Snapshots puts the neuron's snapshots in the archive too.
	Snapshots bool
}

// Exporter is implemented by managers that export and import neurons
// (docs/export.md).
type Exporter interface {
	// Export writes neuron id to w as one archive: its record, its data,
	// and with opts.Snapshots its snapshots. A running neuron is paused
	// for the copy and resumed after it.
	Export(ctx context.Context, id string, w io.Writer, opts ExportOptions) (*archive.Stats, error)
	// Import makes neuron id, stopped, from the archive ar was opened on
	// (its record's mode is this manager's); it verifies the whole archive
	// before anything of it is used, and a bad one leaves nothing.
	Import(ctx context.Context, id string, ar *archive.Reader) (*State, error)
}

// DiffOptions say what a neuron is compared with: Against, another
// neuron of its mode; Snapshot, a snapshot of Against (or of the neuron
// itself when Against is empty); neither, the neuron it was forked from.
type DiffOptions struct {
	Against  string
	Snapshot string
	// Patch adds unified diffs of text files.
	Patch bool
}

// Diff is what changed from the base (Against, or the snapshot) to the
// neuron.
type Diff struct {
	Neuron    string            `json:"neuron"`
	Against   string            `json:"against"`
	Changes   []treediff.Change `json:"changes"`
	Truncated bool              `json:"truncated,omitempty"`
}

// ParseDiffAgainst reads what a diff compares with: "" (the fork
// parent), a neuron's id, "ID@SNAPSHOT", or "@SNAPSHOT" (one of the
// neuron's own).
func ParseDiffAgainst(s string) (DiffOptions, error) {
	n, snap, hasSnap := strings.Cut(s, "@")
	if hasSnap && snap == "" {
		return DiffOptions{}, &InvalidError{Reason: fmt.Sprintf("%q: give the snapshot's name after @", s)}
	}
	if n != "" {
		if err := ids.Validate(n); err != nil {
			return DiffOptions{}, &InvalidError{Reason: err.Error()}
		}
	}
	if hasSnap {
		if err := store.CheckSnapshotName(snap); err != nil {
			return DiffOptions{}, &InvalidError{Reason: err.Error()}
		}
	}
	return DiffOptions{Against: n, Snapshot: snap}, nil
}

// Differ is implemented by managers that compare neurons' files
// (docs/diff.md).
type Differ interface {
	Diff(ctx context.Context, id string, o DiffOptions) (*Diff, error)
}

// MaxForks bounds the forks of one call.
const MaxForks = 100

// ForkIDs are the ids of count forks named after id: id itself for one
// (count 0 or 1), else id-1 ... id-count.
func ForkIDs(id string, count int) ([]string, error) {
	switch {
	case count < 0:
		return nil, &InvalidError{Reason: fmt.Sprintf("count %d is negative", count)}
	case count > MaxForks:
		return nil, &InvalidError{Reason: fmt.Sprintf("count %d: at most %d forks at once", count, MaxForks)}
	case count <= 1:
		return []string{id}, nil
	}
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", id, i+1)
	}
	return out, nil
}

// Forker is implemented by managers that fork neurons.
type Forker interface {
	// Fork makes a new neuron of each id in dsts (ids with no data yet),
	// running, with neuron src's data as it is at one instant: a running
	// src is paused for the copy and resumed after it (a microVM's forks
	// get its memory and processes too). The forks are ordinary neurons
	// afterwards; each remembers src (Lifecycle.ForkedFrom). A fork that
	// fails leaves nothing under its id; those made before it stay.
	Fork(ctx context.Context, src string, dsts []string, opts ForkOptions) ([]*State, error)
}

// ErrAlreadyPaused and ErrNotPaused are the no-ops of Pause and Resume:
// an error of class Exists, so a caller can say "already so" and carry on.
var (
	ErrAlreadyPaused = errdefs.New(errdefs.Exists, "it is paused already")
	ErrNotPaused     = errdefs.New(errdefs.Exists, "it is not paused")
)

// Metrics is a neuron's use of the machine at one moment.
type Metrics struct {
	ID   string    `json:"id"`
	At   time.Time `json:"at"`
	Mode string    `json:"mode"`
	// Status is running, paused or stopped (a stopped neuron has only
	// DiskBytes).
	Status Status `json:"status"`
	// CPUSeconds is the CPU time the neuron used since it started (every
	// process of it; for a VM, its VMM's).
	CPUSeconds float64 `json:"cpuSeconds"`
	// MemoryBytes, MemoryPeakBytes and MemoryLimitBytes: resident memory
	// now, the most it has had, and its ceiling (0: none known).
	MemoryBytes      int64 `json:"memoryBytes"`
	MemoryPeakBytes  int64 `json:"memoryPeakBytes,omitempty"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`
	// GuestMemoryBytes is what a VM's guest uses of its memory by its own
	// account (MemTotal less MemAvailable), as its agent says while it
	// runs; MemoryBytes is what its VMM holds of the host's.
	GuestMemoryBytes int64 `json:"guestMemoryBytes,omitempty"`
	// Pids is how many processes (tasks) it has.
	Pids int `json:"pids"`
	// DiskBytes is what its data takes on the host's disk.
	DiskBytes int64 `json:"diskBytes"`
	// EgressBytes and EgressConnections count what went through its egress
	// proxy (where egress is on; -1 otherwise).
	EgressBytes       int64 `json:"egressBytes"`
	EgressConnections int64 `json:"egressConnections"`
	// UptimeSeconds is the time since its agent started (0 when stopped).
	UptimeSeconds float64 `json:"uptimeSeconds"`
	// OOMKills counts processes the kernel killed for memory in it, where
	// the mode can tell.
	OOMKills int64 `json:"oomKills,omitempty"`
	// Source says where the figures come from ("cgroup v1", "/proc",
	// "vmm+agent", "docker stats").
	Source string `json:"source,omitempty"`
}

// MetricsReader is implemented by managers that can measure their neurons.
// Reading never resumes a paused neuron and never counts as a request.
type MetricsReader interface {
	Metrics(ctx context.Context, id string) (*Metrics, error)
}

// ErrNotWarmable is the class of a claim that a warm neuron cannot serve:
// the id has data already, or the options are not a warm neuron's. The
// caller creates the neuron cold.
var ErrNotWarmable = errors.New("a warm neuron cannot serve this create")

// Warmer is implemented by managers that can boot neurons before anyone
// names them, for a warm pool (internal/sandbox/pool): a create of a new
// id claims one and is answered at once.
type Warmer interface {
	// Warmable says why this mode cannot keep warm neurons here (nil
	// when it can).
	Warmable() error
	// WarmFor says what of opts a warm neuron (booted with the default
	// options) cannot give ("" when it can give all of it: labels,
	// environment and timeouts are given at the claim).
	WarmFor(opts CreateOptions) string
	// Warm boots one warm neuron and returns its name, which no create,
	// list or lookup knows.
	Warm(ctx context.Context) (string, error)
	// Claim makes warm neuron name neuron id, with opts: the same as a
	// create of id would give, with its own channel secret, overlay
	// directory and hostname. An error that wraps ErrNotWarmable (the id
	// has data, or opts ask for what WarmFor refuses) leaves the warm
	// neuron as it was; any other error has removed it.
	Claim(ctx context.Context, name, id string, opts CreateOptions) (*State, error)
	// Drop stops warm neuron name and removes all of it.
	Drop(ctx context.Context, name string) error
	// SweepWarm removes the warm neurons that no live process holds (a
	// daemon that was killed) and returns their names.
	SweepWarm(ctx context.Context) []string
}
