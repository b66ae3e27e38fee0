package ctxfs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Caller is who asks: the uid and gid of the process at the other end.
type Caller struct{ UID, GID uint32 }

// Options build a Tree. Source is required; a nil Channel shows no
// processes or terminals, a nil Records no receipts, sessions or agents.
type Options struct {
	Source     Source
	Channel    Channel
	Controller Controller
	// Meter serves metrics.json (nil: it reads null).
	Meter Meter
	// Gate authorizes every write before it reaches the Controller; with
	// none, only the operator's writes are carried out.
	Gate    Gate
	Records Records
	Auditor Auditor
	// Owner is the operator: the mount's owner, who sees everything (uid 0
	// always does).
	Owner Caller
	// ReadOnly refuses every write, the operator's too.
	ReadOnly bool
	// Token is this mount's identity in the magic file (.cortexfs), which
	// Validate compares.
	Token string
}

// Tree is /ctx addressed by slash-separated paths relative to its root
// ("" is the root). It is safe for concurrent use.
type Tree struct {
	o Options
	// neuronWrites: neuron uids may write (ctl, input) once the mount was
	// validated as the real CortexFS (seed 003 §6).
	neuronWrites atomic.Bool

	mu   sync.Mutex
	last map[string]string // a ctl's path -> the result of its last command
	// seen is, per growing output file, the most bytes a read has served:
	// its size is never reported below that (the process list a size comes
	// from may lag the output a read just returned, and tail -f takes a
	// shrinking file for a truncated one and reads it again from the start).
	seen map[string]int64
}

// NewTree returns the tree over o.
func NewTree(o Options) *Tree {
	return &Tree{o: o, last: map[string]string{}, seen: map[string]int64{}}
}

// SetValidated lets neuron uids write ctl and input files: call it only
// after Validate confirmed the mount is this CortexFS.
func (t *Tree) SetValidated(ok bool) { t.neuronWrites.Store(ok) }

// kind is what a path names.
type kind uint8

const (
	kNone kind = iota
	kRoot
	kMagic
	kNeurons
	kNeuron
	kNStatus
	kNState
	kNPolicy
	kNHealth
	kNMetrics
	kNCtl
	kProcs
	kProc
	kPArgv
	kPStatus
	kPStdout
	kPStderr
	kPExit
	kPCtl
	kTerms
	kTerm
	kTMeta
	kTReplay
	kTScreen
	kTSize
	kTInput
	kTCtl
	kReceipts
	kReceipt
	kSessions
	kSession
	kSMeta
	kSTranscript
	kAgents
	kAgent
	kAgentFile
	kAudit
	kAuditLog
)

// ref is a resolved path.
type ref struct {
	kind   kind
	path   string
	neuron *Neuron
	proc   *protocol.ProcInfo
	host   *HostFile // receipts, agent files, transcripts, the audit log
	sess   *Session
	agent  *Agent
}

// Info describes an entry.
type Info struct {
	Name    string
	Dir     bool
	Perm    os.FileMode
	UID     uint32
	GID     uint32
	Size    int64
	ModTime time.Time
	// Growing files (output, replay, transcripts, the audit log) are
	// re-statted on every call and followed while open.
	Growing bool
	Ino     uint64
}

var (
	neuronFiles = []string{"status", "state.json", "policy.json", "health.json", "metrics.json", "ctl", "processes", "terminals", "receipts"}
	procFiles   = []string{"argv", "status", "stdout", "stderr", "exit", "ctl"}
	termFiles   = []string{"meta.json", "replay", "screen", "size", "input", "ctl"}
	neuronKinds = map[string]kind{"status": kNStatus, "state.json": kNState, "policy.json": kNPolicy, "health.json": kNHealth,
		"metrics.json": kNMetrics, "ctl": kNCtl, "processes": kProcs, "terminals": kTerms, "receipts": kReceipts}
	procKinds = map[string]kind{"argv": kPArgv, "status": kPStatus, "stdout": kPStdout, "stderr": kPStderr, "exit": kPExit, "ctl": kPCtl}
	termKinds = map[string]kind{"meta.json": kTMeta, "replay": kTReplay, "screen": kTScreen, "size": kTSize, "input": kTInput, "ctl": kTCtl}
)

