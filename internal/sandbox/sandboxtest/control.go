package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/keeper"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunLifecycle is the suite of what a neuron carries besides its
// isolation (docs/lifecycle.md): labels, deadlines with and without a
// keeper, pause and resume, auto-pause, usage, and the events they record. A mode
// that lacks a capability says so in Config.Lacks, and the suite checks it
// refuses it cleanly instead.
func RunLifecycle(t *testing.T, cfg Config) {
	t.Run("Labels", func(t *testing.T) { testLabels(t, newFixture(t, cfg)) })
	t.Run("DeadlineWithKeeper", func(t *testing.T) { testDeadlineWithKeeper(t, newFixture(t, cfg)) })
	t.Run("DeadlineUnwatched", func(t *testing.T) { testDeadlineUnwatched(t, newFixture(t, cfg)) })
	t.Run("DeadlineOwnedElsewhere", func(t *testing.T) { testDeadlineOwnedElsewhere(t, newFixture(t, cfg)) })
	t.Run("SetTimeout", func(t *testing.T) { testSetTimeout(t, newFixture(t, cfg)) })
	t.Run("Pause", func(t *testing.T) { testPause(t, newFixture(t, cfg)) })
	t.Run("PauseBadInput", func(t *testing.T) { testPauseBadInput(t, newFixture(t, cfg)) })
	t.Run("AutoPause", func(t *testing.T) { testAutoPause(t, newFixture(t, cfg)) })
	t.Run("Metrics", func(t *testing.T) { testMetrics(t, newFixture(t, cfg)) })
}

// lacks reports whether the mode lacks capability c, checking that it
// refuses it as unsupported.
func (f *fixture) lacks(c string, err error) bool {
	why, ok := f.cfg.Lacks[c]
	if !ok {
		return false
	}
	if !errdefs.IsUnsupported(err) {
		f.t.Fatalf("the mode lacks %s (%s), but refused it with %v, want UNSUPPORTED", c, why, err)
	}
	f.t.Skipf("the mode lacks %s: %s", c, why)
	return true
}

// oneMode is a single manager as the keeper sees a set.
type oneMode struct{ m sandbox.Manager }

func (o oneMode) List(ctx context.Context) ([]*sandbox.State, error) { return o.m.List(ctx) }
func (o oneMode) Manager(string) (sandbox.Manager, error)            { return o.m, nil }

// keep runs a keeper over a manager of its own (another host process, as
// a standalone keeper is) until the test ends.
func (f *fixture) keep() {
	k := keeper.New(f.env.Layout, oneMode{f.manager()}, keeper.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("keeper: %v", err)
		}
	})
	waittest.For(f.t, 10*time.Second, "the keeper to start", func() bool { return keeper.Running(f.env.Layout) })
}

// eventsOf returns the recorded events of neuron id, as "type" strings.
func (f *fixture) eventsOf(id string) ([]events.Event, string) {
	f.t.Helper()
	evs, err := events.Open(f.env.Layout).Read(events.Filter{Neurons: []string{id}})
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		names = append(names, string(ev.Type))
	}
	return evs, strings.Join(names, " ")
}

func (f *fixture) get(m sandbox.Manager, id string) *sandbox.State {
	f.t.Helper()
	st, err := m.Get(f.ctx, id)
	if err != nil {
		f.t.Fatalf("get %s: %v", id, err)
	}
	return st
}

