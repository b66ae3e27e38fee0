package sandboxtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// RunWarmer runs the conformance suite of warm neurons (sandbox.Warmer,
// the warm pool's contract) against a mode.
func RunWarmer(t *testing.T, cfg Config) {
	if cfg.New == nil || cfg.Env == nil {
		t.Fatal("sandboxtest: Config needs New and Env")
	}
	t.Run("Claim", func(t *testing.T) { testClaim(t, newFixture(t, cfg)) })
	t.Run("Refusals", func(t *testing.T) { testClaimRefusals(t, newFixture(t, cfg)) })
	t.Run("AgentKilledAfterClaim", func(t *testing.T) { testClaimedAgentKilled(t, newFixture(t, cfg)) })
	t.Run("DropAndSweep", func(t *testing.T) { testWarmDropSweep(t, newFixture(t, cfg)) })
	t.Run("CleanupDuringClaims", func(t *testing.T) { testCleanupDuringClaims(t, newFixture(t, cfg)) })
}

func (f *fixture) warmer() (sandbox.Manager, sandbox.Warmer) {
	f.t.Helper()
	m := f.manager()
	w, ok := m.(sandbox.Warmer)
	if !ok {
		f.t.Fatalf("%s mode's manager is no sandbox.Warmer", m.Mode())
	}
	if err := w.Warmable(); err != nil {
		f.t.Fatalf("warmable: %v", err)
	}
	return m, w
}

func (f *fixture) warm(w sandbox.Warmer) string {
	f.t.Helper()
	name, err := w.Warm(f.ctx)
	if err != nil {
		f.t.Fatalf("warm: %v", err)
	}
	f.t.Cleanup(func() { w.Drop(f.ctx, name) }) // a no-op once claimed
	return name
}

