package cortex

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// The types the channel and the API share are the channel's own.
type (
	// FileInfo describes a file in a neuron.
	FileInfo = protocol.FileInfo
	// ProcInfo describes a background process or a terminal.
	ProcInfo = protocol.ProcInfo
	// AgentHealth is what a neuron's agent reports about itself.
	AgentHealth = protocol.HealthResult
)

// Health is the daemon's own report (GET /v1/health).
type Health struct {
	Status   string   `json:"status"`
	Version  string   `json:"version"`
	Modes    []string `json:"modes"`
	UptimeMs int64    `json:"uptimeMs"`
}

// Neuron is one neuron as the API shows it.
type Neuron struct {
	ID           string    `json:"id"`
	Mode         string    `json:"mode"`
	Status       string    `json:"status"` // pending, running, paused, stopped, unknown
	PID          int       `json:"pid,omitempty"`
	Workdir      string    `json:"workdir"`
	CreatedAt    time.Time `json:"createdAt,omitzero"`
	AgentVersion string    `json:"agentVersion,omitempty"`
	Owner        *Owner    `json:"owner,omitempty"`
	Policy       *Policy   `json:"policy,omitempty"`
	// Labels group the neuron (kept across destroy and create; gone with
	// a wipe).
	Labels map[string]string `json:"labels,omitempty"`
	// Deadline is when OnTimeout is applied to the neuron (nil: never);
	// TimeoutMs is the timeout it was last set from.
	Deadline  *time.Time `json:"deadline,omitempty"`
	TimeoutMs int64      `json:"timeoutMs,omitempty"`
	OnTimeout string     `json:"onTimeout,omitempty"` // stop, pause, destroy or wipe
	// AutoPauseMs pauses the neuron once idle this long (0: never).
	AutoPauseMs int64 `json:"autoPauseMs,omitempty"`
	// PausedAt is when it was paused (status paused).
	PausedAt *time.Time `json:"pausedAt,omitempty"`
	// ForkedFrom is the neuron this one was forked from, at ForkedAt.
	ForkedFrom string     `json:"forkedFrom,omitempty"`
	ForkedAt   *time.Time `json:"forkedAt,omitempty"`
}

// PortURLRequest asks for a signed URL of a port (POST .../urls).
type PortURLRequest struct {
	Port int `json:"port"`
	// ExpiresInMs is how long the URL works (default an hour, at most 30
	// days).
	ExpiresInMs int64 `json:"expiresInMs,omitempty"`
}

// PortURL is a signed URL: whoever holds it reaches that port of that
// neuron through the daemon's proxy until ExpiresAt, without the token.
type PortURL struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Diff is what changed from a base (another neuron, a snapshot, the fork
// parent) to a neuron (GET .../diff).
type Diff struct {
	Neuron    string       `json:"neuron"`
	Against   string       `json:"against"`
	Changes   []DiffChange `json:"changes"`
	Truncated bool         `json:"truncated,omitempty"`
}

// DiffChange is one path that differs: Kind added, removed, modified or
// mode; Type file, dir, symlink or other.
type DiffChange struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Type    string `json:"type"`
	Size    int64  `json:"size,omitempty"`
	OldSize int64  `json:"oldSize,omitempty"`
	Mode    string `json:"mode,omitempty"`
	OldMode string `json:"oldMode,omitempty"`
	Link    string `json:"link,omitempty"`
	Patch   string `json:"patch,omitempty"`
}

// NeuronForkRequest asks for forks of a neuron (POST .../fork): one
// called ID, or Count of them called ID-1 ... ID-Count.
type NeuronForkRequest struct {
	ID    string `json:"id"`
	Count int    `json:"count,omitempty"`
	// Labels replace the source's labels on the forks (nil keeps them).
	Labels map[string]string `json:"labels,omitempty"`
}

// NeuronForks are the neurons a fork made, running.
type NeuronForks struct {
	Neurons []Neuron `json:"neurons"`
}

