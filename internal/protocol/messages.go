package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version of the protocol. Peers with the same Major interoperate; a newer
// minor never sends a command or field the older side did not announce.
const (
	Major = 1
	Minor = 5
)

// Version returns "Major.Minor".
func Version() string { return fmt.Sprintf("%d.%d", Major, Minor) }

// ParseVersion parses "MAJOR.MINOR".
func ParseVersion(s string) (major, minor int, err error) {
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return 0, 0, fmt.Errorf("protocol version %q: want MAJOR.MINOR", s)
	}
	if major, err = strconv.Atoi(a); err != nil || major < 0 {
		return 0, 0, fmt.Errorf("protocol version %q: bad major", s)
	}
	if minor, err = strconv.Atoi(b); err != nil || minor < 0 {
		return 0, 0, fmt.Errorf("protocol version %q: bad minor", s)
	}
	return major, minor, nil
}

// Cmd names a request.
type Cmd string

// The commands. The first fifteen are the seed's; the rest add background
// processes and file operations. search came after release 1.0 (it is
// recorded in testdata/v1.1), port_dial after 1.1: a host finds them in
// the agent's caps.
const (
	CmdExec        Cmd = "exec"
	CmdFileWrite   Cmd = "file_write"
	CmdFileRead    Cmd = "file_read"
	CmdFileList    Cmd = "file_list"
	CmdStat        Cmd = "stat"
	CmdFileExists  Cmd = "file_exists"
	CmdMkdir       Cmd = "mkdir"
	CmdResolvePath Cmd = "resolve_path"
	CmdHealth      Cmd = "health"
	CmdShutdown    Cmd = "shutdown"
	CmdPtySpawn    Cmd = "pty_spawn"
	CmdPtyWrite    Cmd = "pty_write"
	CmdPtyRead     Cmd = "pty_read"
	CmdPtyResize   Cmd = "pty_resize"
	CmdPtyClose    Cmd = "pty_close"
	CmdProcStart   Cmd = "proc_start"
	CmdProcInput   Cmd = "proc_input"
	CmdProcSignal  Cmd = "proc_signal"
	CmdProcList    Cmd = "proc_list"
	CmdProcAttach  Cmd = "proc_attach"
	CmdFileRemove  Cmd = "file_remove"
	CmdFileMove    Cmd = "file_move"
	CmdSymlink     Cmd = "file_symlink"
	CmdSearch      Cmd = "search"
	CmdPortDial    Cmd = "port_dial"
	CmdFsWatch     Cmd = "fs_watch"
	CmdEgress      Cmd = "egress_tunnel"
	CmdAdopt       Cmd = "adopt"
)

// Commands returns every command this version defines.
func Commands() []Cmd {
	return []Cmd{CmdExec, CmdFileWrite, CmdFileRead, CmdFileList, CmdStat, CmdFileExists, CmdMkdir,
		CmdResolvePath, CmdHealth, CmdShutdown, CmdPtySpawn, CmdPtyWrite, CmdPtyRead, CmdPtyResize,
		CmdPtyClose, CmdProcStart, CmdProcInput, CmdProcSignal, CmdProcList, CmdProcAttach,
		CmdFileRemove, CmdFileMove, CmdSymlink, CmdSearch, CmdPortDial, CmdFsWatch, CmdEgress, CmdAdopt}
}

// Roles in a hello.
const (
	RoleAgent = "agent"
	RoleHost  = "host"
)

