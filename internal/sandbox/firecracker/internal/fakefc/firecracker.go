package fakefc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/store"
)

// firecracker's flags (v1.10.1) and whether they take a value; the fake
// emulates the ones the jailer passes and the backend uses.
var firecrackerFlags = map[string]struct{ value, multi bool }{
	"api-sock": {value: true}, "id": {value: true}, "start-time-us": {value: true}, "start-time-cpu-us": {value: true},
	"parent-cpu-time-us": {value: true}, "config-file": {value: true}, "no-api": {}, "log-path": {value: true},
	"level": {value: true}, "module": {value: true}, "show-level": {}, "show-log-origin": {}, "metrics-path": {value: true},
	"boot-timer": {}, "no-seccomp": {}, "seccomp-filter": {value: true}, "http-api-max-payload-size": {value: true},
	"mmds-size-limit": {value: true}, "metadata": {value: true}, "version": {}, "describe-snapshot": {value: true},
}

var emulated = map[string]bool{"api-sock": true, "id": true, "start-time-us": true, "start-time-cpu-us": true,
	"parent-cpu-time-us": true, "version": true}

// FirecrackerMain is the fake Firecracker process: the API on --api-sock
// (inside the jail FAKEFC_ROOT stands for) with the real state machine, and
// a guest whose agent is a real cortex-agent serving in this process over
// the fake vsock device. It runs until killed.
func FirecrackerMain() {
	f, rest, err := parseFlags(os.Args[1:], firecrackerFlags)
	if err != nil || len(rest) > 0 {
		die("firecracker: %v", err)
	}
	if f["version"] != nil {
		fmt.Printf("Firecracker v%s\n\nSupported snapshot data format versions: v4.0.0\n", Version)
		os.Exit(0)
	}
	for k := range f {
		if !emulated[k] {
			die("fake firecracker: --%s is not emulated", k)
		}
	}
	cfg, err := LoadConfig()
	if err != nil {
		die("fake firecracker: %v", err)
	}
	spec, err := LoadSpec(cfg.Spec)
	if err != nil {
		die("fake firecracker: %v", err)
	}
	root := os.Getenv("FAKEFC_ROOT")
	if root == "" {
		root, _ = os.Getwd()
	}
	var as Identity
	if u, err := strconv.Atoi(os.Getenv("FAKEFC_UID")); err == nil && os.Geteuid() == 0 {
		g, _ := strconv.Atoi(os.Getenv("FAKEFC_GID"))
		as = Identity{UID: u, GID: g, Set: true}
	}
	id := "anonymous-instance"
	if v := f["id"]; v != nil {
		id = v[0]
	}
	sock := "/run/firecracker.socket"
	if v := f["api-sock"]; v != nil {
		sock = v[0]
	}
	calls := openCalls(cfg, id)
	g := &guest{cfg: cfg, instance: id}
	srv := NewServer(spec, root, id, Version, as, Hooks{Boot: g.boot, Pause: g.pause, Resume: g.resume, Save: g.save, Restore: g.restore}, calls)
	host := filepath.Join(root, filepath.Clean("/"+sock))
	if _, err := os.Lstat(host); err == nil {
		die("firecracker: Failed to open the API socket at %s: Address in use (os error 98)", sock)
	}
	ln, err := net.Listen("unix", host)
	if err != nil {
		die("firecracker: Failed to open the API socket at %s: %v", sock, err)
	}
	if as.Set {
		os.Lchown(host, as.UID, as.GID)
	}
	fmt.Fprintf(os.Stderr, "fake firecracker v%s: instance %s, API at %s\n", Version, id, sock)
	// Like the VMM as the init of its PID namespace, the fake takes no
	// signal but SIGKILL. (Caught, not ignored: an ignored signal would be
	// ignored by every command the guest's agent starts, too.)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for range sigs {
		}
	}()
	hs := &http.Server{Handler: srv}
	hs.Serve(ln) // until the process is killed
}

