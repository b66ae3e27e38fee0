package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/archive"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Environment variables of mode selection.
const (
	EnvMode          = "NSYS_CORTEX_MODE"
	EnvAllowInsecure = "NSYS_CORTEX_ALLOW_INSECURE_DEV"
	ModeAuto         = "auto"
)

// AllowInsecure reports whether the operator acknowledged that process mode
// is not a security boundary.
func AllowInsecure() bool { return os.Getenv(EnvAllowInsecure) == "1" }

// Check is the result of a mode's self-check.
type Check struct {
	Mode string `json:"mode"`
	// OK means the mode can create neurons on this machine now.
	OK bool `json:"ok"`
	// Isolating is false for modes that are not a security boundary.
	Isolating bool `json:"isolating"`
	// Summary is one line a person reads.
	Summary string `json:"summary"`
	// Items are the individual requirements.
	Items []CheckItem `json:"items,omitempty"`
}

// CheckItem is one requirement of a mode.
type CheckItem struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Backend is one isolation mode that can be registered.
type Backend struct {
	// Name is the mode's name.
	Name string
	// Rank orders auto resolution: higher first. Modes with Isolating false
	// are never chosen by auto unless the operator allowed insecure mode.
	Rank int
	// Isolating is false for modes that are not a security boundary.
	Isolating bool
	// New builds the mode's manager.
	New func(Env) (Manager, error)
	// SelfCheck reports whether this machine can run the mode.
	SelfCheck func(context.Context, Env) Check
}

// Env is what every backend is built from.
type Env struct {
	Layout layout.Layout
	// AgentBinary returns the path of the cortex-agent to put in neurons.
	AgentBinary func() (string, error)
	// Exclusive makes the manager the sole owner of the neurons it touches
	// (a daemon); other processes then get OwnedElsewhereError.
	Exclusive bool
	// DefaultDisk is the disk ceiling of a new neuron that asks for none,
	// where the mode can enforce one (0: none). A ceiling asked for
	// (Limits.DiskBytes) that a mode cannot enforce fails the create; this
	// default is left out there.
	DefaultDisk int64
	// MaxSnapshots and MaxSnapshotBytes cap a neuron's snapshots (their
	// number, and the bytes they hold together); 0 is no cap.
	MaxSnapshots     int
	MaxSnapshotBytes int64
	// EnsureKeeper, when set, is called when a neuron gets a deadline or
	// an idle rule: it makes sure a keeper runs for this home (the CLI
	// starts `nsys-cortex keeper`; serve runs one itself).
	EnsureKeeper func()
	// EgressUpstreamCA is a PEM file of authorities the egress proxy
	// trusts for the servers of neurons' secrets, besides the host's
	// roots (config egress.upstream_ca; empty: none).
	EgressUpstreamCA string
}

// Set holds the registered modes and the managers built from them; it routes
// calls about an existing neuron to the mode that runs it.
type Set struct {
	env      Env
	backends []Backend

	mu         sync.Mutex
	managers   map[string]Manager
	auto       autoChoice // the last automatic choice, reused for autoFor
	refreshing bool       // a choice is being made again in the background

	bg     context.Context // ends at Close: the background choices' context
	stopBg context.CancelFunc
	wg     sync.WaitGroup
}

// autoChoice is a mode the self-checks chose, and when.
type autoChoice struct {
	m        Manager
	reason   string
	insecure bool // AllowInsecure() when it was made
	at       time.Time
}

// autoFor is how long an automatic choice stands: every mode's self-check
// costs tens of milliseconds (docker's asks its daemon; all of them ran
// 75-100 ms on the development machine), which a daemon would otherwise
// pay on every create that names no mode. Once it is older, the next
// create still takes it and the choice is made again in the background,
// so that no create waits for the self-checks but the first. The
// refresh still takes the CPU from the creates beside it (its probes
// make namespaces and start QEMU), so a minute: a mode that fails
// meanwhile fails that create with its own error, and the choices after
// the next refresh see it.
const autoFor = time.Minute

// autoCheckFor bounds a background choice's self-checks.
const autoCheckFor = time.Minute

// NewSet returns a set of the given backends.
func NewSet(env Env, backends ...Backend) *Set {
	bs := slices.Clone(backends)
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].Rank > bs[j].Rank })
	bg, stop := context.WithCancel(context.Background())
	return &Set{env: env, backends: bs, managers: map[string]Manager{}, bg: bg, stopBg: stop}
}

// PlannedModes are the modes of the design (DESIGN.md), built or not.
var PlannedModes = []string{"firecracker", "qemu", "docker", "nsbox", "kube", "process"}

// Missing returns the planned modes this build does not register.
func (s *Set) Missing() []string {
	var out []string
	for _, p := range PlannedModes {
		if !slices.Contains(s.Modes(), p) {
			out = append(out, p)
		}
	}
	return out
}

// Layout is the home directory the set's modes keep their neurons in
// (where snapshots of them go too).
func (s *Set) Layout() layout.Layout { return s.env.Layout }

