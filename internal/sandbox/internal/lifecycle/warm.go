package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Warm neurons (a warm pool's, see sandbox.Warmer): booted with the
// default options under a name no create can give (warmPrefix, a dot-name
// that ids.Validate refuses, so list, get and every entry point skip it),
// held by the process that booted them. A claim renames what carries the
// name — the overlay directory, the channel directory, the log, the
// runtime's records (cgroups), the uid's claim — and has the runtime give
// the running neuron its id and a fresh secret (Claimer). Nothing has run
// in a warm neuron before its claim: no command, no request but the
// host's own handshake.
//
// The one thing a rename cannot change is the command line PID 1 was
// started with (--id, --channel-dir), which discovery reads in /proc. A
// claim leaves a link overlays/<warm name> -> <id> and the record
// overlays/<id>/.warm naming it; discovery follows the two (running), and
// clear removes them.

// maxClaimEnv bounds the environment a claim carries (boot.MaxRebind
// bounds the whole request); a create with more boots cold.
const maxClaimEnv = 32 << 10

// warmPrefix starts the name of a warm neuron.
const warmPrefix = ".warm-"

// isWarm reports whether id names a warm neuron.
func isWarm(id string) bool { return strings.HasPrefix(id, warmPrefix) }

// Claimer is implemented by runtimes whose neurons can be booted warm and
// claimed later.
type Claimer interface {
	// Renamed moves the runtime's own records of a neuron from one id to
	// another, after the lifecycle renamed its overlay directory.
	Renamed(lay layout.Layout, from, to string) error
	// Claim starts giving the running warm neuron its identity through
	// control (StartRequest.Control): its agent serves r.Neuron with
	// r.Secret once wait returns nil. wait must be called.
	Claim(control *os.File, r *boot.Rebind) (wait func() error, err error)
}

var _ sandbox.Warmer = (*Manager)(nil)

// Warmable implements sandbox.Warmer.
func (m *Manager) Warmable() error {
	if _, ok := m.rt.(Claimer); !ok {
		return &sandbox.UnsupportedError{Mode: m.rt.Mode(), Op: "warm pool", Reason: "this mode cannot keep neurons booted ahead of their create (nsbox can)"}
	}
	return m.rt.Allow()
}

// WarmFor implements sandbox.Warmer: only what a warm neuron booted with
// the default options can become by a claim.
func (m *Manager) WarmFor(opts sandbox.CreateOptions) string {
	switch {
	case opts.Image != "":
		return "an image"
	case opts.Network.Mode != sandbox.NetworkDefault && opts.Network.Mode != sandbox.NetworkNone:
		return "network " + string(opts.Network.Mode)
	case opts.Limits != (sandbox.Limits{}):
		return "limits of its own"
	case opts.NestedUserns:
		return "nested user namespaces"
	case opts.Ctx != "":
		return "a /ctx mount"
	case opts.BootTimeout != 0:
		return "a boot timeout"
	case len(opts.Secrets) > 0:
		return "secrets"
	}
	size := 0
	for _, kv := range opts.Env {
		size += len(kv) + 1
	}
	if size > maxClaimEnv {
		return fmt.Sprintf("an environment of %d bytes (a claim carries at most %d)", size, maxClaimEnv)
	}
	return ""
}

// Warm implements sandbox.Warmer.
func (m *Manager) Warm(ctx context.Context) (string, error) {
	if err := m.Warmable(); err != nil {
		return "", err
	}
	bin, err := m.env.AgentBinary()
	if err != nil {
		return "", &sandbox.UnavailableError{Mode: m.rt.Mode(), Reason: err.Error()}
	}
	name := warmPrefix + ids.New()[1:]
	if err := os.MkdirAll(m.lay.Overlays, 0o755); err != nil {
		return "", err
	}
	if err := os.Mkdir(m.overlay(name), 0o700); err != nil {
		return "", fmt.Errorf("a warm neuron's directory: %w", err)
	}
	lock := m.lockFor(name)
	if got, err := lock.TryExclusive(); err != nil || !got {
		os.RemoveAll(m.overlay(name))
		return "", fmt.Errorf("a warm neuron's lock: %v", err)
	}
	if _, err := m.create(ctx, name, bin, lock, sandbox.CreateOptions{}, nil); err != nil {
		m.discardWarm(name)
		lock.Release()
		return "", err
	}
	return name, nil
}

// Claim implements sandbox.Warmer.
func (m *Manager) Claim(ctx context.Context, name, id string, opts sandbox.CreateOptions) (*sandbox.State, error) {
	// Refusals before anything is touched wrap sandbox.ErrNotWarmable too: the
	// warm neuron stays as it was, and the cold create the caller makes
	// says what was wrong (an invalid id or environment: INVALID).
	if err := validID(id); err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotWarmable, err)
	}
	if err := checkCreate(opts); err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrNotWarmable, err)
	}
	if why := m.WarmFor(opts); why != "" {
		return nil, fmt.Errorf("%w: it asks for %s", sandbox.ErrNotWarmable, why)
	}
	c, ok := m.rt.(Claimer)
	if !ok || !isWarm(name) {
		return nil, fmt.Errorf("%s is not a warm neuron of mode %s", name, m.rt.Mode())
	}
	if exists, _ := m.ownOverlay(id); exists {
		return nil, fmt.Errorf("%w: neuron %s has data already", sandbox.ErrNotWarmable, id)
	}
	m.mu.Lock()
	n := m.neurons[name]
	delete(m.neurons, name)
	m.mu.Unlock()
	if n == nil || n.control == nil || !m.alive(n.state) {
		if n != nil {
			m.dropWarm(n)
		} else if !isSymlink(m.overlay(name)) {
			m.sweepWarm(name) // its agent died and was let go of: what is left goes
		}
		return nil, &sandbox.NotRunningError{ID: name, Reason: "the warm neuron is gone"}
	}
	// PID 1 takes the claim (the agent rebound, the hostname and /etc)
	// while the host moves the neuron's records to the id; from here on a
	// failure removes the warm neuron.
	secret := protocol.NewSecret()
	wait, err := c.Claim(n.control, &boot.Rebind{Neuron: id, Secret: secret, Env: opts.Env})
	if err != nil {
		m.dropWarm(n)
		return nil, fmt.Errorf("claiming a warm neuron as %s: %w", id, err)
	}
	// Until the claim is over, the neuron is one being created under its
	// id: its state says so from before the rename (a lookup, or a
	// daemon killed half-way, never finds the warm name's state under
	// the id), and this process's lookups wait for the claim.
	defer m.markStarting(id)()
	pending := n.state.Copy()
	pending.ID, pending.SocketDir, pending.OverlayPath = id, m.socketDir(id), m.overlay(id)
	pending.Status, pending.Pending, pending.CreatedAt = sandbox.StatusPending, true, time.Now().UTC()
	if err := store.WriteJSON(m.stateFile(name), pending, 0o600); err != nil {
		wait()
		m.dropWarm(n)
		return nil, err
	}
	// The data first: the rename takes the id (or finds it taken, by a
	// create that came first: rare, as the id had no data a moment ago;
	// the warm neuron, told of the id already, goes) in one step.
	if err := unix.Renameat2(unix.AT_FDCWD, m.overlay(name), unix.AT_FDCWD, m.overlay(id), unix.RENAME_NOREPLACE); err != nil {
		wait()
		m.dropWarm(n)
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			return nil, fmt.Errorf("claiming a warm neuron as %s: a create of %s came first", id, id)
		}
		return nil, fmt.Errorf("claiming a warm neuron as %s: %w", id, err)
	}
	n.lock.Moved(filepath.Join(m.overlay(id), ".lock"))
	st, err := m.claimWarm(ctx, c, n, name, id, opts, secret, wait)
	if err != nil {
		m.scrapClaim(n, name, id)
		return nil, err
	}
	m.event(ctx, events.Created, st, "claimed from pool")
	m.event(ctx, events.Started, st, "claimed from pool")
	if st.Deadline != nil || st.AutoPause > 0 {
		m.ensureKeeper()
	}
	return st, nil
}