func testLabels(t *testing.T, f *fixture) {
	m := f.manager()
	lm, ok := m.(sandbox.Labeler)
	if !ok {
		t.Fatalf("%s mode's manager is no sandbox.Labeler", m.Mode())
	}
	opts := f.cfg.Options
	opts.Labels = labels.Set{"team": "a", "run": "42"}
	if _, err := m.Create(f.ctx, "lab", opts); err != nil {
		t.Fatal(err)
	}
	if got := f.get(m, "lab").Labels.String(); got != "run=42,team=a" {
		t.Fatalf("labels after create: %q", got)
	}
	st, err := lm.SetLabels(f.ctx, "lab", labels.Change{Set: labels.Set{"run": "43", "env": "ci"}, Remove: []string{"team"}})
	if err != nil || st.Labels.String() != "env=ci,run=43" {
		t.Fatalf("SetLabels: %v, %v", st, err)
	}
	// A bad change changes nothing.
	if _, err := lm.SetLabels(f.ctx, "lab", labels.Change{Set: labels.Set{"bad key": "v"}}); !errdefs.IsInvalid(err) {
		t.Errorf("a bad key: %v, want INVALID", err)
	}
	if _, err := lm.SetLabels(f.ctx, "nope", labels.Change{Set: labels.Set{"a": "b"}}); !errdefs.IsNotFound(err) {
		t.Errorf("labels of an unknown neuron: %v, want NOT_FOUND", err)
	}
	// Kept across destroy and create, seen by another process, replaced by
	// a create that names labels.
	if err := m.Destroy(f.ctx, "lab", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	other := f.manager()
	if got := f.get(other, "lab"); got.Status != sandbox.StatusStopped || got.Labels.String() != "env=ci,run=43" {
		t.Fatalf("a stopped neuron's labels: %s %q", got.Status, got.Labels)
	}
	if _, err := lm.SetLabels(f.ctx, "lab", labels.Change{Set: labels.Set{"stopped": "yes"}}); err != nil {
		t.Fatalf("labels of a stopped neuron: %v", err)
	}
	f.create(other, "lab")
	if got := f.get(m, "lab").Labels.String(); got != "env=ci,run=43,stopped=yes" {
		t.Fatalf("labels after a create without labels: %q", got)
	}
	if err := other.Destroy(f.ctx, "lab", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	opts.Labels = labels.Set{"fresh": "1"}
	if _, err := other.Create(f.ctx, "lab", opts); err != nil {
		t.Fatal(err)
	}
	if got := f.get(m, "lab").Labels.String(); got != "fresh=1" {
		t.Fatalf("labels after a create with labels: %q", got)
	}
	opts.Labels = labels.Set{"-bad": "x"}
	if _, err := m.Create(f.ctx, "lab2", opts); !errdefs.IsInvalid(err) {
		t.Errorf("create with a bad label: %v, want INVALID", err)
	}
	if _, err := m.Get(f.ctx, "lab2"); !errdefs.IsNotFound(err) {
		t.Errorf("a refused create left neuron lab2 behind: %v", err)
	}
	if err := m.Destroy(f.ctx, "lab", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(f.ctx, "lab", f.cfg.Options); err != nil {
		t.Fatal(err)
	}
	if got := f.get(m, "lab").Labels; len(got) != 0 {
		t.Errorf("labels outlived a wipe: %q", got)
	}
	evs, names := f.eventsOf("lab")
	if !strings.HasPrefix(names, "created started destroyed started destroyed started wiped created started") {
		t.Errorf("events of lab: %s", names)
	}
	if evs[0].Labels.String() != "run=42,team=a" || evs[0].Principal != "operator" || evs[0].Mode != m.Mode() {
		t.Errorf("the created event: %+v", evs[0])
	}
}

// deadlineFired checks neuron id's timeout event came within a second of
// its deadline, and returns its reason.
func (f *fixture) deadlineFired(id string, deadline time.Time) string {
	f.t.Helper()
	evs, names := f.eventsOf(id)
	for i := len(evs) - 1; i >= 0; i-- {
		if ev := evs[i]; ev.Type == events.Timeout {
			if late := ev.Time.Sub(deadline); late < 0 || late > time.Second {
				f.t.Errorf("the deadline of %s (%s) fired at %s: %s late", id, deadline.Format(time.StampMilli), ev.Time.Format(time.StampMilli), late)
			}
			return ev.Reason
		}
	}
	f.t.Fatalf("no timeout event for %s: %s", id, names)
	return ""
}

func testDeadlineWithKeeper(t *testing.T, f *fixture) {
	creator := f.manager()
	opts := f.cfg.Options
	opts.Timeout = 2 * time.Second
	st, err := creator.Create(f.ctx, "dl", opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deadline == nil || st.OnTimeout != sandbox.OnTimeoutStop || st.Timeout != 2*time.Second {
		t.Fatalf("a create with a timeout: deadline %v, on timeout %q", st.Deadline, st.OnTimeout)
	}
	deadline := *st.Deadline
	// The creator goes away: the keeper, another process, enforces it.
	creator.Close()
	f.keep()
	other := f.manager()
	waittest.For(t, 20*time.Second, "the deadline to stop dl", func() bool {
		_, names := f.eventsOf("dl")
		return strings.Contains(names, "stopped")
	})
	if got := f.get(other, "dl"); got.Status != sandbox.StatusStopped || got.Deadline != nil {
		t.Fatalf("after its deadline: %s, deadline %v", got.Status, got.Deadline)
	}
	if reason := f.deadlineFired("dl", deadline); !strings.Contains(reason, "stop") {
		t.Errorf("the timeout's reason %q does not name its action", reason)
	}
	_, names := f.eventsOf("dl")
	if !strings.HasSuffix(names, "timeout stopped") {
		t.Errorf("events: %s", names)
	}
	// on-timeout pause: the keeper pauses it, and a request resumes it.
	opts.OnTimeout, opts.Timeout = sandbox.OnTimeoutPause, time.Second
	st, err = other.Create(f.ctx, "dl", opts)
	if err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 20*time.Second, "the deadline to pause dl", func() bool { return f.get(other, "dl").Status == sandbox.StatusPaused })
	f.lacksNothing("pause")
	f.deadlineFired("dl", *st.Deadline)
	f.execOK(other, "dl", "echo", "awake")
	if got := f.get(other, "dl"); got.Status != sandbox.StatusRunning || got.Deadline != nil {
		t.Fatalf("after a request: %s, deadline %v", got.Status, got.Deadline)
	}
	// on-timeout wipe: its data goes too.
	opts.OnTimeout, opts.Timeout = sandbox.OnTimeoutWipe, time.Second
	if err := other.Destroy(f.ctx, "dl", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Create(f.ctx, "dl", opts); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 20*time.Second, "the deadline to wipe dl", func() bool {
		_, err := other.Get(f.ctx, "dl")
		return errdefs.IsNotFound(err)
	})
}

// lacksNothing fails when the mode declared it lacks c though it did it.
func (f *fixture) lacksNothing(c string) {
	if why, ok := f.cfg.Lacks[c]; ok {
		f.t.Errorf("the mode says it lacks %s (%s), but it did it", c, why)
	}
}

func (f *fixture) execOK(m sandbox.Manager, id string, argv ...string) string {
	f.t.Helper()
	c, err := m.Connect(f.ctx, id)
	if err != nil {
		f.t.Fatalf("connect %s: %v", id, err)
	}
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Argv: argv}})
	if err != nil || res.ExitCode != 0 {
		f.t.Fatalf("exec %v in %s: %v %+v", argv, id, err, res)
	}
	return string(res.Stdout)
}

