//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Config configures an agent.
type Config struct {
	// ID is the neuron id, announced in the hello.
	ID string
	// Root confines file operations: every path must resolve inside it, and
	// symlinks may not lead out. "/" (or empty) means the whole filesystem,
	// for sandboxes whose own boundary is the confinement.
	Root string
	// Workdir is the default working directory and the base of relative paths.
	// It must lie inside Root.
	Workdir string
	// ChannelDir is watched for host sockets (*.sock); the agent dials each
	// one it finds and serves every host that listens there.
	ChannelDir string
	// Connect is a single host socket to dial instead of watching a directory.
	Connect string
	// Listen is a TCP address to listen on instead (docker's tcp
	// transport): the host dials, and must open with a hello that carries
	// Token; anyone else is dropped before the agent says anything.
	Listen string
	// Token is required of the host when listening.
	Token string
	// TokenCheck, when set, checks the host's token instead of comparing
	// it with Token (kube mode: a pod token the host signed for this pod,
	// internal/podtoken).
	TokenCheck func(token string) error
	// Secret is the neuron's per-start secret, handed over by whoever
	// started the agent (never through the neuron's disk or environment):
	// the agent answers each host's nonce with a proof of it.
	Secret string
	// Rebind, when set, is where the agent's PID 1 gives it a new identity
	// (boot.RebindFDFlag): read until it ends; the agent closes it.
	Rebind io.ReadWriteCloser
	// Version is this agent's software version.
	Version string
	// Subreaper makes the agent adopt orphaned descendants so that shutdown
	// ends them too.
	Subreaper bool
	// OOMScoreAdj is the agent's /proc/self/oom_score_adj, opened read and
	// write before the agent made itself non-dumpable (which gives the
	// file to root); nil opens it in New. See oomBias.
	OOMScoreAdj *os.File
	// SpawnCgroup, when set, is the cgroup.threads of the cgroup the
	// neuron's commands start in, opened for writing by the agent's PID 1
	// (boot.SpawnCgroupFDFlag); New moves the thread that starts them
	// there (see spawner) and closes it, or fails.
	SpawnCgroup *os.File
	// Egress, when set, is a loopback address where the neuron's
	// programs find their proxy (kube mode): each connection there goes
	// through the tunnel a host holds with egress_tunnel (egress.go).
	Egress string
	// EgressCADir and EgressCAPEM, when set, are where the agent writes
	// the authority of the neuron's egress proxy (a kube neuron's
	// secrets: EnvEgressCA), and its PEM; see writeEgressCA.
	EgressCADir string
	EgressCAPEM []byte
	// Env is the environment commands start from (each request's
	// variables over it); nil: the agent's own. A simulated kubelet that
	// runs agents in its process gives each its pod's (kubesim).
	Env []string
	// Logger receives diagnostics; nil means the standard logger.
	Logger *log.Logger
}

// Agent serves the protocol for one neuron.
type Agent struct {
	cfg Config
	// fsWatches counts the fs_watch requests open (maxFsWatches).
	fsWatches atomic.Int32
	fs        *fsys
	procs     *procTable
	terms     *termStore
	reaper    *reaper
	workers   *workers
	pid       int
	started   time.Time

	// ident is the neuron served and the secret proved: cfg's, until a
	// rebind (rebind.go).
	ident atomic.Pointer[ident]

	commands     atomic.Int64
	sessionCount atomic.Int64

	// conns are the sessions' connections, which shutdown closes before
	// it ends any process (closeConns).
	connsMu sync.Mutex
	conns   map[net.Conn]struct{}

	egress egressWay // with cfg.Egress

	// adopted is what an adopt gave a warm agent (adopt.go); adoptMu
	// makes one adopt at a time.
	adopted atomic.Pointer[adoption]
	adoptMu sync.Mutex

	stopOnce sync.Once
	stopped  chan struct{} // closed when Stop is called
	grace    time.Duration
}