// openCalls returns a recorder appending to CallsDir/<id>.jsonl.
func openCalls(cfg *Config, id string) func(Call) {
	if cfg.CallsDir == "" {
		return func(Call) {}
	}
	os.MkdirAll(cfg.CallsDir, 0o755)
	out, err := os.OpenFile(filepath.Join(cfg.CallsDir, id+".jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		die("fake firecracker: %v", err)
	}
	var mu sync.Mutex
	return func(c Call) {
		b, _ := json.Marshal(c)
		mu.Lock()
		out.Write(append(b, '\n'))
		mu.Unlock()
	}
}

// ReadCalls reads the calls an instance's processes recorded, in order.
func ReadCalls(callsDir, id string) ([]Call, error) {
	b, err := os.ReadFile(filepath.Join(callsDir, id+".jsonl"))
	if err != nil {
		return nil, err
	}
	var out []Call
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// The guest's contract, as the image's PID 1 (internal/agent/vminit)
// keeps it; the fake's guest keeps it too.
const (
	serialOverlay = "cortex-overlay"
	serialConfig  = "cortex-config"
	opRestored    = "restored"
	opPoweroff    = "poweroff"
	opPing        = "ping"
)

// guestConfig is the config disk's JSON (boot.VMConfig).
type guestConfig struct {
	ID           string   `json:"id"`
	Workdir      string   `json:"workdir"`
	Env          []string `json:"env"`
	Pids         int      `json:"pids,omitempty"`
	NestedUserns bool     `json:"nestedUserns,omitempty"`
	VsockPort    int      `json:"vsockPort,omitempty"`
	CtlVsockPort int      `json:"ctlVsockPort,omitempty"`
	// Secret is the per-start secret the agent proves to every host.
	Secret string `json:"secret,omitempty"`
}

// ctlRequest and ctlReply are the control port's lines (vminit's).
type ctlRequest struct {
	Op     string       `json:"op"`
	Time   time.Time    `json:"time,omitzero"`
	Seed   []byte       `json:"seed,omitempty"`
	Rebind *boot.Rebind `json:"rebind,omitempty"`
}

type ctlReply struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Time  time.Time `json:"time"`
}

// CtlRecord is a control request as the fake guest recorded it.
type CtlRecord struct {
	Instance string    `json:"instance"`
	Op       string    `json:"op"`
	Time     time.Time `json:"time,omitzero"`
	SeedLen  int       `json:"seedLen,omitempty"`
	// Rebind is the neuron a restored machine was told it serves now, and
	// Served how many host connections its agent had been given by then.
	Rebind string `json:"rebind,omitempty"`
	Served int    `json:"served"`
}

// guest is the fake VM's inside, as the image's PID 1 runs it: it reads
// its config disk, serves each host connection to the agent's vsock port
// by placing a socket in the agent's channel directory (the agent, its
// ordinary self, dials it), and serves the control port.
type guest struct {
	cfg      *Config
	instance string

	mu     sync.Mutex
	conf   guestConfig
	mux    *Muxer
	cancel context.CancelFunc
	ended  chan struct{} // closed when the agent's Run has returned
	seq    int
	home   string   // the directory under GuestRoot holding the guest's homes
	rebind *os.File // PID 1's end of the agent's rebind socket
}

// savedGuest is the fake guest's state in a snapshot: its configuration
// and a copy of its homes, as a real snapshot's disk holds them.
type savedGuest struct {
	guestConfig
	HomeCopy string `json:"homeCopy,omitempty"`
}

// boot starts the guest; it listens after the boot delay.
func (g *guest) boot(vm *VM) {
	g.start(vm, time.Duration(g.cfg.BootDelayMs)*time.Millisecond)
}

// readConfig reads the config disk (the drive whose id, the guest's
// serial number, is cortex-config).
func readConfig(vm *VM) (guestConfig, error) {
	var c guestConfig
	for _, d := range vm.Drives {
		if d.ID != serialConfig {
			continue
		}
		if !d.ReadOnly {
			return c, fmt.Errorf("the config disk is writable")
		}
		b, err := os.ReadFile(filepath.Join(os.Getenv("FAKEFC_ROOT"), filepath.Clean("/"+d.Path)))
		if err != nil {
			return c, err
		}
		if err := json.Unmarshal(bytes.TrimRight(b, "\x00"), &c); err != nil {
			return c, fmt.Errorf("the config disk does not decode: %w", err)
		}
		if c.ID == "" || c.Workdir == "" || len(c.Env) == 0 {
			return c, fmt.Errorf("the config disk names no neuron, workdir or environment")
		}
		return c, nil
	}
	return c, fmt.Errorf("no config disk (a drive with id %s)", serialConfig)
}

func (g *guest) start(vm *VM, delay time.Duration) { g.startFrom(vm, delay, "") }

// startFrom starts the guest, its homes a copy of restored (a snapshot's)
// when set.
func (g *guest) startFrom(vm *VM, delay time.Duration, restored string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancel != nil {
		return // one guest per process: a VM boots once, a load follows nothing
	}
	conf, err := readConfig(vm)
	if err != nil || vm.Muxer == nil {
		// An init without its configuration or channel panics; the VM stays up, mute.
		fmt.Fprintf(os.Stderr, "fake guest: %v (vsock configured: %v)\n", err, vm.Muxer != nil)
		return
	}
	g.conf, g.mux = conf, vm.Muxer
	if err := g.mountHome(vm, restored); err != nil {
		die("fake guest: %v", err)
	}
	// The agent's commands inherit the configured environment, and nothing
	// of the host's.
	os.Clearenv()
	for _, kv := range conf.Env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	if err := os.MkdirAll(conf.Workdir, 0o755); err != nil {
		die("fake guest: %v", err)
	}
	chanDir, err := os.MkdirTemp("", "fake-guest-channel")
	if err != nil {
		die("fake guest: %v", err)
	}
	// The agent takes new identities from PID 1 (a fork), as
	// boot.RebindFDFlag gives it one in a real guest.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		die("fake guest: %v", err)
	}
	g.rebind = os.NewFile(uintptr(pair[0]), "rebind")
	a, err := agent.New(agent.Config{ID: conf.ID, Root: "/", Workdir: conf.Workdir, ChannelDir: chanDir, Secret: conf.Secret,
		Rebind: os.NewFile(uintptr(pair[1]), "rebind-agent"), Version: "fake-guest", Logger: log.New(os.Stderr, "fake guest: ", log.LstdFlags)})
	if err != nil {
		die("fake guest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.ended = cancel, make(chan struct{})
	go func() {
		defer close(g.ended)
		if err := a.Run(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "fake guest: the agent stopped: %v\n", err)
		}
	}()
	mux := vm.Muxer
	go func() {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		mux.GuestListen(uint32(conf.VsockPort), func(c net.Conn) { g.toAgent(ctx, chanDir, c) })
		select {
		case <-time.After(time.Duration(g.cfg.CtlDelayMs) * time.Millisecond):
		case <-ctx.Done():
			return
		}
		mux.GuestListen(uint32(conf.CtlVsockPort), func(c net.Conn) { g.control(c) })
	}()
}

// toAgent places a socket for one host connection in the agent's channel
// directory, takes the agent's connection to it, and joins the two.
func (g *guest) toAgent(ctx context.Context, chanDir string, host net.Conn) {
	defer host.Close()
	g.mu.Lock()
	g.seq++
	name := fmt.Sprintf("vsock-%d", g.seq)
	g.mu.Unlock()
	tmp, final := filepath.Join(chanDir, "."+name), filepath.Join(chanDir, name+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return
	}
	defer os.Remove(final)
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	ac, err := ln.Accept()
	if err != nil {
		return
	}
	defer ac.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(ac, host); done <- struct{}{} }()
	go func() { io.Copy(host, ac); done <- struct{}{} }()
	<-done
}