// Owner is the process that owns a neuron exclusively.
type Owner struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// Policy is the isolation a running neuron is under.
type Policy struct {
	Network      Network `json:"network"`
	Limits       Limits  `json:"limits"`
	Image        string  `json:"image,omitempty"`
	NestedUserns bool    `json:"nestedUserns,omitempty"`
	// Ctx is the host's CortexFS mount shown at /ctx inside, writable when
	// CtxWritable (validated when the neuron started).
	Ctx         string `json:"ctx,omitempty"`
	CtxWritable bool   `json:"ctxWritable,omitempty"`
	// Secrets are the neuron's secrets by name and hosts (never values).
	Secrets []SecretPolicy `json:"secrets,omitempty"`
}

// SecretPolicy is what a Policy says of a secret.
type SecretPolicy struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
}

// Network says what a neuron may reach: mode none, egress (with Allow) or full.
type Network struct {
	Mode  string   `json:"mode,omitempty"`
	Allow []string `json:"allow,omitempty"`
}

// Limits are resource ceilings; a zero field takes the mode's default.
type Limits struct {
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	Pids        int     `json:"pids,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	// DiskBytes bounds the neuron's data on the host (writes past it fail
	// with ENOSPC inside).
	DiskBytes int64 `json:"diskBytes,omitempty"`
}

// CreateRequest creates a neuron (POST /v1/neurons). Every field is
// optional: without an id a new one is made; without a mode the daemon's
// auto resolution picks one.
type CreateRequest struct {
	ID            string   `json:"id,omitempty"`
	Mode          string   `json:"mode,omitempty"`
	Env           []string `json:"env,omitempty"`
	Network       Network  `json:"network,omitzero"`
	Limits        Limits   `json:"limits,omitzero"`
	Image         string   `json:"image,omitempty"`
	BootTimeoutMs int64    `json:"bootTimeoutMs,omitempty"`
	// NestedUserns lets the neuron's programs run sandboxes of their own
	// (user namespaces); nsbox only.
	NestedUserns bool `json:"nestedUserns,omitempty"`
	// Labels replace the neuron's labels (absent: it keeps those it has).
	Labels map[string]string `json:"labels,omitempty"`
	// TimeoutMs gives the neuron a deadline this long after it starts;
	// OnTimeout is what happens then (stop, the default; pause; destroy,
	// which keeps the data; wipe).
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
	OnTimeout string `json:"onTimeout,omitempty"`
	// AutoPauseMs pauses the neuron once it has been idle this long.
	AutoPauseMs int64 `json:"autoPauseMs,omitempty"`
	// Secrets are values the neuron never holds (nsbox): its environment
	// gets a placeholder under each Name, and the egress proxy puts the
	// Value in its place in the headers of HTTPS requests to Hosts, and
	// nowhere else. A secret's hosts are added to the allow-list (network
	// egress). docs/secrets.md.
	Secrets []Secret `json:"secrets,omitempty"`
}

// Secret is one secret of a CreateRequest.
type Secret struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Hosts are "host" or "host:port" (443 when none is given).
	Hosts []string `json:"hosts"`
}

// Created is the answer to a create: the neuron, whether it was started
// (false: it was already running, and the request's options were not
// applied), and why its mode was chosen.
type Created struct {
	Neuron
	Started    bool   `json:"started"`
	ModeReason string `json:"modeReason,omitempty"`
}

// Command is what to run: Argv directly, or Shell through /bin/sh -c.
type Command struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
	Cwd   string   `json:"cwd,omitempty"`
	Env   []string `json:"env,omitempty"`
}

// ExecRequest runs a command to completion (POST /v1/neurons/{id}/exec).
type ExecRequest struct {
	Command
	// Stdin is the command's input (text); StdinBase64 is the same for
	// bytes. Without either the command reads /dev/null.
	Stdin       string `json:"stdin,omitempty"`
	StdinBase64 string `json:"stdinBase64,omitempty"`
	// TimeoutMs kills the command's process group after this long
	// (default 30000; 0 means the default, -1 none).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MaxOutput caps each of stdout and stderr kept in the result (bytes).
	MaxOutput int64 `json:"maxOutput,omitempty"`
}

// ExecResult is how a command ended. A non-zero exit status is a result,
// not an error. Output that is not UTF-8 comes base64-encoded in the
// *Base64 field instead; Output() returns the bytes either way.
type ExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutBase64    string `json:"stdoutBase64,omitempty"`
	StderrBase64    string `json:"stderrBase64,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	DurationMs      int64  `json:"durationMs"`
}

