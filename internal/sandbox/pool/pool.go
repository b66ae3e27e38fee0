// Package pool keeps warm neurons: booted ahead of their create, unnamed,
// so that a create of a new id is answered by a claim (sandbox.Warmer)
// in a millisecond or two instead of a boot. `nsys-cortex serve --pool
// nsbox=8` (and the config key pool) keeps one Pool per mode; the pool
// refills in the background after each claim. See docs/pool.md.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// MaxSize bounds one mode's pool.
const MaxSize = 256

// Reasons a create gives (Created.ModeReason), beside the mode's own.
const (
	Claimed = "claimed from pool"
	Empty   = "pool empty: booted cold"
)

// Spec is a pool's mode and size, as `--pool nsbox=8` gives them.
type Spec struct {
	Mode string
	Size int
}

// ParseSpecs reads "mode=N[,mode=N...]" (several flags or config entries
// may each hold a list). A mode named twice is an error.
func ParseSpecs(items []string) ([]Spec, error) {
	var out []Spec
	seen := map[string]bool{}
	for _, item := range items {
		for _, part := range strings.Split(item, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			mode, n, ok := strings.Cut(part, "=")
			size, err := strconv.Atoi(n)
			if !ok || mode == "" || err != nil || size < 0 || size > MaxSize {
				return nil, fmt.Errorf("pool %q: give MODE=N with N from 0 to %d (e.g. nsbox=8)", part, MaxSize)
			}
			if seen[mode] {
				return nil, fmt.Errorf("pool: mode %s is named twice", mode)
			}
			seen[mode] = true
			if size > 0 {
				out = append(out, Spec{Mode: mode, Size: size})
			}
		}
	}
	return out, nil
}

// Stats is what a pool reports (/metrics).
type Stats struct {
	Mode    string
	Size    int
	Ready   int   // warm neurons waiting
	Booting int   // warm neurons being booted
	Claims  int64 // creates answered by a claim
	Misses  int64 // creates of the mode booted cold
	Failed  int64 // warm boots and claims that failed
}

// Pool keeps up to Size warm neurons of one mode.
type Pool struct {
	mode string
	m    sandbox.Manager
	w    sandbox.Warmer
	size int
	log  *slog.Logger

	mu      sync.Mutex
	ready   []string
	booting int
	stats   Stats
	wake    chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New starts a pool of size warm neurons of m's mode and starts filling
// it. (What a killed daemon's pool left is Sweep's, which serve runs at
// its start.)
func New(m sandbox.Manager, size int, log *slog.Logger) (*Pool, error) {
	w, ok := m.(sandbox.Warmer)
	if !ok {
		return nil, &sandbox.UnsupportedError{Mode: m.Mode(), Op: "warm pool", Reason: "this mode cannot keep neurons booted ahead of their create (nsbox can)"}
	}
	if err := w.Warmable(); err != nil {
		return nil, err
	}
	if size <= 0 || size > MaxSize {
		return nil, fmt.Errorf("pool of %s: size %d is not from 1 to %d", m.Mode(), size, MaxSize)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{mode: m.Mode(), m: m, w: w, size: size, log: log, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	p.stats.Mode, p.stats.Size = p.mode, size
	p.wg.Add(1)
	go p.fill()
	return p, nil
}

// Mode is the pool's mode.
func (p *Pool) Mode() string { return p.mode }

// Stats returns the pool's figures now.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready, s.Booting = len(p.ready), p.booting
	return s
}

// Create creates neuron id with opts: by a claim of a warm neuron when
// one is ready and can give opts, else cold (m.Create). why says which,
// for the answer's modeReason.
func (p *Pool) Create(ctx context.Context, id string, opts sandbox.CreateOptions) (st *sandbox.State, why string, err error) {
	if what := p.w.WarmFor(opts); what != "" {
		p.count(func(s *Stats) { s.Misses++ })
		st, err := p.m.Create(ctx, id, opts)
		return st, "not from pool: it asks for " + what, err
	}
	name := p.take()
	if name == "" {
		p.count(func(s *Stats) { s.Misses++ })
		st, err := p.m.Create(ctx, id, opts)
		return st, Empty, err
	}
	st, err = p.w.Claim(ctx, name, id, opts)
	switch {
	case err == nil:
		p.count(func(s *Stats) { s.Claims++ })
		p.kick()
		return st, Claimed, nil
	case errors.Is(err, sandbox.ErrNotWarmable):
		why := err
		p.give(name) // unchanged: back for the next create
		p.count(func(s *Stats) { s.Misses++ })
		st, err := p.m.Create(ctx, id, opts)
		return st, "not from pool: " + strings.TrimPrefix(why.Error(), sandbox.ErrNotWarmable.Error()+": "), err
	default:
		// The warm neuron is gone (the claim removed it); the create is
		// still owed: cold.
		p.log.Warn("pool: a claim failed; booting cold", "mode", p.mode, "id", id, "err", err)
		p.count(func(s *Stats) { s.Failed++; s.Misses++ })
		p.kick()
		st, cerr := p.m.Create(ctx, id, opts)
		return st, "pool claim failed: booted cold", cerr
	}
}

// Close stops filling and removes every warm neuron the pool holds; the
// neurons it gave out are ordinary neurons and stay.
func (p *Pool) Close() error {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var errs []error
	for _, name := range ready {
		errs = append(errs, p.w.Drop(context.Background(), name))
	}
	return errors.Join(errs...)
}

func (p *Pool) count(f func(*Stats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// take returns a ready warm neuron's name, or "" when none is ready.
func (p *Pool) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return ""
	}
	name := p.ready[0]
	p.ready = p.ready[1:]
	return name
}

// give puts a warm neuron back (a claim it could not serve).
func (p *Pool) give(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		go p.w.Drop(context.Background(), name)
		return
	}
	p.ready = append(p.ready, name)
}

// kick wakes the filler.
func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Boots at once: a refill after a burst of claims catches up in parallel,
// without taking every core of the host from the neurons that run.
const parallelBoots = 2

// fill keeps ready+booting at size until Close, retrying failed boots
// after a pause that grows to a minute.
func (p *Pool) fill() {
	defer p.wg.Done()
	var boots sync.WaitGroup
	defer boots.Wait()
	pause := time.Duration(0)
	failed := make(chan struct{}, parallelBoots)
	for {
		p.mu.Lock()
		want := p.size - len(p.ready) - p.booting
		n := min(want, parallelBoots-p.booting)
		p.booting += max(n, 0)
		p.mu.Unlock()
		for range max(n, 0) {
			boots.Add(1)
			go func() {
				defer boots.Done()
				if !p.boot() {
					select {
					case failed <- struct{}{}:
					default:
					}
					return
				}
				p.kick()
			}()
		}
		select {
		case <-p.ctx.Done():
			return
		case <-failed:
			pause = min(max(2*pause, time.Second), time.Minute)
			// Wait it out before the next boot.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(pause):
			}
		case <-p.wake:
			pause = 0 // a boot went well
		}
	}
}