// Hello is the payload of the first frame each way.
type Hello struct {
	Protocol string `json:"protocol"` // "MAJOR.MINOR"
	Role     string `json:"role"`     // agent or host
	Software string `json:"software"` // e.g. "cortex-agent 0.1.0"
	// Caps lists the commands (and feature words) the sender accepts.
	Caps []string `json:"caps"`
	// Neuron is the id the agent serves.
	Neuron string `json:"neuron,omitempty"`
	PID    int    `json:"pid,omitempty"`
	// Token authenticates the host to an agent that listens where anyone
	// may connect (docker's tcp transport).
	Token string `json:"token,omitempty"`
	// Nonce is the host's challenge: a fresh random value per connection.
	Nonce string `json:"nonce,omitempty"`
	// Proof is the agent's answer to the host's Nonce (AgentProof): that it
	// holds the neuron's per-start secret, which nothing else in the
	// neuron can read.
	Proof string `json:"proof,omitempty"`
	// MaxBody is the largest body the sender accepts.
	MaxBody int `json:"maxBody,omitempty"`
	// Window is the initial stream credit the sender grants.
	Window int64 `json:"window,omitempty"`
}

// Stream names.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamStdin  = "stdin"
	StreamOutput = "output" // a PTY's merged output
	StreamGap    = "gap"    // bytes a replay could not return (overwritten in the ring)
	// StreamConnected is port_dial's first event: the connection is made.
	StreamConnected = "connected"
	// StreamReady is fs_watch's first event: changes from now on are seen.
	StreamReady = "ready"
	// StreamFs carries one change of a watched directory (FsEvent).
	StreamFs = "fs"
)

// PortDialArgs: connect to Port on the neuron's own loopback (127.0.0.1,
// else ::1), from inside its network namespace or guest. Once connected
// the agent sends a StreamConnected event; then what the host sends as
// input (StreamStdin frames, EOF half-closes) goes to the connection, and
// what the connection sends comes back as StreamStdout events. The
// request ends (PortDialResult) when the neuron's side ends. Nothing
// listening answers NOT_FOUND.
type PortDialArgs struct {
	Port int `json:"port"`
}

// egress_tunnel (protocol 1.5, no arguments) makes the request's streams
// the neuron's way out: an agent started with an egress listener (kube
// mode's pods) carries each connection its programs make there as a
// stream of a tunnel session over this request (the host's input is
// StreamStdin frames, the agent's output StreamStdout events), and the
// host's end serves the neuron's enforcing proxy on every stream. The
// agent answers StreamConnected once the request is its tunnel, and ends
// the request (EgressResult) when the host does. One host holds a
// neuron's tunnel at a time: another gets BAD_REQUEST until it ends. An
// agent with no egress listener answers NOT_FOUND.

// An adopt's environment is at most this many variables, of this many
// bytes together.
const (
	MaxAdoptEnv      = 4096
	MaxAdoptEnvBytes = 1 << 20
)

// AdoptArgs (adopt, protocol 1.5) make an agent that serves no neuron
// yet (a warm pod of kube mode's pool, started with no id) neuron
// Neuron's: its hellos name Neuron from then on, and every command it
// starts has NSYS_CORTEX_NEURON and Env over its own environment. An
// agent that serves Neuron already, with the same Env, answers as done
// (a retry, or another host); one that serves another neuron, or the
// same with another Env, answers BAD_REQUEST.
type AdoptArgs struct {
	Neuron string   `json:"neuron"`
	Env    []string `json:"env,omitempty"`
}

// EgressResult ends an egress_tunnel request.
type EgressResult struct {
	Sent     int64 `json:"sent"`     // bytes the host sent
	Received int64 `json:"received"` // bytes the agent sent
}

// FsWatchArgs asks for the changes of the directory Path (fs_watch,
// protocol 1.3), and of every directory under it with Recursive. The
// agent answers a StreamReady event once it watches, then one StreamFs
// event (FsEvent) per change, until the host cancels the request. No
// symlink is followed: a Path that is one is refused (BAD_REQUEST, as is
// one that is not a directory; NOT_FOUND when there is none), and a
// symlink under it is a name, not a directory to watch. A watch ends
// without an error when the directory goes, and with one when a recursive
// watch would take more than MaxWatchDirs directories, or when changes
// come faster than the host reads them (the kernel's queue overflowed:
// changes would be lost, so the watch says so rather than go on).
type FsWatchArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// MaxWatchDirs bounds the directories one recursive watch takes.
const MaxWatchDirs = 4096

