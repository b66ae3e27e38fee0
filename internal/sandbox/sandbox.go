// Package sandbox defines how Cortex runs neurons, independent of the
// isolation that runs them.
//
// A neuron is an isolated Linux environment with an agent inside (see
// internal/agent) and a persistent overlay on the host that holds everything
// the neuron changed. A Manager runs neurons with one isolation mode
// ("process", "nsbox", "docker", ...); every mode implements the same
// interface and passes the same conformance suite (sandboxtest), so code
// above this package never asks which mode it talks to.
//
// Lifecycle of a neuron:
//
//	Create   the overlay is made (or found again: the same id gets its data
//	         back), a state file is written with pending=true, the agent is
//	         started and connects; pending is cleared. The neuron is running.
//	Connect  returns a typed client on the channel; any process may connect
//	         to a running neuron unless another process owns it exclusively.
//	(death)  an agent that dies flips the neuron to stopped; calls fail with
//	         NOT_RUNNING; its state file and sockets are released. The overlay
//	         stays, and the next Create with the same id replaces the corpse.
//	Destroy  stops the agent and everything it started; the overlay stays
//	         unless Wipe is set.
//
// Neurons outlive the process that created them: List and Get in one process
// see neurons another process created (state files with liveness checks, then
// overlay directories without one).
package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Status is where a neuron is in its lifecycle.
type Status string

// Statuses.
const (
	StatusPending Status = "pending" // being created
	StatusRunning Status = "running" // its agent is alive (StatusPaused: frozen)
	StatusStopped Status = "stopped" // only its overlay exists
	StatusUnknown Status = "unknown" // what runs it does not answer (a docker daemon that is down)
)

// State is the record of one neuron.
type State struct {
	ID     string `json:"id"`
	Mode   string `json:"mode"`
	Status Status `json:"status"`
	// PID is the agent's process id on the host (0 when stopped).
	PID int `json:"pid,omitempty"`
	// PIDStart is the agent's start time in clock ticks since boot, which
	// tells the agent apart from a later process that reused its pid.
	PIDStart uint64 `json:"pidStart,omitempty"`
	// SocketDir is the channel directory: hosts listen in it, the agent dials.
	SocketDir string `json:"socketDir,omitempty"`
	// Workdir is the workspace as seen inside the neuron (default cwd).
	Workdir string `json:"workdir"`
	// OverlayPath is the host directory that persists the neuron's changes.
	OverlayPath string    `json:"overlayPath"`
	CreatedAt   time.Time `json:"createdAt"`
	// Pending is true from before the agent starts until it has connected.
	Pending      bool   `json:"pending,omitempty"`
	AgentVersion string `json:"agentVersion,omitempty"`
	// Owner is the process that owns the neuron exclusively, if any.
	Owner *Owner `json:"owner,omitempty"`
	// Policy is what the running neuron's mode enforces: what its create
	// asked for, with the mode's defaults filled in. A neuron's policy is
	// its create's: a stopped neuron has none, and creating it again takes
	// the new create's options.
	Policy *Policy `json:"policy,omitempty"`
	// Lifecycle holds its labels, deadline and idle rule (docs/lifecycle.md).
	Lifecycle
}

// Policy is the isolation a neuron runs under, as enforced.
type Policy struct {
	Network Network `json:"network"`
	// Limits are the ceilings in force (a zero field: none).
	Limits Limits `json:"limits"`
	// Image is the root filesystem the neuron is based on ("" for the
	// mode's default).
	Image string `json:"image,omitempty"`
	// NestedUserns: the neuron's programs may create user namespaces of
	// their own (inner sandboxes such as bubblewrap).
	NestedUserns bool `json:"nestedUserns,omitempty"`
	// Ctx is the host's CortexFS mount shown at /ctx inside; CtxWritable
	// says whether it was validated at start (seed 003 §6), else read-only.
	Ctx         string `json:"ctx,omitempty"`
	CtxWritable bool   `json:"ctxWritable,omitempty"`
	// Secrets are the neuron's secrets, by name and hosts: never their
	// values, which are nowhere but in the egress proxy's memory.
	Secrets []SecretPolicy `json:"secrets,omitempty"`
}

// SecretPolicy is what a Policy says of a secret.
type SecretPolicy struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
}