func (k kind) dir() bool {
	switch k {
	case kRoot, kNeurons, kNeuron, kProcs, kProc, kTerms, kTerm, kReceipts, kSessions, kSession, kAgents, kAgent, kAudit:
		return true
	}
	return false
}

func (k kind) growing() bool {
	switch k {
	case kPStdout, kPStderr, kTReplay, kSTranscript, kAuditLog:
		return true
	}
	return false
}

func (k kind) writable() bool { return k == kNCtl || k == kPCtl || k == kTCtl || k == kTInput }

// operatorOnly areas hold facts about every neuron.
// The magic file's token is the mount's identity, which only the host's
// validation reads: a neuron has no use for it (and must not learn it).
func (k kind) operatorOnly() bool { return k >= kSessions || k == kMagic }

// operator reports whether c sees everything.
func (t *Tree) operator(c Caller) bool { return c.UID == 0 || c.UID == t.o.Owner.UID }

// mayRead reports whether c may see r.
func (t *Tree) mayRead(c Caller, r *ref) bool {
	if t.operator(c) {
		return true
	}
	if r.kind.operatorOnly() {
		return false
	}
	if r.neuron != nil {
		return r.neuron.UID >= 0 && uint32(r.neuron.UID) == c.UID
	}
	return true // the root, neurons/
}

// resolve finds what p names. Children of a neuron are checked against
// the caller so that a neuron's uid cannot even learn what another holds.
func (t *Tree) resolve(ctx context.Context, c Caller, p string) (*ref, error) {
	if p == "." || p == "/" {
		p = ""
	}
	p = strings.Trim(p, "/")
	r := &ref{kind: kRoot}
	if p == "" {
		return r, nil
	}
	parts := strings.Split(p, "/")
	for i, name := range parts {
		if name == "" || name == "." || name == ".." {
			return nil, ErrNotFound
		}
		next, err := t.child(ctx, r, name)
		if err != nil {
			return nil, err
		}
		next.path = strings.Join(parts[:i+1], "/")
		if !t.mayRead(c, next) {
			return nil, ErrNotFound // hidden: it is none of c's business
		}
		r = next
	}
	return r, nil
}

// child resolves name in directory r.
func (t *Tree) child(ctx context.Context, r *ref, name string) (*ref, error) {
	n := &ref{neuron: r.neuron, proc: r.proc, sess: r.sess, agent: r.agent}
	switch r.kind {
	case kRoot:
		switch name {
		case "neurons":
			n.kind = kNeurons
		case "sessions":
			n.kind = kSessions
		case "agents":
			n.kind = kAgents
		case "audit":
			n.kind = kAudit
		case ctxmount.MagicName:
			n.kind = kMagic
		}
	case kNeurons:
		if nr := t.o.Source.Snapshot().ByID[name]; nr != nil {
			n.kind, n.neuron = kNeuron, nr
		}
	case kNeuron:
		n.kind = neuronKinds[name]
	case kProcs, kTerms:
		for try := 0; try < 2 && n.kind == kNone; try++ {
			if try == 1 {
				// Not in a cached list: it may have started since.
				f, ok := t.o.Channel.(Forgetter)
				if !ok {
					break
				}
				f.ForgetProcesses(r.neuron.ID)
			}
			procs, err := t.procs(ctx, r.neuron)
			if err != nil {
				return nil, err
			}
			for i := range procs {
				if procs[i].Pty == (r.kind == kTerms) && procName(&procs[i]) == name {
					n.kind, n.proc = kProc, &procs[i]
					if r.kind == kTerms {
						n.kind = kTerm
					}
				}
			}
		}
	case kProc:
		n.kind = procKinds[name]
	case kTerm:
		n.kind = termKinds[name]
	case kReceipts:
		if t.o.Records != nil {
			list, err := t.o.Records.Receipts(ctx, r.neuron.ID)
			if err != nil {
				return nil, err
			}
			for i := range list {
				if list[i].Name == name {
					n.kind, n.host = kReceipt, &list[i]
				}
			}
		}
	case kSessions:
		if t.o.Records != nil {
			list, err := t.o.Records.Sessions(ctx)
			if err != nil {
				return nil, err
			}
			for i := range list {
				if list[i].ID == name {
					n.kind, n.sess = kSession, &list[i]
				}
			}
		}
	case kSession:
		switch name {
		case "meta.json":
			n.kind = kSMeta
		case "transcript.jsonl":
			n.kind, n.host = kSTranscript, &r.sess.Transcript
		}
	case kAgents:
		if t.o.Records != nil {
			list, err := t.o.Records.Agents(ctx)
			if err != nil {
				return nil, err
			}
			for i := range list {
				if list[i].Name == name {
					n.kind, n.agent = kAgent, &list[i]
				}
			}
		}
	case kAgent:
		for i := range r.agent.Files {
			if r.agent.Files[i].Name == name {
				n.kind, n.host = kAgentFile, &r.agent.Files[i]
			}
		}
	case kAudit:
		if name == "log" && t.o.Records != nil {
			n.kind, n.host = kAuditLog, &HostFile{Name: "log", Path: t.o.Records.AuditLog()}
		}
	}
	if n.kind == kNone {
		return nil, ErrNotFound
	}
	return n, nil
}