// FsEvent is one change: Name is the path that changed, relative to the
// watched directory ('/'-separated), Op what happened to it.
type FsEvent struct {
	Name string `json:"name"`
	Op   string `json:"op"`
}

// The ops of an FsEvent. A move out of a watched directory is FsRename
// (of the old name), a move in is FsCreate (of the new one).
const (
	FsCreate = "create"
	FsWrite  = "write"
	FsRemove = "remove"
	FsRename = "rename"
	FsChmod  = "chmod"
)

// MaxFsEventName bounds an FsEvent's name.
const MaxFsEventName = 4096

// CheckFsEvent refuses an event no agent sends: an unknown op, or a name
// that is empty, too long, absolute, or leaves the watched directory.
// The host checks every event it is told (the neuron is not trusted).
func CheckFsEvent(ev FsEvent) error {
	switch ev.Op {
	case FsCreate, FsWrite, FsRemove, FsRename, FsChmod:
	default:
		return Errorf(CodeInternal, "fs_watch: the agent sent op %.40q", ev.Op)
	}
	if ev.Name == "" || len(ev.Name) > MaxFsEventName || strings.ContainsRune(ev.Name, 0) || strings.HasPrefix(ev.Name, "/") {
		return Errorf(CodeInternal, "fs_watch: the agent sent name %.80q", ev.Name)
	}
	for _, el := range strings.Split(ev.Name, "/") {
		if el == ".." || el == "." || el == "" {
			return Errorf(CodeInternal, "fs_watch: the agent sent name %.80q", ev.Name)
		}
	}
	return nil
}

// PortDialResult is what a port_dial carried.
type PortDialResult struct {
	Sent     int64 `json:"sent"`     // bytes from the host to the port
	Received int64 `json:"received"` // bytes from the port to the host
}

// Command is what to run: exactly one of Argv or Shell.
type Command struct {
	// Argv is run directly (Argv[0] looked up in PATH).
	Argv []string `json:"argv,omitempty"`
	// Shell is a command line run by /bin/sh -c.
	Shell string `json:"shell,omitempty"`
	// Cwd is the working directory; empty means the neuron's workdir.
	Cwd string `json:"cwd,omitempty"`
	// Env adds or replaces KEY=VALUE entries in the neuron's environment.
	Env []string `json:"env,omitempty"`
}

// Validate checks the command's shape.
func (c *Command) Validate() error {
	switch {
	case len(c.Argv) == 0 && c.Shell == "":
		return Errorf(CodeBadRequest, "command: give argv or shell")
	case len(c.Argv) > 0 && c.Shell != "":
		return Errorf(CodeBadRequest, "command: give argv or shell, not both")
	case len(c.Argv) > 0 && c.Argv[0] == "":
		return Errorf(CodeBadRequest, "command: argv[0] is empty")
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return Errorf(CodeBadRequest, "command: env entry %q is not KEY=VALUE", kv)
		}
	}
	return nil
}

// Stdin modes for exec.
const (
	StdinNone   = ""       // /dev/null
	StdinBody   = "body"   // the request body is all of stdin
	StdinStream = "stream" // stdin arrives in input frames, ended by one with EOF
)

// ExecArgs runs a command to completion.
type ExecArgs struct {
	Command
	Stdin string `json:"stdin,omitempty"`
	// TimeoutMs kills the command's process group after this long; 0 means none.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MaxOutput caps each of stdout and stderr kept in the result (bytes).
	// Without Stream it defaults to DefaultMaxOutput and may not exceed MaxExecOutput.
	MaxOutput int64 `json:"maxOutput,omitempty"`
	// Stream sends output as events while the command runs instead of in the result.
	Stream bool `json:"stream,omitempty"`
}

// Output caps for exec.
const (
	DefaultMaxOutput = 1 << 20
	MaxExecOutput    = (MaxBody - (1 << 20)) / 2
)