// SecretNames lists p's secrets' names.
func (p *Policy) SecretNames() []string {
	var out []string
	for _, s := range p.Secrets {
		out = append(out, s.Name)
	}
	return out
}

// DataRooter is implemented by managers whose neurons' data may live on a
// filesystem of its own (a disk ceiling). DataRoot mounts it where it is
// not mounted (after the host restarted) and returns the directory that
// holds the neuron's data: that filesystem's root, or the overlay
// directory. A file copy snapshot is of that directory, and a restore
// goes into it, so a snapshot made with a disk restores into a neuron
// without one and the other way round.
type DataRooter interface {
	DataRoot(ctx context.Context, id string) (string, error)
}

// AgentUIDer is implemented by managers whose neurons' agents run as a
// host uid: what State.PID stands for differs by mode (the agent itself,
// a PID 1 above it, a VMM), so only the mode can say. /ctx lets that uid
// read the neuron's subtree.
type AgentUIDer interface {
	// AgentUID returns the host uid running neuron st's agent runs as, or
	// -1 when it cannot be told.
	AgentUID(st *State) int
}

// LogPather is implemented by managers that keep a log file per neuron.
type LogPather interface {
	// LogPath returns where neuron id's log is on the host.
	LogPath(ctx context.Context, id string) (string, error)
}

// Owner describes a process holding a neuron.
type Owner struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// CreateOptions shape a new neuron.
type CreateOptions struct {
	// Env is added to the neuron's environment (KEY=VALUE); nothing of the
	// operator's environment enters a neuron unless named here.
	Env []string
	// BootTimeout bounds the wait for the agent (default 10 s).
	BootTimeout time.Duration
	// Network says what the neuron may reach.
	Network Network
	// Limits are resource ceilings; zero fields take the mode's defaults.
	Limits Limits
	// Image is the root filesystem to base the neuron on (a directory, or a
	// name the mode knows); empty means the mode's default.
	Image string
	// NestedUserns lets the neuron's programs create user namespaces (and
	// mount inside them) for sandboxes of their own; denied by default.
	NestedUserns bool
	// Ctx is a CortexFS mount on the host (nsys-cortex mount DIR) to show
	// at /ctx inside: writable only if validated as that mount when the
	// neuron starts, read-only otherwise; the neuron's uid sees only its
	// own subtree. Modes without a mount namespace refuse it.
	Ctx string
	// Labels replace the neuron's labels (nil keeps those it has).
	Labels labels.Set
	// Timeout gives the neuron a deadline this long after it starts (0:
	// none); OnTimeout is what happens then ("" is stop).
	Timeout   time.Duration
	OnTimeout TimeoutAction
	// AutoPause pauses the neuron once idle this long (0: never).
	AutoPause time.Duration
	// Secrets are values the neuron never holds (nsbox, with network
	// egress): see Secret. They are not recorded anywhere: a neuron
	// created again without them has none.
	Secrets []Secret
}

// Secret is a value the neuron never holds: its environment gets a
// placeholder under Name, and the egress proxy puts Value in the
// placeholder's place in the headers of HTTPS requests to Hosts, and
// nowhere else.
type Secret struct {
	Name  string
	Value string
	// Hosts are "host" or "host:port" (443 when none is given); each must
	// be on the network allow-list.
	Hosts []string
}

// NetworkMode names what a neuron can reach.
type NetworkMode string

// Network modes.
const (
	// NetworkDefault is the mode's default: none wherever the mode can enforce it.
	NetworkDefault NetworkMode = ""
	// NetworkNone gives the neuron its loopback only.
	NetworkNone NetworkMode = "none"
	// NetworkEgress lets the neuron reach only the allow-listed destinations.
	NetworkEgress NetworkMode = "egress"
	// NetworkFull gives the neuron the host's network.
	NetworkFull NetworkMode = "full"
)

// ParseNetworkMode checks a network mode name.
func ParseNetworkMode(s string) (NetworkMode, error) {
	switch m := NetworkMode(s); m {
	case NetworkDefault, NetworkNone, NetworkEgress, NetworkFull:
		return m, nil
	}
	return "", &InvalidError{Reason: fmt.Sprintf("network %q: choose none, egress or full", s)}
}

// Network is a neuron's network policy.
type Network struct {
	Mode NetworkMode `json:"mode,omitempty"`
	// Allow lists what egress may reach: "host", "host:port", "*.domain",
	// "CIDR" or "CIDR:port".
	Allow []string `json:"allow,omitempty"`
}