// procName is a process's or terminal's directory name: a terminal's id
// when it has one, otherwise its pid.
func procName(p *protocol.ProcInfo) string {
	if p.Pty && p.ID != "" {
		return p.ID
	}
	return strconv.Itoa(p.PID)
}

func (t *Tree) procs(ctx context.Context, n *Neuron) ([]protocol.ProcInfo, error) {
	if t.o.Channel == nil || !n.Running {
		return nil, nil
	}
	procs, err := t.o.Channel.Processes(ctx, n.ID)
	if errdefs.IsNotRunning(err) {
		return nil, nil // it stopped since the snapshot: nothing runs
	}
	return procs, err
}

// list returns the names in directory r that c may see.
func (t *Tree) list(ctx context.Context, c Caller, r *ref) ([]string, error) {
	var names []string
	switch r.kind {
	case kRoot:
		names = []string{"neurons"}
		if t.operator(c) {
			names = append(names, ctxmount.MagicName, "agents", "audit", "sessions")
		}
	case kNeurons:
		for _, n := range t.o.Source.Snapshot().Neurons {
			if t.mayRead(c, &ref{kind: kNeuron, neuron: n}) {
				names = append(names, n.ID)
			}
		}
	case kNeuron:
		names = neuronFiles
	case kProcs, kTerms:
		procs, err := t.procs(ctx, r.neuron)
		if err != nil {
			return nil, err
		}
		for i := range procs {
			if procs[i].Pty == (r.kind == kTerms) {
				names = append(names, procName(&procs[i]))
			}
		}
	case kProc:
		names = procFiles
	case kTerm:
		names = termFiles
	case kReceipts:
		if t.o.Records != nil {
			list, err := t.o.Records.Receipts(ctx, r.neuron.ID)
			if err != nil {
				return nil, err
			}
			for _, f := range list {
				names = append(names, f.Name)
			}
		}
	case kSessions:
		if t.o.Records != nil {
			list, err := t.o.Records.Sessions(ctx)
			if err != nil {
				return nil, err
			}
			for _, s := range list {
				names = append(names, s.ID)
			}
		}
	case kSession:
		names = []string{"meta.json", "transcript.jsonl"}
	case kAgents:
		if t.o.Records != nil {
			list, err := t.o.Records.Agents(ctx)
			if err != nil {
				return nil, err
			}
			for _, a := range list {
				names = append(names, a.Name)
			}
		}
	case kAgent:
		for _, f := range r.agent.Files {
			names = append(names, f.Name)
		}
	case kAudit:
		if t.o.Records != nil {
			names = []string{"log"}
		}
	default:
		return nil, syscall.ENOTDIR
	}
	return names, nil
}