func testDeadlineUnwatched(t *testing.T, f *fixture) {
	creator := f.manager()
	opts := f.cfg.Options
	opts.Timeout = time.Second
	st, err := creator.Create(f.ctx, "lone", opts)
	if err != nil {
		t.Fatal(err)
	}
	creator.Close()
	// Nothing watches: no keeper, no daemon. Once the deadline has passed,
	// the next process that looks applies it before it answers.
	<-time.After(time.Until(*st.Deadline) + 100*time.Millisecond)
	if _, names := f.eventsOf("lone"); strings.Contains(names, "timeout") {
		t.Fatalf("something applied the deadline though nothing watched: %s", names)
	}
	got := f.get(f.manager(), "lone")
	if got.Status != sandbox.StatusStopped {
		t.Fatalf("the first look after the deadline answered %s", got.Status)
	}
	_, names := f.eventsOf("lone")
	if !strings.HasSuffix(names, "timeout stopped") {
		t.Errorf("events: %s", names)
	}
}

// A deadline whose action another process cannot take (a daemon owns the
// neuron) stays due: the owner applies it when it looks.
func testDeadlineOwnedElsewhere(t *testing.T, f *fixture) {
	env := f.env
	env.Exclusive = true
	daemon := f.cfg.New(env)
	f.mgrs = append(f.mgrs, daemon)
	opts := f.cfg.Options
	opts.Timeout = time.Second
	st, err := daemon.Create(f.ctx, "owned", opts)
	if err != nil {
		t.Fatal(err)
	}
	<-time.After(time.Until(*st.Deadline) + 100*time.Millisecond)
	got := f.get(f.manager(), "owned") // cannot stop what the daemon owns
	if got.Status != sandbox.StatusRunning || got.Deadline == nil || !got.Deadline.Equal(*st.Deadline) {
		t.Fatalf("after a look that could not apply it: %s, deadline %v (want it kept: %s)", got.Status, got.Deadline, st.Deadline)
	}
	if got := f.get(daemon, "owned"); got.Status != sandbox.StatusStopped {
		t.Fatalf("the owner's look after the deadline: %s, want stopped", got.Status)
	}
}