// claimWarm does the work of Claim once the overlay directory is id's:
// the rest of the records move while PID 1 takes the claim, then the
// neuron is held as id.
func (m *Manager) claimWarm(ctx context.Context, c Claimer, n *neuron, name, id string, opts sandbox.CreateOptions, secret string, wait func() error) (*sandbox.State, error) {
	err := m.renameWarm(c, name, id)
	if err == nil {
		// Before PID 1's answer, as a cold create writes it before its
		// agent connects: no host process knows the id yet.
		err = store.WriteFileAtomic(m.secretFile(id), []byte(secret+"\n"), 0o600)
	}
	if werr := wait(); err == nil && werr != nil {
		err = fmt.Errorf("claiming a warm neuron as %s: %w", id, werr)
	}
	if err != nil {
		return nil, err
	}
	n.control.Close()
	if err := m.setLabels(id, opts.Labels); err != nil {
		return nil, fmt.Errorf("labels of %s: %w", id, err)
	}
	now := time.Now()
	st := n.state.Copy()
	st.ID, st.SocketDir, st.OverlayPath, st.Workdir, st.CreatedAt = id, m.socketDir(id), m.overlay(id), m.workdir(id), now.UTC()
	m.readSpec(id).fill(st)
	runLifecycle(st, opts, now)
	if err := m.writeState(st); err != nil {
		return nil, err
	}
	claimed := &neuron{id: id, secret: secret, link: n.link, lock: n.lock, state: st, exited: n.exited, refused: n.refused}
	path := filepath.Join(m.socketDir(id), filepath.Base(n.link.Path()))
	n.link.Rebind(path, m.linkOptions(claimed))
	m.dropActivity(name)
	m.mu.Lock()
	// Held as the warm neuron was (its lock and owner record moved with
	// its directory).
	m.neurons[id] = claimed
	m.mu.Unlock()
	m.Logf(id, "claimed from pool as %s (it was %s)", id, name)
	return st.Copy(), nil
}