// children resolves and describes every entry of directory r.
func (t *Tree) children(ctx context.Context, c Caller, r *ref) ([]*ref, []Info, error) {
	names, err := t.list(ctx, c, r)
	if err != nil {
		return nil, nil, err
	}
	refs := make([]*ref, 0, len(names))
	infos := make([]Info, 0, len(names))
	for _, name := range names {
		ch, err := t.child(ctx, r, name)
		if err != nil {
			continue // gone between list and lookup
		}
		ch.path = path.Join(r.path, name)
		info, err := t.stat(ctx, ch)
		if err != nil {
			continue
		}
		refs, infos = append(refs, ch), append(infos, info)
	}
	return refs, infos, nil
}

// Ino is the inode number of a path: stable for the mount's life.
func Ino(p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p))
	return h.Sum64()&(1<<62-1) | 1<<40 // clear of go-fuse's automatic numbers and the root's 1
}

// stat describes r. Sizes are exact: a generated file's size is the length
// of its content now.
func (t *Tree) stat(ctx context.Context, r *ref) (Info, error) {
	name := path.Base(r.path)
	if r.path == "" {
		name = "."
	}
	info := Info{Name: name, Dir: r.kind.dir(), UID: t.o.Owner.UID, GID: t.o.Owner.GID, Ino: Ino(r.path),
		ModTime: t.o.Source.Snapshot().At, Growing: r.kind.growing()}
	if r.path == "" {
		info.Ino = 1
	}
	switch {
	case info.Dir:
		info.Perm = 0o755
	case r.kind.writable():
		info.Perm = 0o660
	default:
		info.Perm = 0o440
	}
	if r.kind == kTInput {
		info.Perm = 0o220
	}
	if r.kind == kMagic {
		info.Perm = 0o444
	}
	if r.neuron != nil {
		// A neuron's subtree belongs to the uid its agent runs as, with the
		// operator's group: that uid and the operator, nobody else.
		if r.neuron.UID >= 0 {
			info.UID = uint32(r.neuron.UID)
		}
		info.ModTime = r.neuron.Created
		if r.kind.dir() {
			info.Perm = 0o750
		}
	}
	if r.kind.operatorOnly() {
		info.Perm &= 0o700
	}
	if r.proc != nil {
		info.ModTime = r.proc.Started
	}
	if r.host != nil && r.host.Path != "" && !r.kind.growing() {
		info.Size, info.ModTime = r.host.Size, r.host.ModTime
	}
	switch {
	case info.Dir:
	case r.kind.growing():
		size, mod, err := t.size(ctx, r)
		if err != nil {
			return Info{}, err
		}
		info.Size = size
		if !mod.IsZero() {
			info.ModTime = mod
		}
	case r.kind == kReceipt || r.kind == kAgentFile:
	case r.kind == kTInput:
	default:
		b, err := t.content(ctx, r)
		if err != nil {
			return Info{}, err
		}
		info.Size = int64(len(b))
	}
	return info, nil
}

// size is a growing file's current size.
func (t *Tree) size(ctx context.Context, r *ref) (int64, time.Time, error) {
	switch r.kind {
	case kPStdout, kPStderr, kTReplay:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return 0, time.Time{}, err
		}
		end := p.StdoutEnd
		if r.kind == kPStderr {
			end = p.StderrEnd
		}
		return t.grown(r, end), time.Time{}, nil
	default:
		fi, err := os.Stat(r.host.Path)
		if errors.Is(err, os.ErrNotExist) {
			return 0, time.Time{}, nil // the audit log before its first fact
		}
		if err != nil {
			return 0, time.Time{}, err
		}
		return fi.Size(), fi.ModTime(), nil
	}
}

// freshProc is r's process as the channel describes it now (within the
// channel's cache).
func (t *Tree) freshProc(ctx context.Context, r *ref) (*protocol.ProcInfo, error) {
	procs, err := t.procs(ctx, r.neuron)
	if err != nil {
		return nil, err
	}
	for i := range procs {
		if procs[i].PID == r.proc.PID {
			return &procs[i], nil
		}
	}
	return r.proc, nil // gone from the list: what we last knew
}