// control serves one control connection: one JSON line each way per
// request. The fake records what it was asked instead of setting the
// clock or the RNG of the machine it runs on.
func (g *guest) control(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req ctlRequest
		reply := ctlReply{OK: true}
		if err := json.Unmarshal(line, &req); err != nil {
			reply = ctlReply{Error: err.Error()}
		}
		switch req.Op {
		case opPing, opPoweroff:
		case opRestored:
			if req.Time.IsZero() || len(req.Seed) < 32 {
				reply = ctlReply{Error: "restored: needs the time and a seed of at least 32 bytes"}
			} else if req.Rebind != nil && g.cfg.RefuseRebind {
				reply = ctlReply{Error: "this guest takes no new identity"}
			} else if req.Rebind != nil {
				if err := boot.SendRebind(g.rebind, req.Rebind, 10*time.Second); err != nil {
					reply = ctlReply{Error: err.Error()}
				}
			}
		default:
			reply = ctlReply{Error: fmt.Sprintf("unknown operation %q", req.Op)}
		}
		rec := CtlRecord{Instance: g.instance, Op: req.Op, Time: req.Time, SeedLen: len(req.Seed)}
		if req.Rebind != nil {
			g.mu.Lock()
			rec.Rebind, rec.Served = req.Rebind.Neuron, g.seq
			g.mu.Unlock()
		}
		g.record(rec)
		reply.Time = time.Now()
		b, _ := json.Marshal(reply)
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
		if reply.OK && req.Op == opPoweroff {
			g.powerOff()
		}
	}
}