// renameWarm moves the host's records of warm neuron name, but its
// overlay directory, to id.
func (m *Manager) renameWarm(c Claimer, name, id string) error {
	os.RemoveAll(m.socketDir(id)) // a leftover: no neuron had this id's data
	if err := os.Rename(m.socketDir(name), m.socketDir(id)); err != nil {
		return fmt.Errorf("the channel directory of %s: %w", id, err)
	}
	os.Rename(m.logFile(name), m.logFile(id))
	if err := c.Renamed(m.lay, name, id); err != nil {
		return err
	}
	if err := renameIdentity(m.lay, name, id); err != nil {
		return err
	}
	// Discovery's way from PID 1's command line to the id (see above).
	if err := os.WriteFile(m.warmFile(id), []byte(name+"\n"), 0o600); err != nil {
		return err
	}
	return os.Symlink(id, m.overlay(name))
}

// scrapClaim ends a warm neuron whose claim as id failed half-way: it and
// everything of it under either name go, so that the cold create that
// follows finds no data under id.
func (m *Manager) scrapClaim(n *neuron, name, id string) {
	m.Logf(id, "the claim as %s failed; the warm neuron is removed", id)
	n.link.Close()
	if n.control != nil {
		n.control.Close()
	}
	m.stop(name, n.state)
	os.RemoveAll(m.socketDir(name))
	os.RemoveAll(m.socketDir(id))
	m.rt.Released(m.lay, id) // its records moved with the overlay, whatever they name
	if isSymlink(m.overlay(name)) {
		os.Remove(m.overlay(name))
	}
	uid := recordedUID(m.lay, id)
	m.discard(id)                     // its disk of its own unmounted first
	ReleaseIdentity(m.lay, name, uid) // whichever of the two the claim names
	os.Remove(m.logFile(id))
	os.Remove(m.logFile(name))
	n.lock.Release()
	m.dropActivity(name)
	m.dropActivity(id)
}

// Drop implements sandbox.Warmer.
func (m *Manager) Drop(ctx context.Context, name string) error {
	if !isWarm(name) {
		return fmt.Errorf("%s is not a warm neuron", name)
	}
	m.mu.Lock()
	n := m.neurons[name]
	delete(m.neurons, name)
	m.mu.Unlock()
	if n == nil {
		m.discardWarm(name)
		return nil
	}
	m.dropWarm(n)
	return nil
}

// dropWarm stops warm neuron n and removes all of it.
func (m *Manager) dropWarm(n *neuron) {
	n.link.Close()
	if n.control != nil {
		n.control.Close()
	}
	m.stop(n.id, n.state)
	m.clear(n.id)
	m.discardWarm(n.id)
	n.lock.Release()
	m.dropActivity(n.id)
}

// discardWarm removes what is left of warm neuron name that no longer runs.
func (m *Manager) discardWarm(name string) {
	m.rt.Released(m.lay, name)
	os.RemoveAll(m.socketDir(name))
	m.discard(name)
	os.Remove(m.logFile(name))
	os.Remove(m.logFile(name) + ".1")
}

