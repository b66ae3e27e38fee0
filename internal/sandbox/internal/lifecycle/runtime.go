package lifecycle

import (
	"os"
	"os/exec"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// LegacyMode is the mode an overlay without a .mode marker belongs to.
const LegacyMode = "process"

// Runtime is what a backend adds to the common lifecycle: its overlay
// layout and how its agent starts.
type Runtime interface {
	// Mode names the backend.
	Mode() string
	// Allow says whether the backend may create a neuron now (nil) or why not.
	Allow() error
	// Workdir is the neuron's workdir as the neuron sees it.
	Workdir(lay layout.Layout, id string) string
	// Prepare makes the neuron's overlay ready under lay.OverlayDir(id),
	// refuses options the backend cannot enforce, and says what it will
	// enforce (opts with its defaults filled in).
	Prepare(lay layout.Layout, id string, opts sandbox.CreateOptions) (sandbox.Policy, error)
	// Start starts the agent detached from the caller (its own session) and
	// returns the process whose pid stands for the neuron: killing it ends
	// the neuron. Its stdout and stderr go to req.Log. A Tracker may return
	// no process (nil, nil): its neuron then runs with nothing of this
	// host's beside it (a detached container), and the tracker follows it.
	Start(req *StartRequest) (*exec.Cmd, error)
	// Released is called once a neuron's agent is gone for good (destroyed,
	// dead and cleared): the runtime frees what it held for it.
	Released(lay layout.Layout, id string)
}

// StartRequest is everything Start needs.
type StartRequest struct {
	ID        string
	Layout    layout.Layout
	AgentBin  string
	SocketDir string // host path of the channel directory
	Workdir   string // as the neuron sees it
	Log       *os.File
	Options   sandbox.CreateOptions
	// Secret is the neuron's per-start secret. Start hands it to the agent
	// outside the neuron's reach (a descriptor, a VM's config disk, a
	// container's environment that the agent clears before it starts
	// anything): never a file in the neuron, never an environment a
	// command inherits. Without it the agent cannot prove itself and the
	// host refuses it.
	Secret string
	// Warm is set when the neuron is booted for a warm pool, before
	// anyone named it: a runtime that can claim it (Claimer) keeps, in
	// Control, its end of the way it claims it.
	Warm    bool
	Control *os.File
}

// ChannelGrouper is implemented by runtimes whose channel directories are
// not grouped under their mode's name in sockets/ (layout.ChannelDir).
type ChannelGrouper interface {
	ChannelGroup() string
}

// SecretKeeper is implemented by runtimes whose next start must reuse a
// secret an agent already holds (a VM resumed from a snapshot, its agent
// and memory as they were).
type SecretKeeper interface {
	KeptSecret(lay layout.Layout, id string) (string, bool)
}

// SocketOwner is implemented by runtimes whose agent runs as another host
// user than the host process: the channel sockets are given to that user.
type SocketOwner interface {
	SocketOwner(lay layout.Layout, id string) (uid, gid int, ok bool)
}

// Tracker is implemented by runtimes whose neurons are not a host process
// tree the lifecycle can watch and signal itself (a container run by a
// daemon). Without it, a neuron is the process its state file names: alive
// while that pid (with that start time) is, ended by signals, found in
// /proc when its state file is lost.
type Tracker interface {
	// Alive reports whether the neuron st describes still runs; an error
	// means it cannot be told now (the daemon does not answer).
	Alive(lay layout.Layout, st *sandbox.State) (bool, error)
	// Stop ends neuron id and everything in it, gracefully first.
	Stop(lay layout.Layout, id string, st *sandbox.State)
	// Running lists this home's running neurons of the runtime, found
	// without their state files.
	Running(lay layout.Layout) ([]Running, error)
}

// LogSyncer is implemented by runtimes whose agent's output does not reach
// the neuron's log file (LogFile) as it is written (a detached container's
// goes to its daemon): SyncLog appends what is new to the log (OpenLog),
// once, before the log is read. The runtime's Tracker.Stop copies the rest
// before what holds it is gone.
type LogSyncer interface {
	SyncLog(lay layout.Layout, id string)
}

// Running is a running neuron found without its state file.
type Running struct {
	ID  string
	PID int // the host process that stands for it, if there is one
}

// FilePasser is implemented by runtimes whose agents reach the host's Unix
// socket directly, with no relay between (a VM's vsock relay passes bytes,
// not descriptors): the host then asks them for open files for large
// copies (link.Options.PassFiles).
type FilePasser interface {
	PassesFiles() bool
}

// HostViewer is implemented by runtimes whose neurons have a directory this
// host sees too (a bind mount): large files there are copied by the host
// directly, confined beneath it (see link.HostView).
type HostViewer interface {
	HostView(lay layout.Layout, id string) *link.HostView
}

// DataPather is implemented by runtimes whose neurons' layers are files
// the host can compare (diff): each DataPath is a directory of the data
// root (Rel) and the neuron's path it holds (At). A VM's files are inside
// its disk image, which has none.
type DataPather interface {
	DataPaths(lay layout.Layout, id string) []DataPath
}

// DataPath maps a directory of a neuron's data root to its path inside.
type DataPath struct{ At, Rel string }

// Dialer is implemented by runtimes whose agent may listen and the host
// dial (docker's tcp transport) instead of the host listening in the
// channel directory.
type Dialer interface {
	// Link returns a link that dials neuron id's agent, or nil when this
	// neuron's host listens as usual.
	Link(lay layout.Layout, id string, o link.Options) (*link.Link, error)
}

// Explainer is implemented by runtimes that can tell why a boot failed
// better than the log's tail (a missing image, a daemon that is down):
// Explain returns a typed error, or nil to keep the BootError.
type Explainer interface {
	Explain(lay layout.Layout, id string, boot *sandbox.BootError) error
}

// BootTimeouter is implemented by runtimes whose neurons take longer than
// sandbox.DefaultBootTimeout to boot (a container whose image a vfs daemon
// copies first).
type BootTimeouter interface {
	BootTimeout() time.Duration
}

// SecretProxy is implemented by a runtime whose egress proxy puts
// sandbox.Secrets into requests, so that the neuron never holds them.
// Creates with secrets fail on any other.
type SecretProxy interface {
	ProxiesSecrets()
}