func (g *guest) record(r CtlRecord) {
	if g.cfg.CtlLog == "" {
		return
	}
	f, err := os.OpenFile(g.cfg.CtlLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(r)
	f.Write(append(b, '\n'))
}

// powerOff ends the agent (and everything it started), then the VM: the
// guest resets, and Firecracker exits.
func (g *guest) powerOff() {
	g.mu.Lock()
	cancel, ended := g.cancel, g.ended
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		select {
		case <-ended: // the agent has ended its processes
		case <-time.After(5 * time.Second):
		}
	}
	fmt.Fprintln(os.Stderr, "fake guest: powered off")
	os.Exit(0)
}

// ReadCtl reads the control requests the fake guests recorded.
func ReadCtl(path string) ([]CtlRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []CtlRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r CtlRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// mountHome binds the guest's root and agent homes, from a directory that
// belongs to the VM's overlay disk, where the image has them, in the fake
// VM's own mount namespace: a neuron created again finds its files, a
// wiped one (a new disk) does not, and the host sees none of it. A
// restored guest gets a copy of the homes its snapshot saved (restored),
// and the disk it was restored with is marked as theirs.
func (g *guest) mountHome(vm *VM, restored string) error {
	disk := ""
	for _, d := range vm.Drives {
		if d.ID == serialOverlay {
			disk = filepath.Join(os.Getenv("FAKEFC_ROOT"), filepath.Clean("/"+d.Path))
		}
	}
	key := "no-overlay-disk"
	if disk != "" {
		key = diskKey(disk)
	}
	if restored != "" && disk != "" {
		key = fmt.Sprintf("restored-%d-%d", os.Getpid(), time.Now().UnixNano())
		if err := copyHome(filepath.Join(g.cfg.GuestRoot, restored), filepath.Join(g.cfg.GuestRoot, key)); err != nil {
			return err
		}
		if err := unix.Setxattr(disk, homeXattr, []byte(key), 0); err != nil {
			return fmt.Errorf("marking the restored disk: %w", err)
		}
	}
	dir := filepath.Join(g.cfg.GuestRoot, key)
	if h := os.Getenv("FAKEFC_GUEST_HOME"); h != "" {
		// No mount namespace (not root): the homes stay where they are, and
		// the configured ones are pointed there.
		return fmt.Errorf("the fake guest needs root for its mount namespace (it got %s)", h)
	}
	for _, m := range []struct{ sub, at string }{{"root", "/root"}, {"home", GuestHome}} {
		src := filepath.Join(dir, m.sub)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(m.at, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(src, m.at, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", m.at, err)
		}
	}
	g.home = key
	return nil
}

// homeXattr marks an overlay disk restored from a snapshot with the homes
// the fake made for it: a copied disk keeps its ext4 UUID, and the homes
// of the disk it was copied from are another neuron's (or another time's).
const homeXattr = "user.fakefc.home"

// copyHome copies a guest's homes, as they are, owners and links kept.
func copyHome(from, to string) error {
	if err := os.MkdirAll(from, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o755); err != nil {
		return err
	}
	if _, err := store.CopyTree(context.Background(), from, to, store.CopyOptions{}); err != nil {
		return fmt.Errorf("copying the guest's homes: %w", err)
	}
	return nil
}

// diskKey identifies a disk image: the homes a restore marked it with,
// else its ext4 UUID (mkfs makes a new one per disk), or its inode when it
// is no ext4 image.
func diskKey(path string) string {
	buf := make([]byte, 128)
	if n, err := unix.Getxattr(path, homeXattr, buf); err == nil && n > 0 {
		return string(buf[:n])
	}
	f, err := os.Open(path)
	if err != nil {
		return "missing"
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err == nil && sb[0x38] == 0x53 && sb[0x39] == 0xEF {
		return fmt.Sprintf("ext4-%x", sb[0x68:0x78])
	}
	st, _ := f.Stat()
	return fmt.Sprintf("inode-%d", st.Sys().(*syscall.Stat_t).Ino)
}

// pause halts the guest as a paused VM's vCPUs do: its vsock carries
// nothing, and every process its agent started (this process's
// descendants) is stopped.
func (g *guest) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mux != nil {
		g.mux.SetPaused(true)
	}
	signalGuest(syscall.SIGSTOP)
}

func (g *guest) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	signalGuest(syscall.SIGCONT)
	if g.mux != nil {
		g.mux.SetPaused(false)
	}
}

// signalGuest sends sig to the processes of the fake guest: the
// descendants of this process, twice (for what forked meanwhile). /proc
// is the host's, in pids of the host's namespace, which this process,
// the init of a namespace of its own when run as root, does not share:
// each is signalled by its pid in the innermost namespace.
func signalGuest(sig syscall.Signal) {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(self)
	if err != nil {
		return
	}
	for range 2 {
		for _, p := range store.Descendants(pid)[1:] {
			if ns := innermostPID(p); ns > 0 {
				syscall.Kill(ns, sig)
			}
		}
	}
}

// innermostPID is process pid (of /proc's namespace) as its innermost pid
// namespace numbers it (NSpid's last field), or 0.
func innermostPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// save is the guest's state for a snapshot: its configuration, and a
// copy of its homes (the guest is paused), which a restore starts from.
func (g *guest) save() json.RawMessage {
	g.mu.Lock()
	defer g.mu.Unlock()
	sg := savedGuest{guestConfig: g.conf}
	if g.home != "" {
		sg.HomeCopy = fmt.Sprintf("snapshot-%d-%d", os.Getpid(), time.Now().UnixNano())
		if err := copyHome(filepath.Join(g.cfg.GuestRoot, g.home), filepath.Join(g.cfg.GuestRoot, sg.HomeCopy)); err != nil {
			fmt.Fprintf(os.Stderr, "fake guest: %v\n", err)
			sg.HomeCopy = ""
		}
	}
	b, _ := json.Marshal(sg)
	return b
}

// restore brings the guest back from a snapshot, paused: its agent serves
// again at once (it never went away inside the guest), over a copy of the
// homes the snapshot saved.
func (g *guest) restore(vm *VM) {
	if vm.Muxer == nil {
		fmt.Fprintln(os.Stderr, "fake guest: the snapshot holds no vsock device")
		return
	}
	vm.Muxer.SetPaused(true)
	var sg savedGuest
	json.Unmarshal(vm.Guest, &sg)
	g.startFrom(vm, 0, sg.HomeCopy)
}