// SweepWarm implements sandbox.Warmer: warm neurons whose holder is gone
// (a daemon killed without its stop) are stopped and removed, and the
// links of claimed neurons that no longer run are removed.
func (m *Manager) SweepWarm(ctx context.Context) []string {
	entries, err := os.ReadDir(m.lay.Overlays)
	if err != nil {
		return nil
	}
	var swept []string
	for _, e := range entries {
		name := e.Name()
		if !isWarm(name) {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 {
			if _, ok := m.claimedAs(name); !ok {
				os.Remove(m.overlay(name))
			}
			continue
		}
		m.mu.Lock()
		_, held := m.neurons[name]
		m.mu.Unlock()
		if held || !e.IsDir() {
			continue
		}
		// A directory with no mode yet is one whose boot was cut short
		// before anything started (or is under way: its lock is held).
		if md := sandbox.OverlayMode(m.lay, name); md != "" && md != m.rt.Mode() {
			continue
		}
		if m.sweepWarm(name) {
			swept = append(swept, name)
		}
	}
	return swept
}

// sweepWarm stops and removes warm neuron name, which this process does
// not hold, unless another process holds its lock; it reports whether it
// did.
func (m *Manager) sweepWarm(name string) bool {
	lock := m.lockFor(name)
	if got, _ := lock.TryExclusive(); !got {
		return false // its daemon still holds it
	}
	defer lock.Release()
	if st, err := m.readState(name); err == nil {
		m.stop(name, st)
	}
	for _, r := range m.running() {
		if r.ID == name {
			m.stopRunning(r)
		}
	}
	m.clear(name)
	m.discardWarm(name)
	return true
}

// warmFile names, in a claimed neuron's overlay, the warm neuron it was.
func (m *Manager) warmFile(id string) string { return filepath.Join(m.overlay(id), ".warm") }

// claimedAs returns the id warm neuron name was claimed as, when the link
// and the record agree.
func (m *Manager) claimedAs(name string) (string, bool) {
	id, err := os.Readlink(m.overlay(name))
	if err != nil || validID(id) != nil {
		return "", false
	}
	b, err := os.ReadFile(m.warmFile(id))
	if err != nil || strings.TrimSpace(string(b)) != name {
		return "", false
	}
	return id, true
}

// unlinkWarm removes the way from a warm neuron's name to id, which no
// longer runs as it.
func (m *Manager) unlinkWarm(id string) {
	b, err := os.ReadFile(m.warmFile(id))
	if err != nil {
		return
	}
	if name := strings.TrimSpace(string(b)); isWarm(name) {
		if to, err := os.Readlink(m.overlay(name)); err == nil && to == id {
			os.Remove(m.overlay(name))
		}
	}
	os.Remove(m.warmFile(id))
}

// renameIdentity moves the uid registry's claim of a neuron's uid (when
// the host is root: AgentIdentity) from one id's overlay to another's,
// after the overlay directory was renamed.
func renameIdentity(lay layout.Layout, from, to string) error {
	if os.Getuid() != 0 {
		return nil
	}
	uid := recordedUID(lay, to)
	if uid <= 0 {
		return nil
	}
	unlock, err := lockRegistry()
	if err != nil {
		return err
	}
	defer unlock()
	b, err := os.ReadFile(claimFile(uid))
	if err != nil || string(b) != claimOwner(lay, from) {
		return fmt.Errorf("uid %d is not claimed by %s", uid, from)
	}
	return store.WriteFileAtomic(claimFile(uid), []byte(claimOwner(lay, to)), 0o600)
}

// linkOptions are the options of n's link.
func (m *Manager) linkOptions(n *neuron) link.Options {
	opts := link.Options{Neuron: n.id, Software: "nsys-cortex", Secret: n.secret, OnEvent: func(ev link.ConnEvent) { m.onEvent(n, ev) },
		Activity: m.activityFor(n.id)}
	if hv, ok := m.rt.(HostViewer); ok {
		opts.HostView = hv.HostView(m.lay, n.id)
	}
	if fp, ok := m.rt.(FilePasser); ok {
		opts.PassFiles = fp.PassesFiles()
	}
	return opts
}

// isSymlink reports whether path is a symbolic link.
func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}