func testSetTimeout(t *testing.T, f *fixture) {
	m := f.manager()
	dm := m.(sandbox.Deadliner)
	f.create(m, "st")
	if st := f.get(m, "st"); st.Deadline != nil {
		t.Fatalf("a create without a timeout has deadline %v", st.Deadline)
	}
	st, err := dm.SetTimeout(f.ctx, "st", 10*time.Minute, "")
	if err != nil || st.Deadline == nil || st.OnTimeout != sandbox.OnTimeoutStop {
		t.Fatalf("SetTimeout: %+v, %v", st, err)
	}
	deadline := *st.Deadline
	if d := time.Until(deadline); d < 9*time.Minute || d > 10*time.Minute {
		t.Errorf("a 10m timeout set a deadline %s away", d)
	}
	// Reading never moves it: get, list, connect and a request.
	other := f.manager()
	for range 3 {
		other.Get(f.ctx, "st")
		other.List(f.ctx)
		f.execOK(other, "st", "true")
	}
	if got := f.get(m, "st"); got.Deadline == nil || !got.Deadline.Equal(deadline) {
		t.Fatalf("reading moved the deadline from %s to %v", deadline, got.Deadline)
	}
	if st, err = dm.SetTimeout(f.ctx, "st", 5*time.Minute, sandbox.OnTimeoutWipe); err != nil || st.OnTimeout != sandbox.OnTimeoutWipe {
		t.Fatalf("SetTimeout with an action: %+v, %v", st, err)
	}
	if st, err = dm.SetTimeout(f.ctx, "st", 0, ""); err != nil || st.Deadline != nil {
		t.Fatalf("SetTimeout 0: %+v, %v", st, err)
	}
	for _, tc := range []struct {
		id     string
		d      time.Duration
		action sandbox.TimeoutAction
		want   func(error) bool
	}{
		{"st", -time.Second, "", errdefs.IsInvalid},
		{"st", time.Minute, "explode", errdefs.IsInvalid},
		{"nope", time.Minute, "", errdefs.IsNotFound},
	} {
		if _, err := dm.SetTimeout(f.ctx, tc.id, tc.d, tc.action); !tc.want(err) {
			t.Errorf("SetTimeout(%s, %s, %q) = %v", tc.id, tc.d, tc.action, err)
		}
	}
	if got := f.get(m, "st"); got.Deadline != nil {
		t.Errorf("a refused SetTimeout changed the deadline: %v", got.Deadline)
	}
	m.Destroy(f.ctx, "st", sandbox.DestroyOptions{})
	if _, err := dm.SetTimeout(f.ctx, "st", time.Minute, ""); !errdefs.IsNotRunning(err) {
		t.Errorf("SetTimeout of a stopped neuron: %v, want NOT_RUNNING", err)
	}
	for _, opts := range []sandbox.CreateOptions{
		{Timeout: -time.Second}, {Timeout: time.Minute, OnTimeout: "never"}, {OnTimeout: sandbox.OnTimeoutPause}, {AutoPause: -time.Second},
	} {
		o := f.cfg.Options
		o.Timeout, o.OnTimeout, o.AutoPause = opts.Timeout, opts.OnTimeout, opts.AutoPause
		if _, err := m.Create(f.ctx, "st", o); !errdefs.IsInvalid(err) {
			t.Errorf("create with %+v: %v, want INVALID", opts, err)
		}
	}
}

// cpuOf returns the CPU time (user + system) of process pid inside the
// neuron, in clock ticks, read through the neuron's own /proc.
func (f *fixture) cpuOf(c *link.Client, pid int) int64 {
	f.t.Helper()
	res, err := c.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"cat", fmt.Sprintf("/proc/%d/stat", pid)}}})
	if err != nil || res.ExitCode != 0 {
		f.t.Fatalf("reading the CPU time of %d: %v %+v", pid, err, res)
	}
	s := string(res.Stdout)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

