package ctxfs

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Neuron is one neuron as the model holds it. Nothing in it changes after
// it is published; the byte slices are served as they are.
type Neuron struct {
	ID string
	// UID is the host uid the neuron's agent runs as; that uid may read
	// the neuron's subtree. Negative: unknown (only the operator may).
	UID     int
	Running bool
	// Paused: its processes are stopped with their memory kept (Running
	// is false then). Nothing that only reads resumes it.
	Paused  bool
	Created time.Time
	// Status is one text line; State the API's JSON of the neuron; Policy
	// the isolation it runs under, as enforced (JSON).
	Status, State, Policy []byte
}

// Snapshot is the neurons at one moment, sorted by id. Snapshots are
// immutable: a change publishes a new one.
type Snapshot struct {
	Version uint64
	At      time.Time
	Neurons []*Neuron
	ByID    map[string]*Neuron
}

// NewSnapshot indexes neurons (which must be sorted by id).
func NewSnapshot(version uint64, at time.Time, neurons []*Neuron) *Snapshot {
	s := &Snapshot{Version: version, At: at, Neurons: neurons, ByID: make(map[string]*Neuron, len(neurons))}
	for _, n := range neurons {
		s.ByID[n.ID] = n
	}
	return s
}

// Source is the in-memory model ctxfs reads: it must answer from memory.
type Source interface {
	Snapshot() *Snapshot
}

// Forgetter is a Channel that caches process lists: a lookup of a name
// the cached list lacks asks it to forget the list and looks again.
type Forgetter interface {
	ForgetProcesses(neuron string)
}

// Output streams of a process.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	PTY    = "pty" // a terminal's output (its replay)
)

// Channel asks a running neuron's agent about its processes and health.
type Channel interface {
	// Health is the agent's health report as JSON.
	Health(ctx context.Context, neuron string) ([]byte, error)
	// Processes lists the neuron's background processes and terminals; it
	// may answer from a cache a fraction of a second old.
	Processes(ctx context.Context, neuron string) ([]protocol.ProcInfo, error)
	// Output reads up to max bytes of a stream from offset off (what the
	// agent still holds of it; bytes before its replay window read as
	// nothing).
	Output(ctx context.Context, neuron string, pid int, stream string, off int64, max int) ([]byte, error)
}

// Meter measures a neuron's use of the machine from the host's records
// (metrics.json): it never resumes a paused neuron and never counts as use
// of it.
type Meter interface {
	// Metrics is the neuron's metrics as JSON.
	Metrics(ctx context.Context, neuron string) ([]byte, error)
}

// Target kinds of a command.
const (
	TargetNeuron   = "neuron"
	TargetProcess  = "process"
	TargetTerminal = "terminal"
)

// Command is one verb written into a ctl (or input) file, checked.
type Command struct {
	Neuron string
	Target string // TargetNeuron, TargetProcess or TargetTerminal
	PID    int    // the process or terminal
	Verb   string // stop, restart, snapshot, kill, pause, resume, signal, resize, close, input
	Arg    string // the snapshot name, the signal
	Cols   int
	Rows   int
	Data   []byte // input's bytes
	// UID is who wrote it.
	UID uint32
}

// Controller carries out commands, through the same code path as the
// equivalent API call.
type Controller interface {
	Control(ctx context.Context, c *Command) error
}

// Gate authorizes every command written to /ctx before the Controller
// carries it out: the host's one authorization point (internal/gate).
// operator says the writer is the mount's owner (or root); otherwise it is
// the neuron itself, through its own subtree. An error refuses the write
// (EPERM), and what it says is what the ctl file reads next.
type Gate interface {
	Authorize(ctx context.Context, operator bool, c *Command) error
}

// HostFile is a file on the host that ctxfs shows read-only.
type HostFile struct {
	Name    string
	Path    string // read from here on every read
	Size    int64
	ModTime time.Time
}

// Session is one agent session: its transcript and a derived meta.json.
type Session struct {
	ID         string
	Meta       []byte
	Transcript HostFile
}

// Agent is an agent's definition files.
type Agent struct {
	Name  string
	Files []HostFile
}

// Records are the host-side records: launch receipts, sessions, agents
// and the audit log. Listings may come from a cache a second old.
type Records interface {
	Receipts(ctx context.Context, neuron string) ([]HostFile, error)
	Sessions(ctx context.Context) ([]Session, error)
	Agents(ctx context.Context) ([]Agent, error)
	AuditLog() string // the audit log's path
}

// Auditor records facts in the audit log (launch.Audit).
type Auditor interface {
	Record(event string, fields map[string]any) error
}

// Errors of the tree and its sources. Like every error, they are mapped
// to errnos by their class (Errno); a source may return any classed error
// (errdefs) as well.
var (
	ErrNotFound   = errdefs.New(errdefs.NotFound, "not found")
	ErrPermission = errdefs.New(errdefs.Permission, "permission denied")
	// ErrDenied: the gate refused the request (EPERM).
	ErrDenied  = errdefs.New(errdefs.PolicyDenied, "denied")
	ErrInvalid = errdefs.New(errdefs.Invalid, "invalid argument")
	// ErrReadOnly: the mount (or a neuron's view of it) takes no writes:
	// a permission failure that FUSE reports as EROFS.
	ErrReadOnly error = readOnly{}
)

// readOnly is ErrReadOnly; its errno travels in its chain, which Errno
// looks at first.
type readOnly struct{}

func (readOnly) Error() string        { return "read-only" }
func (readOnly) Class() errdefs.Class { return errdefs.Permission }
func (readOnly) Unwrap() error        { return syscall.EROFS }

// invalidf is an ErrInvalid with a reason.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
