// Package keeper enforces what must happen to neurons while nobody asks:
// deadlines (create --timeout) and idle rules (create --auto-pause), for
// one home, whether or not `nsys-cortex serve` runs (docs/lifecycle.md).
//
// One keeper runs per home: Run takes an flock on <home>/keeper.lock and
// holds it while it works. `serve` runs one in its own process; without
// it, the CLI starts `nsys-cortex keeper` in the background (Start) when a
// neuron gets a deadline or an idle rule, and that process exits once no
// neuron has either. Whatever sets a deadline wakes the keeper (Wake), so
// it sleeps until the next deadline instead of polling.
//
// The keeper acts through the managers' own operations (Enforce, Pause),
// so what it does is what a person doing it by hand would do, recorded the
// same way, with "keeper" as the principal.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Neurons is what the keeper watches: a *sandbox.Set.
type Neurons interface {
	List(ctx context.Context) ([]*sandbox.State, error)
	Manager(mode string) (sandbox.Manager, error)
}

// IdlePauser is implemented by managers that can pause a neuron only if no
// request to it runs or ended after since (the lifecycle's PauseIfIdle).
type IdlePauser interface {
	PauseIfIdle(ctx context.Context, id string, since time.Time) (bool, error)
}

// Options shape a keeper.
type Options struct {
	// ExitWhenIdle ends Run once no neuron has a deadline or an idle rule
	// (a standalone keeper; serve's runs for as long as serve does).
	ExitWhenIdle bool
	// IdleCPU is the share of one core under which a neuron counts as idle
	// (default 0.02: 2%).
	IdleCPU float64
	// Rescan bounds how long the keeper goes without listing the neurons
	// (default 30 s): what a missed wake leaves unseen is seen by then.
	Rescan time.Duration
	// Log receives what the keeper does (nil: discarded).
	Log *slog.Logger
}

// Keeper watches one home's neurons.
type Keeper struct {
	lay  layout.Layout
	set  Neurons
	opts Options
	log  *slog.Logger
	// samples are the CPU readings of the running neurons with an idle
	// rule, oldest first.
	samples map[string][]sample
}

type sample struct {
	at  time.Time
	cpu float64
}