// New checks cfg and returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.SpawnCgroup != nil {
		defer cfg.SpawnCgroup.Close() // used only here, by newSpawner
	}
	if cfg.Logger == nil {
		cfg.Logger = log.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if err := checkEgressAddr(cfg.Egress); err != nil {
		return nil, err
	}
	if cfg.EgressCADir != "" {
		if err := writeEgressCA(cfg.EgressCADir, cfg.EgressCAPEM); err != nil {
			return nil, err
		}
	}
	fs, err := newFsys(cfg.Root, cfg.Workdir)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, fs: fs, pid: os.Getpid(), started: time.Now(),
		stopped: make(chan struct{}), grace: 2 * time.Second}
	a.ident.Store(&ident{id: cfg.ID, secret: cfg.Secret})
	a.reaper = newReaper(cfg.Subreaper, newOOMBias(cfg.OOMScoreAdj, a.logf))
	if cfg.SpawnCgroup != nil {
		if a.reaper.spawner, err = newSpawner(cfg.SpawnCgroup); err != nil {
			return nil, err
		}
	}
	a.workers = newWorkers()
	a.procs = newProcTable(a)
	a.terms = newTermStore(filepath.Join(filepath.Dir(fs.workdir), ".cortex", "terminals"), a.logf)
	a.terms.load(a.procs)
	return a, nil
}

func (a *Agent) logf(format string, args ...any) { a.cfg.Logger.Printf(format, args...) }

// Stop asks the agent to shut down: Run returns after every child has ended.
func (a *Agent) Stop(grace time.Duration) {
	a.stopOnce.Do(func() {
		if grace > 0 {
			a.grace = grace
		}
		close(a.stopped)
	})
}

// Run connects to hosts and serves them until ctx is cancelled, Stop is
// called, a host sends shutdown, or the channel directory disappears. Before
// it returns, every process the agent started has been ended.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.Egress != "" {
		stopEgress, err := a.serveEgress(ctx, a.cfg.Egress)
		if err != nil {
			return err
		}
		defer stopEgress() // after cancel: it waits for the listener's connections
	}
	// On shutdown, processes are ended while the sessions wind down (their
	// requests wait for those processes), never after.
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-a.stopped:
		case <-ctx.Done():
		}
		cancel()
		// The hosts lose the agent before its processes end, as they
		// would if it died: a request waiting on a process (a terminal
		// followed) must fail NOT_RUNNING, not answer that its process
		// ended, which it could while its connection still stood.
		a.closeConns()
		a.procs.killAll(a.grace)
	}()
	if a.cfg.Rebind != nil {
		done := make(chan struct{})
		go func() { defer close(done); a.serveRebind() }()
		defer func() { a.cfg.Rebind.Close(); <-done }()
	}
	stopReaper := a.reaper.start()
	var err error
	switch {
	case a.cfg.Listen != "":
		err = a.listenLoop(ctx, a.cfg.Listen)
	case a.cfg.Connect != "":
		err = a.dialLoop(ctx, a.cfg.Connect)
	case a.cfg.ChannelDir != "":
		err = a.watchLoop(ctx, a.cfg.ChannelDir)
	default:
		err = errors.New("agent: no channel directory, socket or address to serve")
	}
	cancel()
	<-ended
	a.workers.close()
	stopReaper()
	a.reaper.spawner.stop()
	return err
}

// track records conn as a session's until the returned func is called.
func (a *Agent) track(conn net.Conn) (untrack func()) {
	a.connsMu.Lock()
	defer a.connsMu.Unlock()
	if a.conns == nil {
		a.conns = map[net.Conn]struct{}{}
	}
	a.conns[conn] = struct{}{}
	return func() {
		a.connsMu.Lock()
		delete(a.conns, conn)
		a.connsMu.Unlock()
	}
}

// closeConns closes every session's connection now.
func (a *Agent) closeConns() {
	a.connsMu.Lock()
	defer a.connsMu.Unlock()
	for c := range a.conns {
		c.Close()
	}
}

// ServeConn serves a single host connection until it ends (for tests and
// transports that hand the agent an established connection).
func (a *Agent) ServeConn(ctx context.Context, conn net.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return a.serve(ctx, conn)
}

// Close ends every process the agent started and its idle workers
// (ServeConn users call it).
func (a *Agent) Close() {
	a.procs.killAll(a.grace)
	a.workers.close()
	a.reaper.spawner.stop()
}