func testPause(t *testing.T, f *fixture) {
	m := f.manager()
	pm := m.(sandbox.Pauser)
	f.create(m, "pz")
	c, err := m.Connect(f.ctx, "pz")
	if err != nil {
		t.Fatal(err)
	}
	// A busy loop, and a shell holding a value in its memory.
	loop, err := c.ProcStart(f.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"sh", "-c", "while :; do :; done"}}})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := c.ProcStart(f.ctx, &protocol.ProcStartArgs{Stdin: true, Command: protocol.Command{Argv: []string{"sh", "-c",
		`v="kept-$$-$(date +%N)"; echo "before $v"; read _; echo "after $v"`}}})
	if err != nil {
		t.Fatal(err)
	}
	before := f.procOutput(c, mem.PID, "before ")
	st, err := pm.Pause(f.ctx, "pz", sandbox.PauseOptions{})
	if f.lacks("pause", err) {
		return
	}
	if err != nil || st.Status != sandbox.StatusPaused || st.PausedAt == nil {
		t.Fatalf("pause: %+v, %v", st, err)
	}
	// Status and list do not resume it; another process sees it paused.
	other := f.manager()
	if got := f.get(other, "pz"); got.Status != sandbox.StatusPaused {
		t.Fatalf("another process sees %s", got.Status)
	}
	all, _ := other.List(f.ctx)
	if len(all) != 1 || all[0].Status != sandbox.StatusPaused {
		t.Fatalf("list: %+v", all)
	}
	if _, err := pm.Pause(f.ctx, "pz", sandbox.PauseOptions{}); !errors.Is(err, sandbox.ErrAlreadyPaused) {
		t.Errorf("pause of a paused neuron: %v, want ErrAlreadyPaused", err)
	}
	// While paused, the loop gets no CPU: compare its CPU time across a
	// pause with the wall time it was not paused.
	if _, err := pm.Resume(f.ctx, "pz"); err != nil {
		t.Fatal(err)
	}
	cpu0, t0 := f.cpuOf(c, loop.PID), time.Now()
	if _, err := pm.Pause(f.ctx, "pz", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	tp := time.Now()
	<-time.After(1500 * time.Millisecond)
	tr := time.Now()
	if _, err := pm.Resume(f.ctx, "pz"); err != nil {
		t.Fatal(err)
	}
	cpu1, t1 := f.cpuOf(c, loop.PID), time.Now()
	running := t1.Sub(t0) - tr.Sub(tp)
	used := time.Duration(cpu1-cpu0) * (time.Second / 100) // USER_HZ
	if used > running+300*time.Millisecond {
		t.Errorf("the busy loop used %s of CPU across a 1.5 s pause, with %s of wall time unpaused", used, running)
	}
	// Its memory survived: the shell prints the value it held.
	if err := c.ProcInput(f.ctx, mem.PID, []byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	if after := f.procOutput(c, mem.PID, "after "); after != before {
		t.Errorf("the value held in memory was %q before the pause, %q after", before, after)
	}
	// A request to a paused neuron resumes it, from any process; destroy
	// of a paused neuron works.
	if _, err := pm.Pause(f.ctx, "pz", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := f.execOK(other, "pz", "echo", "hi"); out != "hi\n" {
		t.Errorf("exec on a paused neuron: %q", out)
	}
	if got := f.get(m, "pz"); got.Status != sandbox.StatusRunning {
		t.Errorf("after a request: %s", got.Status)
	}
	if _, err := pm.Resume(f.ctx, "pz"); !errors.Is(err, sandbox.ErrNotPaused) {
		t.Errorf("resume of a running neuron: %v, want ErrNotPaused", err)
	}
	if _, err := pm.Pause(f.ctx, "pz", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	// The process that paused it goes; the next one finds it paused and
	// resumes it.
	m.Close()
	third := f.manager()
	if got := f.get(third, "pz"); got.Status != sandbox.StatusPaused {
		t.Fatalf("after the pausing process went: %s", got.Status)
	}
	if _, err := third.(sandbox.Pauser).Resume(f.ctx, "pz"); err != nil {
		t.Fatal(err)
	}
	if _, err := third.(sandbox.Pauser).Pause(f.ctx, "pz", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := third.Destroy(f.ctx, "pz", sandbox.DestroyOptions{}); err != nil {
		t.Fatalf("destroy of a paused neuron: %v", err)
	}
	if got := f.get(third, "pz"); got.Status != sandbox.StatusStopped {
		t.Fatalf("after destroy: %s", got.Status)
	}
	if _, names := f.eventsOf("pz"); names != "created started paused resumed paused resumed paused resumed paused resumed paused destroyed" {
		t.Errorf("events: %s", names)
	}
}

// procOutput waits for background process pid to print a line starting
// with prefix, and returns the rest of it.
func (f *fixture) procOutput(c *link.Client, pid int, prefix string) string {
	f.t.Helper()
	var line string
	waittest.For(f.t, 20*time.Second, "output "+prefix, func() bool {
		var out strings.Builder
		c.ProcAttach(f.ctx, &protocol.ProcAttachArgs{PID: pid}, func(_ string, _ int64, p []byte) error { out.Write(p); return nil })
		for _, l := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				line = rest
				return true
			}
		}
		return false
	})
	return line
}

func testPauseBadInput(t *testing.T, f *fixture) {
	m := f.manager()
	pm := m.(sandbox.Pauser)
	if _, err := pm.Pause(f.ctx, "nope", sandbox.PauseOptions{}); !errdefs.IsNotFound(err) && !f.lacks("pause", err) {
		t.Errorf("pause of an unknown neuron: %v, want NOT_FOUND", err)
	}
	f.create(m, "bad")
	m.Destroy(f.ctx, "bad", sandbox.DestroyOptions{})
	if _, err := pm.Pause(f.ctx, "bad", sandbox.PauseOptions{}); !errdefs.IsNotRunning(err) && !f.lacks("pause", err) {
		t.Errorf("pause of a stopped neuron: %v, want NOT_RUNNING", err)
	}
	if _, err := pm.Resume(f.ctx, "bad"); !errdefs.IsNotRunning(err) {
		t.Errorf("resume of a stopped neuron: %v, want NOT_RUNNING", err)
	}
	f.create(m, "bad")
	_, err := pm.Pause(f.ctx, "bad", sandbox.PauseOptions{ToDisk: true})
	if _, ok := f.cfg.Lacks["pause --to-disk"]; ok {
		f.lacks("pause --to-disk", err)
		if got := f.get(m, "bad"); got.Status != sandbox.StatusRunning {
			t.Errorf("a refused pause --to-disk left it %s", got.Status)
		}
		return
	}
	if err != nil {
		t.Fatalf("pause --to-disk: %v", err)
	}
	if out := f.execOK(m, "bad", "echo", "back"); out != "back\n" {
		t.Errorf("exec after pause --to-disk: %q", out)
	}
}

func testAutoPause(t *testing.T, f *fixture) {
	m := f.manager()
	opts := f.cfg.Options
	opts.AutoPause = 2 * time.Second
	busy, err := m.Create(f.ctx, "busy", opts)
	if err != nil {
		t.Fatal(err)
	}
	if busy.AutoPause != 2*time.Second {
		t.Fatalf("the idle rule is not in the state: %+v", busy.Lifecycle)
	}
	f.create(m, "quiet") // no rule: never paused
	st, err := m.Create(f.ctx, "idle", opts)
	if err != nil {
		t.Fatal(err)
	}
	// busy runs a loop: its CPU keeps it awake.
	bc, err := m.Connect(f.ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.ProcStart(f.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"sh", "-c", "while :; do :; done"}}}); err != nil {
		t.Fatal(err)
	}
	f.keep()
	waittest.For(t, 30*time.Second, "idle to be auto-paused", func() bool { return f.get(m, "idle").Status == sandbox.StatusPaused })
	f.lacksNothing("pause")
	if since := time.Since(st.CreatedAt); since < 2*time.Second {
		t.Errorf("auto-paused %s after its create, before a whole idle window of 2s", since)
	}
	// The event is written just after the state shows the pause: wait for it.
	var names string
	if !waittest.Until(10*time.Second, func() bool {
		_, names = f.eventsOf("idle")
		return strings.HasSuffix(names, "auto-paused")
	}) {
		t.Errorf("events: %s, want the last auto-paused", names)
	}
	// A request resumes it, and it is watched again.
	if out := f.execOK(m, "idle", "echo", "up"); out != "up\n" {
		t.Errorf("exec: %q", out)
	}
	waittest.For(t, 30*time.Second, "idle to be auto-paused again", func() bool { return f.get(m, "idle").Status == sandbox.StatusPaused })
	for _, id := range []string{"busy", "quiet"} {
		if got := f.get(m, id); got.Status != sandbox.StatusRunning {
			t.Errorf("%s was paused (%s): it was busy, or had no idle rule", id, got.Status)
		}
	}
}