// boot boots one warm neuron into the pool; it reports success.
func (p *Pool) boot() bool {
	name, err := p.w.Warm(p.ctx)
	p.mu.Lock()
	p.booting--
	if err != nil {
		p.stats.Failed++
		p.mu.Unlock()
		if p.ctx.Err() == nil {
			p.log.Warn("pool: booting a warm neuron failed", "mode", p.mode, "err", err)
		}
		return false
	}
	if p.ctx.Err() != nil {
		p.mu.Unlock()
		p.w.Drop(context.Background(), name)
		return true
	}
	p.ready = append(p.ready, name)
	p.mu.Unlock()
	return true
}

// Sweep removes the warm neurons no live process holds, in every mode of
// set that keeps them: a daemon killed with a pool left them running,
// and the next daemon sweeps them whether it keeps a pool or not. It
// costs one directory listing when there are none.
func Sweep(ctx context.Context, set *sandbox.Set, log *slog.Logger) {
	entries, err := os.ReadDir(set.Layout().Overlays)
	if err != nil || !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".warm-") }) {
		return
	}
	for _, mode := range set.Modes() {
		m, err := set.Manager(mode)
		if err != nil {
			continue
		}
		if w, ok := m.(sandbox.Warmer); ok && w.Warmable() == nil {
			if swept := w.SweepWarm(ctx); len(swept) > 0 && log != nil {
				log.Info("removed warm neurons a stopped daemon left", "mode", mode, "count", len(swept))
			}
		}
	}
}

// Pools are the pools of a daemon, by mode.
type Pools map[string]*Pool

// Start starts a pool for each spec on set's managers; on an error it
// closes those it started.
func Start(set *sandbox.Set, specs []Spec, log *slog.Logger) (Pools, error) {
	out := Pools{}
	for _, sp := range specs {
		m, err := set.Manager(sp.Mode)
		if err == nil {
			var p *Pool
			if p, err = New(m, sp.Size, log); err == nil {
				out[sp.Mode] = p
				continue
			}
		}
		out.Close()
		return nil, fmt.Errorf("pool %s=%d: %w", sp.Mode, sp.Size, err)
	}
	return out, nil
}

// Close closes every pool.
func (ps Pools) Close() error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Stats returns every pool's figures, by mode.
func (ps Pools) Stats() []Stats {
	out := make([]Stats, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Stats())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mode < out[j].Mode })
	return out
}