// The host's records of a neuron name: its overlay directory, channel
// directory and log.
func (f *fixture) records(name string) []string {
	var out []string
	for _, p := range []string{f.env.Layout.OverlayDir(name), f.env.Layout.ChannelDir(f.cfg.New(f.env).Mode(), name),
		filepath.Join(f.env.Layout.LogsDir(), "neurons", name+".log")} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// A claimed warm neuron is what a create of its id gives: that id as its
// name, hostname and environment, the labels, environment and timeout of
// the claim, a channel secret of its own (not the warm neuron's), its data
// under its id's own directory, and nothing of any other claim. Warm
// neurons are in no list and no lookup. Another host process reaches the
// claimed one as any other neuron, and a destroyed one is created again
// cold with its data.
func testClaim(t *testing.T, f *fixture) {
	m, w := f.warmer()
	a, b := f.warm(w), f.warm(w)
	if all, err := m.List(f.ctx); err != nil || len(all) != 0 {
		t.Fatalf("list shows warm neurons: %v %v", all, err)
	}
	for _, name := range []string{a, b} {
		if _, err := m.Get(f.ctx, name); err == nil {
			t.Fatalf("get %s found a warm neuron", name)
		}
		if _, err := m.Connect(f.ctx, name); err == nil {
			t.Fatalf("connect %s reached a warm neuron", name)
		}
	}
	warmSecret := readFile(t, filepath.Join(f.env.Layout.OverlayDir(a), ".channel"))
	opts := sandbox.CreateOptions{Env: []string{"FOO=bar"}, Labels: labels.Set{"team": "x"}}
	opts.Timeout = time.Hour
	st, err := w.Claim(f.ctx, a, "one", opts)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if st.ID != "one" || st.Status != sandbox.StatusRunning || st.Labels["team"] != "x" || st.Deadline == nil ||
		st.OverlayPath != f.env.Layout.OverlayDir("one") {
		t.Fatalf("claimed: %+v", st)
	}
	if s := readFile(t, filepath.Join(st.OverlayPath, ".channel")); s == "" || s == warmSecret {
		t.Fatalf("the claimed neuron proves the warm neuron's secret")
	}
	if left := f.records(a); len(left) != 1 || !strings.HasSuffix(left[0], a) {
		t.Fatalf("the warm name still has records (want only discovery's link): %v", left)
	}
	// Another host process, with what the claimed neuron's records say.
	m2 := f.manager()
	c := f.connect(m2, "one")
	if got := f.shell(c, `hostname; cat /etc/hostname; echo "$NSYS_CORTEX_NEURON $FOO"; grep -c "[[:space:]]one$" /etc/hosts; pwd`); got !=
		"one\none\none bar\n1\n"+st.Workdir {
		t.Fatalf("inside the claimed neuron: %q", got)
	}
	f.shell(c, "echo of-one > mine.txt")
	st2, err := w.Claim(f.ctx, b, "two", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c2 := f.connect(m2, "two")
	if got := f.shell(c2, `hostname; echo "[$FOO]"; ls mine.txt 2>&1 || true`); !strings.HasPrefix(got, "two\n[]\n") || !strings.Contains(got, "No such file") {
		t.Fatalf("inside the second claim: %q", got)
	}
	if st2.Labels != nil || st2.Deadline != nil {
		t.Fatalf("the second claim has the first's records: %+v", st2)
	}
	all, err := m2.List(f.ctx)
	if err != nil || len(all) != 2 || all[0].ID != "one" || all[1].ID != "two" {
		t.Fatalf("list: %v %v", all, err)
	}
	// Orphan cleanup in another process finds each claimed neuron's PID 1
	// (whose command line names the warm neuron) as the claimed one's.
	if killed, err := m2.(sandbox.OrphanCleaner).CleanupOrphans(f.ctx); err != nil || len(killed) != 0 {
		t.Fatalf("cleanup-orphans killed %v (%v)", killed, err)
	}
	if got := f.shell(c, "cat mine.txt"); got != "of-one" {
		t.Fatalf("after cleanup-orphans: %q", got)
	}
	// Destroyed, and created again cold: the data is the neuron's.
	if err := m.Destroy(f.ctx, "one", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if left := f.records(a); len(left) != 0 {
		t.Fatalf("the destroyed neuron's warm name left %v", left)
	}
	f.create(m, "one")
	if got := f.shell(f.connect(m, "one"), "hostname; cat mine.txt"); got != "one\nof-one" {
		t.Fatalf("created again: %q", got)
	}
}

// A claim that a warm neuron cannot serve (the id has data; options it
// was not booted with) leaves it as it was, for the next; invalid ids are
// refused.
func testClaimRefusals(t *testing.T, f *fixture) {
	m, w := f.warmer()
	f.create(m, "taken")
	name := f.warm(w)
	refusals := []struct {
		id   string
		opts sandbox.CreateOptions
	}{
		{"taken", sandbox.CreateOptions{}},
		{"fresh", sandbox.CreateOptions{Image: "/nonexistent"}},
		{"fresh", sandbox.CreateOptions{Limits: sandbox.Limits{Pids: 77}}},
		{"fresh", sandbox.CreateOptions{Network: sandbox.Network{Mode: sandbox.NetworkFull}}},
		{"fresh", sandbox.CreateOptions{Env: []string{"BIG=" + strings.Repeat("x", 40<<10)}}},
	}
	for _, r := range refusals {
		if _, err := w.Claim(f.ctx, name, r.id, r.opts); !errors.Is(err, sandbox.ErrNotWarmable) {
			t.Fatalf("claim as %s with %+v: %v, want ErrNotWarmable", r.id, r.opts, err)
		}
	}
	// Invalid ids, and environments the agent would refuse, are refused
	// before anything is renamed (an adversarial review's wedge: a claim
	// failing half-way), and leave the warm neuron for the next create
	// (a second review: a pool that took them for a lost neuron leaked
	// one running neuron per such create).
	for _, id := range []string{"", "../x", ".warm-x", "a/b"} {
		if _, err := w.Claim(f.ctx, name, id, sandbox.CreateOptions{}); !errors.Is(err, sandbox.ErrNotWarmable) || !errdefs.IsInvalid(err) {
			t.Fatalf("claim as %q: %v", id, err)
		}
	}
	for _, env := range [][]string{{"A=\x00"}, {"=x"}, {"NOEQUALS"}} {
		if _, err := w.Claim(f.ctx, name, "fresh", sandbox.CreateOptions{Env: env}); !errors.Is(err, sandbox.ErrNotWarmable) || !errdefs.IsInvalid(err) {
			t.Fatalf("claim with env %q: %v", env, err)
		}
	}
	if left := f.records("fresh"); len(left) != 0 {
		t.Fatalf("refused claims left %v", left)
	}
	if _, err := w.Claim(f.ctx, "taken", "fresh", sandbox.CreateOptions{}); err == nil {
		t.Fatal("a claim of an ordinary neuron went through")
	}
	if got := f.shell(f.connect(m, "taken"), "hostname"); got != "taken" {
		t.Fatalf("the neuron a claim was refused for: %q", got)
	}
	if _, err := w.Claim(f.ctx, name, "fresh", sandbox.CreateOptions{}); err != nil {
		t.Fatalf("the warm neuron after the refusals: %v", err)
	}
	if got := f.shell(f.connect(m, "fresh"), "hostname"); got != "fresh" {
		t.Fatalf("claimed after refusals: %q", got)
	}
}

// Commands run as the agent's user and can kill it: PID 1 starts it again
// as the claimed neuron, with the claim's secret, not as the warm one
// (whose name and secret the host refuses now).
func testClaimedAgentKilled(t *testing.T, f *fixture) {
	_, w := f.warmer()
	if _, err := w.Claim(f.ctx, f.warm(w), "phoenix", sandbox.CreateOptions{Env: []string{"FOO=kept"}}); err != nil {
		t.Fatal(err)
	}
	c := f.connect(f.manager(), "phoenix")
	if _, err := c.Exec(f.ctx, &link.ExecRequest{Command: protocol.Command{Shell: "kill -9 -1"}, Timeout: time.Minute}); !errdefs.IsNotRunning(err) {
		t.Fatalf("kill -9 -1: %v", err)
	}
	var got string
	back := func() bool {
		res, err := c.Exec(f.ctx, &link.ExecRequest{Command: sh(`echo "$NSYS_CORTEX_NEURON $FOO $(hostname)"`)})
		if err == nil {
			got = strings.TrimSpace(string(res.Stdout))
		}
		return err == nil
	}
	if !waittest.Until(30*time.Second, back) {
		t.Fatal("the claimed neuron's agent did not come back")
	}
	if got != "phoenix kept phoenix" {
		t.Fatalf("the agent came back as %q", got)
	}
}

// Drop removes a warm neuron whole; a warm neuron whose holder went away
// without dropping it (a daemon killed) is removed by the next sweep, and
// one a live holder keeps is not.
func testWarmDropSweep(t *testing.T, f *fixture) {
	_, w := f.warmer()
	name := f.warm(w)
	pids := warmProcesses(name)
	if len(pids) == 0 {
		t.Fatalf("no process of warm neuron %s", name)
	}
	if err := w.Drop(f.ctx, name); err != nil {
		t.Fatal(err)
	}
	if left := f.records(name); len(left) != 0 {
		t.Fatalf("drop left %v", left)
	}
	waittest.For(t, 10*time.Second, "the dropped neuron's processes to end", func() bool { return len(warmProcesses(name)) == 0 })

	// A warm neuron that died while it waited is no claim's: the claim
	// fails (the pool boots the create cold) and nothing of it is left.
	dead := f.warm(w)
	for _, pid := range warmProcesses(dead) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	waittest.For(t, 10*time.Second, "the killed warm neuron to end", func() bool { return len(warmProcesses(dead)) == 0 })
	if _, err := w.Claim(f.ctx, dead, "from-dead", sandbox.CreateOptions{}); err == nil || errors.Is(err, sandbox.ErrNotWarmable) {
		t.Fatalf("a claim of a dead warm neuron: %v", err)
	}
	// Whichever notices the death first removes it: the claim, or the
	// host's watch of the agent (which may still be at it).
	waittest.For(t, 10*time.Second, "the dead warm neuron's records to go", func() bool {
		return len(f.records(dead))+len(f.records("from-dead")) == 0
	})

	m1, w1 := f.warmer()
	kept := f.warm(w)
	orphan := f.warm(w1)
	m1.Close() // its holder goes; the neuron runs on, no one's
	if swept := w.SweepWarm(f.ctx); !slices.Equal(swept, []string{orphan}) {
		t.Fatalf("swept %v, want [%s] (and not %s, which a live holder keeps)", swept, orphan, kept)
	}
	if left := f.records(orphan); len(left) != 0 {
		t.Fatalf("the sweep left %v", left)
	}
	waittest.For(t, 10*time.Second, "the swept neuron's processes to end", func() bool { return len(warmProcesses(orphan)) == 0 })
	if _, err := w.Claim(f.ctx, kept, "after-sweep", sandbox.CreateOptions{}); err != nil {
		t.Fatalf("the kept warm neuron: %v", err)
	}
}

// warmProcesses lists the host processes of warm neuron name (its PID 1).
func warmProcesses(name string) []int {
	return Processes(func(a []string) bool {
		i := slices.Index(a, "--id")
		return i >= 0 && i+1 < len(a) && a[i+1] == name
	})
}

// Orphan cleanup and lookups of the id in another process while claims go
// on never take a neuron being claimed (its PID 1 still named for the
// warm neuron; its state pending under the id) for an orphan or a dead
// create: every claim succeeds and its neuron runs.
func testCleanupDuringClaims(t *testing.T, f *fixture) {
	_, w := f.warmer()
	const n = 8
	names := make([]string, n)
	for i := range names {
		names[i] = f.warm(w)
	}
	other := f.manager()
	cleaner := other.(sandbox.OrphanCleaner)
	stop := make(chan struct{})
	done := make(chan []string)
	var target atomic.Value // the id being claimed, looked up in a loop
	target.Store("")
	var looking sync.WaitGroup
	looking.Add(1)
	go func() {
		defer looking.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if id := target.Load().(string); id != "" {
				other.Get(f.ctx, id)
			}
		}
	}()
	go func() {
		var killed []string
		for {
			select {
			case <-stop:
				done <- killed
				return
			default:
			}
			k, _ := cleaner.CleanupOrphans(f.ctx)
			killed = append(killed, k...)
		}
	}()
	for i, name := range names {
		id := fmt.Sprintf("busy%d", i)
		target.Store(id)
		if _, err := w.Claim(f.ctx, name, id, sandbox.CreateOptions{}); err != nil {
			close(stop)
			<-done
			looking.Wait()
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	defer looking.Wait()
	close(stop)
	if killed := <-done; len(killed) != 0 {
		t.Fatalf("cleanup-orphans killed %v during the claims", killed)
	}
	m := f.manager()
	for i := range n {
		id := fmt.Sprintf("busy%d", i)
		if got := f.shell(f.connect(m, id), "hostname"); got != id {
			t.Fatalf("%s: %q", id, got)
		}
	}
}