// New returns a keeper of set's neurons under lay.
func New(lay layout.Layout, set Neurons, opts Options) *Keeper {
	if opts.IdleCPU <= 0 {
		opts.IdleCPU = 0.02
	}
	if opts.Rescan <= 0 {
		opts.Rescan = 30 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{lay: lay, set: set, opts: opts, log: log, samples: map[string][]sample{}}
}

func lockFile(lay layout.Layout) string { return filepath.Join(lay.Home, "keeper.lock") }
func wakeFile(lay layout.Layout) string { return filepath.Join(lay.Home, "keeper.wake") }

// ErrRunning is Run's answer when another keeper already runs for the home.
var ErrRunning = errdefs.New(errdefs.Exists, "a keeper already runs for this home")

// Run keeps the home's neurons until ctx ends (nil then), or, with
// ExitWhenIdle, until none has a deadline or an idle rule. It fails with
// ErrRunning when another keeper holds the home.
func (k *Keeper) Run(ctx context.Context) error {
	if err := os.MkdirAll(k.lay.Home, 0o700); err != nil {
		return err
	}
	lock := store.NewLock(lockFile(k.lay))
	ok, err := lock.TryExclusive()
	// Running's probe holds the lock shared for an instant: a keeper
	// holds it for good. Look again before giving way.
	for i := 0; err == nil && !ok && i < 5; i++ {
		time.Sleep(10 * time.Millisecond)
		ok, err = lock.TryExclusive()
	}
	if err != nil {
		return err
	}
	if !ok {
		return ErrRunning
	}
	defer lock.Release()
	wake, stop := watchWake(k.lay)
	defer stop()
	ctx = events.WithPrincipal(ctx, "keeper")
	k.log.Info("keeper started", "home", k.lay.Home, "pid", os.Getpid())
	idleSince := time.Time{}
	for {
		mark := wakes(k.lay)
		next, watching, err := k.round(ctx)
		if err != nil && ctx.Err() == nil {
			k.log.Warn("keeper round", "err", err)
		}
		if errdefs.IsOwnedElsewhere(err) && k.opts.ExitWhenIdle {
			// A daemon holds the neurons: it keeps them itself.
			k.log.Info("keeper gives way to the daemon that owns the neurons")
			return nil
		}
		now := time.Now()
		if watching {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = now
		}
		// Linger a little before exiting, so a create right after the last
		// deadline fired does not start a keeper again.
		if k.opts.ExitWhenIdle && !idleSince.IsZero() && now.Sub(idleSince) >= 2*time.Second {
			// Let go first, then look whether someone woke this keeper
			// since its last round: a process that wakes it and then finds
			// the lock free starts another, so no wake is lost between.
			lock.Release()
			if wakes(k.lay) == mark {
				k.log.Info("keeper exits: no neuron has a deadline or an idle rule")
				return nil
			}
			if ok, err := lock.TryExclusive(); err != nil || !ok {
				return err // another keeper took the home: it looks now
			}
			idleSince = time.Time{}
			continue
		}
		wait := time.Until(next)
		if !watching {
			wait = min(wait, time.Second)
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// round looks at every neuron once: applies what is due, samples and
// pauses the idle. It returns when it wants to look again, and whether any
// neuron has a deadline or an idle rule.
func (k *Keeper) round(ctx context.Context) (next time.Time, watching bool, err error) {
	now := time.Now()
	next = now.Add(k.opts.Rescan)
	// Listing applies every deadline that passed (the lifecycle's rule for
	// whoever looks).
	sts, err := k.set.List(ctx)
	if err != nil {
		return now.Add(time.Second), true, err
	}
	live := map[string]bool{}
	var errs []error
	for _, st := range sts {
		if st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused {
			continue
		}
		if st.Deadline != nil {
			watching = true
			if st.Deadline.Before(next) {
				next = *st.Deadline
			}
		}
		if st.AutoPause <= 0 {
			continue
		}
		watching = true
		if st.Status != sandbox.StatusRunning {
			continue // paused: a request resumes it, and it is sampled anew
		}
		live[st.ID] = true
		at, err := k.idle(ctx, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", st.ID, err))
		}
		if at.Before(next) {
			next = at
		}
	}
	for id := range k.samples {
		if !live[id] {
			delete(k.samples, id)
		}
	}
	return next, watching, errors.Join(errs...)
}

// sampleEvery is how often a neuron with idle rule window is sampled.
func sampleEvery(window time.Duration) time.Duration {
	return min(max(window/10, time.Second), 30*time.Second)
}

// idle samples running neuron st's CPU and pauses it if it has been idle
// for its whole window. It returns when to sample it next.
func (k *Keeper) idle(ctx context.Context, st *sandbox.State) (time.Time, error) {
	now := time.Now()
	window := st.AutoPause
	next := now.Add(sampleEvery(window))
	m, err := k.set.Manager(st.Mode)
	if err != nil {
		return next, err
	}
	mr, ok := m.(sandbox.MetricsReader)
	ip, ok2 := m.(IdlePauser)
	if !ok || !ok2 {
		return now.Add(k.opts.Rescan), nil
	}
	met, err := mr.Metrics(ctx, st.ID)
	if err != nil {
		return next, err
	}
	ss := append(k.samples[st.ID], sample{at: now, cpu: met.CPUSeconds})
	// Keep the newest sample at least a window old, and those after it.
	for len(ss) > 1 && now.Sub(ss[1].at) >= window {
		ss = ss[1:]
	}
	k.samples[st.ID] = ss
	first := ss[0]
	if now.Sub(first.at) < window || now.Sub(st.CreatedAt) < window {
		if due := first.at.Add(window); due.Before(next) {
			next = due
		}
		return next, nil // not watched for a whole window yet
	}
	used := met.CPUSeconds - first.cpu
	if used > k.opts.IdleCPU*now.Sub(first.at).Seconds() {
		return next, nil // busy on its own: a build, a server
	}
	paused, err := ip.PauseIfIdle(ctx, st.ID, now.Add(-window))
	if paused {
		k.log.Info("auto-paused", "neuron", st.ID, "window", window.String(), "cpu", fmt.Sprintf("%.3fs", used))
		delete(k.samples, st.ID)
	}
	return next, err
}

// Wake tells the home's keeper, if one runs, to look again now (a deadline
// or an idle rule was set). Each wake adds a byte to the wake file: its
// size says a wake came since, whatever the clock's granularity.
func Wake(lay layout.Layout) {
	f, err := os.OpenFile(wakeFile(lay), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err == nil {
		f.Write([]byte{'.'})
		f.Close() // the close is what the keeper's watch sees
	}
}

// wakes returns the count of wakes the wake file holds.
func wakes(lay layout.Layout) int64 {
	fi, err := os.Stat(wakeFile(lay))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Ensure makes sure a keeper looks at lay's neurons now: it wakes the one
// that runs, or calls start when none does. Waking first closes the race
// with a keeper that is exiting: either it sees the wake, or start runs.
func Ensure(lay layout.Layout, start func() error) error {
	Wake(lay)
	if Running(lay) {
		return nil
	}
	return start()
}

// Running reports whether a keeper holds lay's home.
func Running(lay layout.Layout) bool {
	lock := store.NewLock(lockFile(lay))
	ok, err := lock.TryShared()
	if err != nil {
		return false
	}
	lock.Release()
	return !ok
}

// watchWake returns a channel sent to when Wake is called for lay.
func watchWake(lay layout.Layout) (<-chan struct{}, func()) {
	// Anew for each keeper (it holds the home's lock): the file must exist
	// to be watched, and stays small.
	os.WriteFile(wakeFile(lay), nil, 0o600)
	return store.Watch(wakeFile(lay), unix.IN_CLOSE_WRITE)
}