// Limits are resource ceilings; a zero field means the mode's default.
type Limits struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int     `json:"pids,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	// DiskBytes bounds what the neuron's data may take on the host (a
	// filesystem of its own: writes past it fail with ENOSPC inside).
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// Refuse returns an UnenforceableError when opts ask for any isolation a
// mode that enforces none cannot give (a network other than full, limits,
// an image).
func (o *CreateOptions) Refuse(mode, why string) error {
	switch {
	case o.Network.Mode != NetworkDefault && o.Network.Mode != NetworkFull:
		return &UnenforceableError{Mode: mode, Policy: "network " + string(o.Network.Mode), Reason: why}
	case o.Limits.DiskBytes != 0:
		return &UnenforceableError{Mode: mode, Policy: "a disk ceiling", Reason: why}
	case o.Limits != Limits{}:
		return &UnenforceableError{Mode: mode, Policy: "resource limits", Reason: why}
	case o.Image != "":
		return &UnenforceableError{Mode: mode, Policy: "an image", Reason: why}
	case o.Ctx != "":
		return &UnenforceableError{Mode: mode, Policy: "a /ctx mount", Reason: why}
	}
	return nil
}

// DestroyOptions shape a destroy.
type DestroyOptions struct {
	// Wipe also deletes the overlay: the neuron's data is gone for good.
	Wipe bool
}

// Manager runs neurons in one isolation mode.
type Manager interface {
	// Mode names the isolation ("process", "nsbox", ...).
	Mode() string
	// Create starts neuron id, reattaching its overlay if one exists.
	Create(ctx context.Context, id string, opts CreateOptions) (*State, error)
	// Get returns the neuron's current state.
	Get(ctx context.Context, id string) (*State, error)
	// List returns every neuron this mode knows, running or stopped.
	List(ctx context.Context) ([]*State, error)
	// Destroy stops the neuron; with Wipe its overlay is deleted too.
	Destroy(ctx context.Context, id string, opts DestroyOptions) error
	// Connect returns a client on the running neuron's channel.
	Connect(ctx context.Context, id string) (*link.Client, error)
	// Close releases what this process holds (channels, locks); neurons keep running.
	Close() error
}

// OrphanCleaner is implemented by modes that can find agents no state file
// knows about. It is never called automatically.
type OrphanCleaner interface {
	CleanupOrphans(ctx context.Context) ([]string, error)
}

// DefaultBootTimeout bounds the wait for a new agent.
const DefaultBootTimeout = 10 * time.Second

// Copy returns a copy of s that shares nothing with it.
func (s *State) Copy() *State {
	c := *s
	if s.Owner != nil {
		o := *s.Owner
		c.Owner = &o
	}
	if s.Policy != nil {
		p := *s.Policy
		p.Network.Allow = append([]string(nil), s.Policy.Network.Allow...)
		c.Policy = &p
	}
	c.Lifecycle = s.Lifecycle.Copy()
	return &c
}

// Snapshotter is implemented by managers that snapshot and restore whole
// neurons themselves: memory, processes and disk (the microVM modes, whose
// files are a disk image the VM writes while it runs, so a copy of the
// overlay as files would catch a disk in the middle of writes). Code above
// sandbox asks for it by type assertion and uses it instead of copying
// the overlay.
//
// A snapshot is the directory layout.SnapshotsDir(id)/name. Its
// snapshot.json is a store.Snapshot with Mode set to the manager's mode, so
// store.ListSnapshots lists it beside copies of files, and
// store.CheckRestore tells the two apart.
//
//	Snapshot  saves running neuron id whole as name; the neuron runs on.
//	          A stopped neuron fails with NotRunningError, a name taken
//	          with store.ErrSnapshotExists.
//	Restore   stops neuron id if it runs and brings it back as snapshot
//	          name left it: its files, its memory, and its processes,
//	          which run on from where they were. Clients of the neuron
//	          from before are dead; connect again as after a Create. An
//	          unknown name fails with store.ErrSnapshotNotFound; a copy of
//	          files or another mode's snapshot with InvalidError, before
//	          anything is stopped.
type Snapshotter interface {
	Snapshot(ctx context.Context, id, name string) (*store.Snapshot, error)
	Restore(ctx context.Context, id, name string) (*State, error)
}