// ExecResult ends an exec. Without Stream the body is stdout followed by stderr.
type ExecResult struct {
	// ExitCode is the exit status; 128+N when killed by signal N; 127 when the
	// program was not found, 126 when it could not be run.
	ExitCode int `json:"exitCode"`
	// Signal names the signal that ended the process ("SIGKILL"), if one did.
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	StdoutLen       int64  `json:"stdoutLen"`
	StderrLen       int64  `json:"stderrLen"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	DurationUs      int64  `json:"durationUs"`
	PID             int    `json:"pid,omitempty"`
}

// Duration returns how long the command ran.
func (r *ExecResult) Duration() time.Duration { return time.Duration(r.DurationUs) * time.Microsecond }

// FileWriteArgs writes the request body into a file at Offset.
type FileWriteArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	// Truncate truncates the file first (only with Offset 0).
	Truncate bool `json:"truncate,omitempty"`
	// Append writes at the end, ignoring Offset.
	Append bool `json:"append,omitempty"`
	// Mode is the permission of a new file (default 0644).
	Mode uint32 `json:"mode,omitempty"`
	// Parents creates missing parent directories.
	Parents bool `json:"parents,omitempty"`
	// Atomic writes the body to a temporary file beside Path and renames it
	// over Path: readers see the old or the new content, never a mix.
	Atomic bool `json:"atomic,omitempty"`
	// Temp marks Path as the temporary file of an upload in progress: the
	// agent removes it if the connection ends before a file_move takes it
	// into place.
	Temp bool `json:"temp,omitempty"`
	// PassFile, with Temp, Offset 0 and no body, asks the agent to answer
	// with the temporary file it made, open for writing (CapPassFiles).
	PassFile bool `json:"passFile,omitempty"`
}

// FileWriteResult reports a write.
type FileWriteResult struct {
	Written int   `json:"written"`
	Size    int64 `json:"size"`
	// ModTime is the file's modification time after an atomic write
	// (since 1.1; zero from older agents and for other writes).
	ModTime time.Time `json:"modTime,omitzero"`
	// Ino is the file's inode number: a host that fills an upload's
	// temporary file through a host view checks it opened the very file
	// the agent made.
	Ino uint64 `json:"ino,omitempty"`
}

// FileReadArgs reads up to Length bytes at Offset; the body holds them.
type FileReadArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	// Length defaults to ChunkSize and may not exceed MaxBody.
	Length int64 `json:"length,omitempty"`
	// PassFile asks the agent to answer with the file itself, open for
	// reading, instead of its bytes (CapPassFiles): a regular file only;
	// Offset and Length are not used, the result's Size is its size.
	PassFile bool `json:"passFile,omitempty"`
}

// FileReadResult describes the bytes in the body.
type FileReadResult struct {
	N    int   `json:"n"`
	Size int64 `json:"size"`
	EOF  bool  `json:"eof"`
}

// File types in FileInfo.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// FileInfo describes a file.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path,omitempty"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"modTime"`
	Target  string    `json:"target,omitempty"` // a symlink's target
}

// PathArgs names one path.
type PathArgs struct {
	Path string `json:"path"`
}

// StatArgs stats a path; NoFollow reports a symlink itself.
type StatArgs struct {
	Path     string `json:"path"`
	NoFollow bool   `json:"noFollow,omitempty"`
}

// FileListArgs lists a directory, sorted by name, from entry Offset.
type FileListArgs struct {
	Path   string `json:"path"`
	Offset int    `json:"offset,omitempty"`
	// Limit defaults to (and may not exceed) MaxListEntries.
	Limit int `json:"limit,omitempty"`
}

// MaxListEntries is the most entries one file_list returns.
const MaxListEntries = 2000

// FileListResult is one page of a listing.
type FileListResult struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
	// More is true when entries after this page exist; Next is the offset
	// to ask for them with.
	More  bool `json:"more,omitempty"`
	Next  int  `json:"next,omitempty"`
	Total int  `json:"total"`
}