// dialLoop keeps one host socket connected, redialling with backoff.
func (a *Agent) dialLoop(ctx context.Context, path string) error {
	backoff := 5 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := protocol.DialUnix(ctx, path)
		if err == nil {
			backoff = 5 * time.Millisecond
			if serr := a.serve(ctx, conn); serr != nil {
				a.logf("session with %s: %v", path, serr)
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
	return nil
}

// listenLoop serves every host that connects to addr with the token, each
// in a session of its own, until ctx ends.
func (a *Agent) listenLoop(ctx context.Context, addr string) error {
	if a.cfg.Token == "" && a.cfg.TokenCheck == nil {
		return errors.New("agent: listening needs a token")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var sessions sync.WaitGroup
	defer sessions.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		sessions.Add(1)
		go func() {
			defer sessions.Done()
			if err := a.serve(ctx, conn); err != nil {
				a.logf("session with %s: %v", conn.RemoteAddr(), err)
			}
		}()
	}
}

func (a *Agent) dispatch(req *request) (any, []byte, error) {
	switch req.cmd {
	case protocol.CmdExec:
		return a.exec(req)
	case protocol.CmdFileWrite:
		return a.fileWrite(req)
	case protocol.CmdFileRead:
		return a.fileRead(req)
	case protocol.CmdFileList:
		return a.fileList(req)
	case protocol.CmdStat:
		return a.stat(req)
	case protocol.CmdFileExists:
		return a.fileExists(req)
	case protocol.CmdMkdir:
		return a.mkdir(req)
	case protocol.CmdResolvePath:
		return a.resolvePath(req)
	case protocol.CmdFileRemove:
		return a.fileRemove(req)
	case protocol.CmdFileMove:
		return a.fileMove(req)
	case protocol.CmdSymlink:
		return a.symlink(req)
	case protocol.CmdSearch:
		return a.searchCmd(req)
	case protocol.CmdPortDial:
		return a.portDial(req)
	case protocol.CmdFsWatch:
		return a.fsWatch(req)
	case protocol.CmdEgress:
		return a.egressTunnel(req)
	case protocol.CmdAdopt:
		return a.adopt(req)
	case protocol.CmdHealth:
		var args protocol.HealthArgs
		if err := req.decode(&args); err != nil {
			return nil, nil, err
		}
		h := a.health()
		if args.Usage {
			h.Usage = systemUsage()
		}
		return h, nil, nil
	case protocol.CmdShutdown:
		var args protocol.ShutdownArgs
		if err := req.decode(&args); err != nil {
			return nil, nil, err
		}
		// Answer first, then stop.
		req.after = append(req.after, func() { a.Stop(time.Duration(args.GraceMs) * time.Millisecond) })
		return struct{}{}, nil, nil
	case protocol.CmdProcStart:
		return a.procStart(req)
	case protocol.CmdPtySpawn:
		return a.ptySpawn(req)
	case protocol.CmdProcInput, protocol.CmdPtyWrite:
		return a.procInput(req)
	case protocol.CmdProcSignal:
		return a.procSignal(req)
	case protocol.CmdProcList:
		return a.procList(req)
	case protocol.CmdProcAttach:
		return a.procAttach(req)
	case protocol.CmdPtyRead:
		return a.ptyRead(req)
	case protocol.CmdPtyResize:
		return a.ptyResize(req)
	case protocol.CmdPtyClose:
		return a.ptyClose(req)
	}
	return nil, nil, protocol.Errorf(protocol.CodeUnsupported, "command %q is not supported by cortex-agent %s (protocol %s)",
		req.cmd, a.cfg.Version, protocol.Version())
}

func (a *Agent) health() *protocol.HealthResult {
	// The heap from runtime/metrics: runtime.ReadMemStats stops the world.
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(heap)
	procs, ptys := a.procs.counts()
	return &protocol.HealthResult{
		Version: a.cfg.Version, Protocol: protocol.Version(), PID: a.pid,
		UptimeMs: time.Since(a.started).Milliseconds(), RSSBytes: rss(), HeapBytes: int64(heap[0].Value.Uint64()),
		Commands: a.commands.Load(), Processes: procs, Ptys: ptys, Goroutines: runtime.NumGoroutine(),
		Sessions: int(a.sessionCount.Load()), Root: a.fs.root, Workdir: a.fs.workdir,
		Identity: identity(), Mounts: mounts(),
	}
}

// identity reads this process's credentials (and umask, without changing
// it) — what every command the agent starts inherits.
func identity() *protocol.Identity {
	id := &protocol.Identity{UID: os.Getuid(), GID: os.Getgid(), Umask: "unknown"}
	id.Groups, _ = os.Getgroups()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Umask:"); ok {
				id.Umask = strings.TrimSpace(v)
			}
		}
	}
	return id
}

// mounts reads what this process sees mounted.
func mounts() []protocol.Mount {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []protocol.Mount
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		access := "rw"
		for _, o := range strings.Split(f[3], ",") {
			if o == "ro" {
				access = "ro"
			}
		}
		out = append(out, protocol.Mount{Target: f[1], Type: f[2], Access: access})
	}
	return out
}

// rss reads the resident set size from /proc.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * int64(os.Getpagesize())
}