// Env returns the environment the set's managers are built over.
func (s *Set) Env() Env { return s.env }

// Modes returns the registered mode names, in auto order.
func (s *Set) Modes() []string {
	out := make([]string, len(s.backends))
	for i, b := range s.backends {
		out[i] = b.Name
	}
	return out
}

func (s *Set) backend(mode string) (Backend, error) {
	for _, b := range s.backends {
		if b.Name == mode {
			return b, nil
		}
	}
	return Backend{}, &InvalidError{Reason: fmt.Sprintf("unknown mode %q (this build has: auto, %s)", mode, strings.Join(s.Modes(), ", "))}
}

// Manager returns the manager of mode, building it on first use.
func (s *Set) Manager(mode string) (Manager, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.managers[mode]; ok {
		return m, nil
	}
	b, err := s.backend(mode)
	if err != nil {
		return nil, err
	}
	m, err := b.New(s.env)
	if err != nil {
		return nil, err
	}
	s.managers[mode] = m
	return m, nil
}

// Built returns the managers built so far (Manager builds one on first
// use), in no order; building none.
func (s *Set) Built() []Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Manager, 0, len(s.managers))
	for _, m := range s.managers {
		out = append(out, m)
	}
	return out
}

// Checks runs every mode's self-check.
func (s *Set) Checks(ctx context.Context) []Check {
	out := make([]Check, 0, len(s.backends))
	for _, b := range s.backends {
		c := b.SelfCheck(ctx, s.env)
		c.Mode, c.Isolating = b.Name, b.Isolating
		out = append(out, c)
	}
	return out
}

// Resolve picks the manager for mode. For "auto" (or "") it takes the
// highest-ranked isolating mode whose self-check passes; a non-isolating mode
// only when the operator allowed insecure mode. The reason says why in one
// short line, naming the modes skipped ahead of it; what each of their
// self-checks found is Checks' to say (doctor prints it), not every create's.
func (s *Set) Resolve(ctx context.Context, mode string) (Manager, string, error) {
	if mode == "" {
		mode = os.Getenv(EnvMode)
	}
	if mode != "" && mode != ModeAuto {
		m, err := s.Manager(mode)
		return m, "requested", err
	}
	s.mu.Lock()
	cached := s.auto
	if cached.m != nil && cached.insecure == AllowInsecure() {
		if time.Since(cached.at) >= autoFor && !s.refreshing && s.bg.Err() == nil {
			s.refreshing = true
			s.wg.Add(1)
			go s.refreshAuto()
		}
		s.mu.Unlock()
		return cached.m, cached.reason, nil
	}
	s.mu.Unlock()
	return s.chooseAuto(ctx)
}

// refreshAuto makes the automatic choice again, for the creates after
// the one that found it old. When no mode passes now, it forgets the
// choice: the next create makes it itself, and fails saying why.
func (s *Set) refreshAuto() {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.bg, autoCheckFor)
	defer cancel()
	_, _, err := s.chooseAuto(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshing = false
	if err != nil {
		s.auto = autoChoice{}
	}
}

// chooseAuto runs the self-checks and keeps the choice they make.
func (s *Set) chooseAuto(ctx context.Context) (Manager, string, error) {
	var skipped, why []string
	for _, b := range s.backends {
		c := b.SelfCheck(ctx, s.env)
		switch {
		case !b.Isolating && !AllowInsecure():
			skipped = append(skipped, b.Name)
			why = append(why, fmt.Sprintf("%s: not a security boundary; set %s=1 to use it", b.Name, EnvAllowInsecure))
			continue
		case !c.OK:
			skipped = append(skipped, b.Name)
			why = append(why, fmt.Sprintf("%s: %s", b.Name, c.Summary))
			continue
		}
		m, err := s.Manager(b.Name)
		if err != nil {
			return nil, "", err
		}
		reason := "the best isolating mode whose self-check passes"
		if !b.Isolating {
			reason = fmt.Sprintf("%s=1 allows it and no isolating mode is available", EnvAllowInsecure)
		}
		if len(skipped) > 0 {
			reason += "; skipped " + strings.Join(skipped, ", ")
		}
		s.mu.Lock()
		s.auto = autoChoice{m: m, reason: reason, insecure: AllowInsecure(), at: time.Now()}
		s.mu.Unlock()
		return m, reason, nil
	}
	// Refusing, the reasons are the answer: say each mode's.
	return nil, "", &UnavailableError{Mode: ModeAuto, Reason: "no mode can run here: " + strings.Join(why, "; ")}
}

// Find returns the manager and state of neuron ref: an exact id, or a
// unique prefix (at least three characters) of a generated id. Ids people
// choose are names and must be given in full, so that "job1" never means
// "job10"; see FindExact for commands that destroy.
func (s *Set) Find(ctx context.Context, ref string) (Manager, *State, error) {
	return s.find(ctx, ref, true)
}

// FindExact is Find without prefixes.
func (s *Set) FindExact(ctx context.Context, id string) (Manager, *State, error) {
	return s.find(ctx, id, false)
}