// content is a generated or small host file's whole content.
func (t *Tree) content(ctx context.Context, r *ref) ([]byte, error) {
	n := r.neuron
	switch r.kind {
	case kMagic:
		return []byte("cortexfs 1 " + t.o.Token + "\n"), nil
	case kNStatus:
		return n.Status, nil
	case kNState:
		return n.State, nil
	case kNPolicy:
		return n.Policy, nil
	case kNHealth:
		switch {
		case n.Paused:
			// Its agent is frozen: reading must not resume it.
			return []byte("{\"paused\":true,\"running\":false}\n"), nil
		case !n.Running || t.o.Channel == nil:
			return []byte("{\"running\":false}\n"), nil
		}
		return t.o.Channel.Health(ctx, n.ID)
	case kNMetrics:
		if t.o.Meter == nil {
			return []byte("null\n"), nil
		}
		return t.o.Meter.Metrics(ctx, n.ID)
	case kNCtl:
		return t.ctlText(r.path, "verbs: stop | restart | snapshot NAME | kill SIG | pause | resume\n"), nil
	case kPCtl:
		return t.ctlText(r.path, "verbs: signal SIG\n"), nil
	case kTCtl:
		return t.ctlText(r.path, "verbs: resize COLSxROWS | close\n"), nil
	case kPArgv:
		return []byte(shellQuote(r.proc.Argv) + "\n"), nil
	case kPStatus:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return nil, err
		}
		return []byte(procStatus(p)), nil
	case kPExit:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return nil, err
		}
		return []byte(exitText(p)), nil
	case kTMeta:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return nil, err
		}
		return jsonLine(p), nil
	case kTSize:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return nil, err
		}
		return []byte(strconv.Itoa(p.Cols) + "x" + strconv.Itoa(p.Rows) + "\n"), nil
	case kTScreen:
		p, err := t.freshProc(ctx, r)
		if err != nil {
			return nil, err
		}
		from := max(p.StdoutEnd-screenBytes, 0)
		b, err := t.o.Channel.Output(ctx, n.ID, p.PID, PTY, from, screenBytes)
		if err != nil {
			return nil, err
		}
		return renderScreen(b, p.Rows), nil
	case kSMeta:
		return r.sess.Meta, nil
	case kReceipt, kAgentFile:
		return os.ReadFile(r.host.Path)
	case kTInput:
		return nil, nil
	}
	return nil, syscall.EISDIR
}

// readAt reads a growing file.
// grown records that r's output reaches at least end, and returns the
// most it is known to reach.
func (t *Tree) grown(r *ref, end int64) int64 {
	key := fmt.Sprintf("%s/%d/%d", r.neuron.ID, r.proc.PID, r.kind)
	t.mu.Lock()
	defer t.mu.Unlock()
	if end > t.seen[key] {
		t.seen[key] = end
	}
	return t.seen[key]
}

func (t *Tree) readAt(ctx context.Context, r *ref, dest []byte, off int64) (int, error) {
	switch r.kind {
	case kPStdout, kPStderr, kTReplay:
		stream := map[kind]string{kPStdout: Stdout, kPStderr: Stderr, kTReplay: PTY}[r.kind]
		b, err := t.o.Channel.Output(ctx, r.neuron.ID, r.proc.PID, stream, off, len(dest))
		if err != nil {
			return 0, err
		}
		n := copy(dest, b)
		t.grown(r, off+int64(n))
		return n, nil
	default:
		f, err := os.Open(r.host.Path)
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		defer f.Close()
		n, err := f.ReadAt(dest, off)
		if err != nil && n > 0 || errors.Is(err, errEOF) {
			err = nil
		}
		return n, err
	}
}

// ctlText is a ctl file's content: its verbs, then its last command's
// result.
func (t *Tree) ctlText(p, usage string) []byte {
	t.mu.Lock()
	last := t.last[p]
	t.mu.Unlock()
	if last != "" {
		usage += "last: " + last + "\n"
	}
	return []byte(usage)
}

func (t *Tree) setLast(p, s string) {
	t.mu.Lock()
	t.last[p] = s
	t.mu.Unlock()
}

// WriteFile writes data into the file at p as caller would through the
// mount: a verb into a ctl, keys into input.
func (t *Tree) WriteFile(ctx context.Context, c Caller, p string, data []byte) error {
	r, err := t.resolve(ctx, c, p)
	if err != nil {
		return err
	}
	return t.write(ctx, c, r, data)
}