// Output returns stdout and stderr as bytes.
func (r *ExecResult) Output() (stdout, stderr []byte) {
	return Decoded(r.Stdout, r.StdoutBase64), Decoded(r.Stderr, r.StderrBase64)
}

// Chunk is a piece of output in a stream: Data when it is UTF-8 text,
// Base64 otherwise. Offset is its first byte's place in the stream.
type Chunk struct {
	Offset int64  `json:"offset"`
	Data   string `json:"data,omitempty"`
	Base64 string `json:"base64,omitempty"`
}

// Bytes returns the chunk's bytes.
func (c *Chunk) Bytes() []byte { return Decoded(c.Data, c.Base64) }

// EncodeChunk makes the chunk of p at off.
func EncodeChunk(off int64, p []byte) Chunk {
	text, b64 := Encoded(p)
	return Chunk{Offset: off, Data: text, Base64: b64}
}

// Encoded returns p as text when it is valid UTF-8, else as base64.
func Encoded(p []byte) (text, b64 string) {
	if utf8.Valid(p) {
		return string(p), ""
	}
	return "", base64.StdEncoding.EncodeToString(p)
}

// Decoded is Encoded's inverse (a bad base64 string gives nil).
func Decoded(text, b64 string) []byte {
	if b64 == "" {
		return []byte(text)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil
	}
	return b
}

// Gap says output from Stream was lost to the replay buffer's bound;
// the stream resumes at To.
type Gap struct {
	Stream string `json:"stream"`
	To     int64  `json:"to"`
}

// StartRequest starts a background process (POST .../processes).
type StartRequest struct {
	Command
	// Stdin keeps the process's stdin open for Input; otherwise it reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// RingBytes sizes each of the stdout and stderr replay buffers.
	RingBytes int `json:"ringBytes,omitempty"`
}

// SignalRequest signals a process's whole process group.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// MkdirRequest creates a directory and its parents.
type MkdirRequest struct {
	Path string `json:"path"`
}

// MoveRequest renames From to To (replacing To unless NoReplace).
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	NoReplace bool   `json:"noReplace,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
}

// SymlinkRequest creates the link Path pointing at Target.
type SymlinkRequest struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// PathResult names a path in a neuron.
type PathResult struct {
	Path string `json:"path"`
}

// Terminal control messages (WebSocket text frames). Input and output are
// binary frames.
type TermMessage struct {
	// Type: from the client "resize" or "close"; from the server
	// "started" (PID, ID), "gap" (output before Offset was lost to the
	// replay buffer), "exit" or "error".
	Type     string `json:"type"`
	ID       string `json:"id,omitempty"`
	Offset   int64  `json:"offset,omitempty"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	PID      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Code     Code   `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Snapshot is a saved neuron (GET /v1/neurons/{id}/snapshots). Kind is
// "files", a copy of the neuron's files, which a neuron of any mode that
// keeps its files as files restores; or "vm", the whole microVM (memory,
// processes and disk), which only a neuron of Mode restores.
type Snapshot struct {
	Name    string    `json:"name"`
	Neuron  string    `json:"neuron"`
	Created time.Time `json:"created"`
	// Files counts the regular files of a copy of files (1 for a VM's
	// disk); Bytes is the space the snapshot takes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Mode is the mode that took a "vm" snapshot.
	Mode string `json:"mode,omitempty"`
	Kind string `json:"kind"`
}

// SnapshotCreate names a new snapshot (POST /v1/neurons/{id}/snapshots):
// 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.
type SnapshotCreate struct {
	Name string `json:"name"`
}

// Restored is the answer to a restore: the snapshot restored and the
// neuron as it is after (running again; restarted, for a copy of files).
type Restored struct {
	Snapshot Snapshot `json:"snapshot"`
	Neuron   Neuron   `json:"neuron"`
}