func (s *Set) find(ctx context.Context, ref string, prefixes bool) (Manager, *State, error) {
	if err := ids.Validate(ref); err != nil {
		return nil, nil, &InvalidError{Reason: err.Error()}
	}
	// The modes of overlays that the mark says are another's are not
	// asked: each would read the mark again to say so.
	mark := OverlayMode(s.env.Layout, ref)
	for _, b := range s.backends {
		m, err := s.Manager(b.Name)
		if err != nil {
			continue // a mode that cannot even be built knows no neurons
		}
		if ol, ok := m.(OverlayLister); ok && !ol.OwnsMark(mark) {
			continue
		}
		st, err := m.Get(ctx, ref)
		if err == nil {
			return m, st, nil
		}
		var nf *NotFoundError
		if !errors.As(err, &nf) {
			return nil, nil, err
		}
	}
	// Not an exact id: try it as a prefix of a generated id.
	if !prefixes || len(ref) < 3 {
		return nil, nil, &NotFoundError{ID: ref}
	}
	all, err := s.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	var match []*State
	for _, st := range all {
		if ids.Generated(st.ID) && strings.HasPrefix(st.ID, ref) {
			match = append(match, st)
		}
	}
	switch len(match) {
	case 0:
		return nil, nil, &NotFoundError{ID: ref}
	case 1:
		m, err := s.Manager(match[0].Mode)
		return m, match[0], err
	}
	names := make([]string, len(match))
	for i, st := range match {
		names[i] = st.ID
	}
	return nil, nil, &InvalidError{Reason: fmt.Sprintf("%q matches several neurons: %s", ref, strings.Join(names, ", "))}
}

// List returns the neurons of every mode, sorted by id.
func (s *Set) List(ctx context.Context) ([]*State, error) {
	var (
		all      []*State
		overlays []Overlay
		scanned  bool
	)
	for _, b := range s.backends {
		m, err := s.Manager(b.Name)
		if err != nil {
			continue
		}
		var l []*State
		if ol, ok := m.(OverlayLister); ok {
			if !scanned {
				if overlays, err = ScanOverlays(s.env.Layout); err != nil {
					return nil, err
				}
				scanned = true
			}
			l, err = ol.ListOverlays(ctx, ownedBy(ol, overlays))
		} else {
			l, err = m.List(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s neurons: %w", b.Name, err)
		}
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	return all, nil
}

// AgentUID returns the host uid running neuron st's agent runs as, as its
// mode's manager tells it (AgentUIDer), or -1: the neuron is not running,
// its mode is not in the set, or the mode cannot tell.
func (s *Set) AgentUID(st *State) int {
	if st.Status != StatusRunning {
		return -1
	}
	m, err := s.Manager(st.Mode)
	if err != nil {
		return -1
	}
	if u, ok := m.(AgentUIDer); ok {
		return u.AgentUID(st)
	}
	return -1
}

// Close closes every manager built, once a choice being made in the
// background is over (its self-checks are cancelled).
func (s *Set) Close() error {
	s.mu.Lock() // no refresh starts after this (Resolve starts them under mu)
	s.stopBg()
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, m := range s.managers {
		errs = append(errs, m.Close())
	}
	s.managers = map[string]Manager{}
	return errors.Join(errs...)
}

// Import reads an export from r and makes its neuron, stopped, under id
// ("": the archive's own id), in the mode the archive was made in
// (Exporter). The id must have no data in any mode. relabel, when set,
// gives the labels the neuron gets from those the archive holds (and may
// refuse the id).
func (s *Set) Import(ctx context.Context, r io.Reader, id string, relabel func(id string, l labels.Set) (labels.Set, error)) (*State, error) {
	ar, err := archive.Open(r)
	if err != nil {
		return nil, &InvalidError{Reason: err.Error(), Err: err}
	}
	defer ar.Close()
	if id == "" {
		id = ar.Record().ID
	}
	if relabel != nil {
		l, err := relabel(id, labels.Set(ar.Record().Labels))
		if err != nil {
			return nil, err
		}
		ar.Relabel(l)
	}
	rec := ar.Record()
	if _, st, err := s.FindExact(ctx, id); err == nil {
		return nil, errdefs.Errorf(errdefs.Exists, "neuron %s exists (mode %s): an import makes a new neuron; give another id (--id), or destroy it with --wipe", id, st.Mode)
	} else if !errdefs.IsNotFound(err) {
		return nil, err
	}
	m, err := s.Manager(rec.Mode)
	if err != nil {
		return nil, fmt.Errorf("the archive is of a %s neuron: %w", rec.Mode, err)
	}
	ex, ok := m.(Exporter)
	if !ok {
		return nil, &UnsupportedError{Mode: rec.Mode, Op: "import"}
	}
	st, err := ex.Import(ctx, id, ar)
	if errors.Is(err, archive.ErrBad) {
		return nil, &InvalidError{Reason: err.Error(), Err: err}
	}
	return st, err
}