// ExistsResult answers file_exists.
type ExistsResult struct {
	Exists bool   `json:"exists"`
	Type   string `json:"type,omitempty"`
}

// MkdirArgs creates a directory (with its parents unless NoParents).
type MkdirArgs struct {
	Path      string `json:"path"`
	NoParents bool   `json:"noParents,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
}

// ResolveResult is an absolute path as seen inside the neuron.
type ResolveResult struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
}

// RemoveArgs removes a path; Recursive removes a directory tree.
type RemoveArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// MoveArgs renames From to To, replacing To unless NoReplace.
type MoveArgs struct {
	From      string `json:"from"`
	To        string `json:"to"`
	NoReplace bool   `json:"noReplace,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
}

// SymlinkArgs creates the symbolic link Path pointing at Target (stored as
// given; the file API never follows links that leave the root).
type SymlinkArgs struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// HealthArgs are health's optional arguments (a request without them is
// the plain health of 1.0).
type HealthArgs struct {
	// Usage asks for the system's use as the agent sees it (HealthResult.Usage):
	// it reads /proc, so only a caller that wants it asks.
	Usage bool `json:"usage,omitempty"`
}

// HealthResult reports the agent's state.
type HealthResult struct {
	Version    string `json:"version"`
	Protocol   string `json:"protocol"`
	PID        int    `json:"pid"`
	UptimeMs   int64  `json:"uptimeMs"`
	RSSBytes   int64  `json:"rssBytes"`
	HeapBytes  int64  `json:"heapBytes"`
	Commands   int64  `json:"commands"`
	Processes  int    `json:"processes"`
	Ptys       int    `json:"ptys"`
	Goroutines int    `json:"goroutines"`
	Sessions   int    `json:"sessions"`
	Root       string `json:"root"`
	Workdir    string `json:"workdir"`
	// Identity is who the agent, and so every command it starts, runs as.
	Identity *Identity `json:"identity,omitempty"`
	// Mounts are what the agent, and every command, sees mounted.
	Mounts []Mount `json:"mounts,omitempty"`
	// Usage is the system's use as the agent sees it, when asked for
	// (HealthArgs.Usage); an agent older than the field leaves it nil.
	Usage *SystemUsage `json:"usage,omitempty"`
}

// SystemUsage is what the agent's /proc says of the whole system: in a VM,
// the guest's own processes and memory, which the host cannot see. (Where
// the agent shares the host's kernel its memory is the host's: hosts read
// it for VM modes only.)
type SystemUsage struct {
	// Tasks counts the processes, kernel threads aside.
	Tasks int `json:"tasks"`
	// MemUsedBytes is MemTotal less MemAvailable; MemTotalBytes is MemTotal.
	MemUsedBytes  int64 `json:"memUsedBytes"`
	MemTotalBytes int64 `json:"memTotalBytes"`
}

// Identity is a process's credentials.
type Identity struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups"`
	Umask  string `json:"umask"`
}

// Mount is one mount point.
type Mount struct {
	Target string `json:"target"`
	Type   string `json:"type"`
	Access string `json:"access"` // ro or rw
}

// ShutdownArgs stops the agent: every child gets SIGTERM, then SIGKILL after GraceMs.
type ShutdownArgs struct {
	GraceMs int64 `json:"graceMs,omitempty"`
}

// ProcStartArgs starts a background process that outlives the request.
type ProcStartArgs struct {
	Command
	// Stdin keeps a pipe open for proc_input; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// RingBytes sizes each of the stdout and stderr replay buffers.
	RingBytes int `json:"ringBytes,omitempty"`
}

// Ring sizes for process output.
const (
	DefaultRingBytes = 1 << 20
	MaxRingBytes     = 64 << 20
)

// PtySpawnArgs starts a process on a new pseudo-terminal.
type PtySpawnArgs struct {
	Command
	Cols      int `json:"cols,omitempty"`
	Rows      int `json:"rows,omitempty"`
	RingBytes int `json:"ringBytes,omitempty"`
	// Hold keeps the terminal's output from its start for the first paced
	// follow (the spawner's own attachment, which comes a moment later):
	// held at most HoldFor, then released if no one came.
	Hold bool `json:"hold,omitempty"`
}

// HoldFor bounds how long a spawned terminal's output waits for its first
// paced follow.
const HoldFor = 10 * time.Second

// ProcRef names a process (or PTY) by its pid.
type ProcRef struct {
	PID int `json:"pid"`
}

// ProcInputArgs writes the body to a process's stdin (or PTY); EOF closes it.
type ProcInputArgs struct {
	PID int  `json:"pid"`
	EOF bool `json:"eof,omitempty"`
}

// ProcSignalArgs signals a process's whole process group.
type ProcSignalArgs struct {
	PID    int    `json:"pid"`
	Signal string `json:"signal"` // "TERM", "SIGKILL", "9", ...
}

// PtyResizeArgs resizes a PTY.
type PtyResizeArgs struct {
	PID  int `json:"pid"`
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ProcInfo describes a background process or PTY.
type ProcInfo struct {
	PID int `json:"pid"`
	// ID names a terminal for as long as its record is kept, across
	// restarts of the agent (pids are reused; terminal ids are not).
	ID        string    `json:"id,omitempty"`
	Argv      []string  `json:"argv"`
	Cwd       string    `json:"cwd"`
	Pty       bool      `json:"pty,omitempty"`
	Started   time.Time `json:"started"`
	Running   bool      `json:"running"`
	ExitCode  int       `json:"exitCode"`
	Signal    string    `json:"signal,omitempty"`
	Ended     time.Time `json:"ended,omitzero"`
	StdoutEnd int64     `json:"stdoutEnd"` // total bytes the process wrote to stdout (or the PTY)
	StderrEnd int64     `json:"stderrEnd"`
	Cols      int       `json:"cols,omitempty"`
	Rows      int       `json:"rows,omitempty"`
}

// ProcListResult lists processes and PTYs, newest last.
type ProcListResult struct {
	Processes []ProcInfo `json:"processes"`
}

// ProcAttachArgs replays a process's output from the given offsets and, with
// Follow, keeps streaming it until the process exits. Events carry Stream and
// Offset; a "gap" event says how many bytes were lost to the ring's bound.
type ProcAttachArgs struct {
	PID          int   `json:"pid"`
	StdoutOffset int64 `json:"stdoutOffset,omitempty"`
	StderrOffset int64 `json:"stderrOffset,omitempty"`
	Follow       bool  `json:"follow,omitempty"`
}

// PtyReadArgs reads a PTY's output from Offset. Without Follow it returns what
// is there (waiting up to WaitMs for something) in the body; with Follow it
// streams output events until the PTY's process exits.
type PtyReadArgs struct {
	PID    int   `json:"pid"`
	Offset int64 `json:"offset,omitempty"`
	Max    int   `json:"max,omitempty"`
	WaitMs int64 `json:"waitMs,omitempty"`
	Follow bool  `json:"follow,omitempty"`
	// Pace, with Follow, holds the terminal's output back while this
	// reader is behind, instead of losing it (the writer's attachment: a
	// terminal's flow control). Watchers do not pace; they may see gaps.
	Pace bool `json:"pace,omitempty"`
}

// PtyReadResult describes a non-following read: the body holds bytes
// [Offset, Next).
type PtyReadResult struct {
	Offset  int64     `json:"offset"`
	Next    int64     `json:"next"`
	Dropped int64     `json:"dropped,omitempty"`
	Info    *ProcInfo `json:"info,omitempty"`
}

// GapEvent is the payload of a "gap" event.
type GapEvent struct {
	Stream string `json:"stream"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
}
