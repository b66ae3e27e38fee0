package pool_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/pool"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

var agentBin string

func TestMain(m *testing.M) {
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = bin
	os.Exit(m.Run())
}

func TestParseSpecs(t *testing.T) {
	good := map[string][]pool.Spec{
		"":                  nil,
		"nsbox=8":           {{Mode: "nsbox", Size: 8}},
		"nsbox=8, docker=2": {{Mode: "nsbox", Size: 8}, {Mode: "docker", Size: 2}},
		"nsbox=0":           nil,
	}
	for in, want := range good {
		got, err := pool.ParseSpecs([]string{in})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"nsbox", "nsbox=x", "=3", "nsbox=-1", "nsbox=100000", "nsbox=1,nsbox=2"} {
		if _, err := pool.ParseSpecs([]string{in}); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// nsboxManager is an nsbox manager over a home of its own.
func nsboxManager(t testing.TB) (sandbox.Manager, layout.Layout) {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	env := sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }}
	if c := nsbox.SelfCheck(context.Background(), env); !c.OK {
		if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
			t.Fatalf("nsbox cannot run here: %s", c.Summary)
		}
		t.Skipf("nsbox cannot run here: %s", c.Summary)
	}
	m := nsbox.New(env)
	t.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m, lay
}

func waitReady(t testing.TB, p *pool.Pool, n int) {
	t.Helper()
	waittest.For(t, 2*time.Minute, fmt.Sprintf("%d warm neurons", n), func() bool { return p.Stats().Ready == n })
}

// warmEntries lists the warm names under the home's overlays (directories
// and claimed neurons' links).
func warmEntries(t testing.TB, lay layout.Layout) (dirs, links []string) {
	entries, err := os.ReadDir(lay.Overlays)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".warm-") {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			links = append(links, e.Name())
		} else {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs, links
}

// 100 creates at once against a pool of 8: every one succeeds, the first
// ones by a claim and the rest cold; each neuron is its own; the pool
// fills again; and closing the pool removes the warm neurons it holds and
// nothing it gave out.
func TestConcurrentCreates(t *testing.T) {
	m, lay := nsboxManager(t)
	p, err := pool.New(m, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 100
	whys := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, whys[i], errs[i] = p.Create(ctx, fmt.Sprintf("c%03d", i), sandbox.CreateOptions{})
		}()
	}
	wg.Wait()
	claimed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create c%03d (%s): %v", i, whys[i], errs[i])
		}
		switch whys[i] {
		case pool.Claimed:
			claimed++
		case pool.Empty:
		default:
			t.Fatalf("create c%03d: reason %q", i, whys[i])
		}
	}
	s := p.Stats()
	t.Logf("claimed %d of %d; stats %+v", claimed, n, s)
	if claimed < 8 || s.Claims != int64(claimed) || s.Misses != int64(n-claimed) || s.Failed != 0 {
		t.Fatalf("claimed %d, stats %+v", claimed, s)
	}
	all, err := m.List(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("list: %d neurons, %v", len(all), err)
	}
	secrets := map[string]string{}
	for _, st := range all {
		c, err := m.Connect(ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Shell: `echo "$(hostname) $NSYS_CORTEX_NEURON"`}})
		if err != nil || string(res.Stdout) != st.ID+" "+st.ID+"\n" {
			t.Fatalf("%s: %q %v", st.ID, res.Stdout, err)
		}
		b, err := os.ReadFile(filepath.Join(st.OverlayPath, ".channel"))
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := secrets[string(b)]; dup {
			t.Fatalf("%s and %s share a channel secret", st.ID, other)
		}
		secrets[string(b)] = st.ID
	}
	waitReady(t, p, 8)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	dirs, links := warmEntries(t, lay)
	if len(dirs) != 0 || len(links) != claimed {
		t.Fatalf("after close: warm directories %v, %d links (want %d: one per claimed neuron)", dirs, len(links), claimed)
	}
	sandboxtest.DestroyAll(m)
	if dirs, links := warmEntries(t, lay); len(dirs)+len(links) != 0 {
		t.Fatalf("after the neurons were wiped: %v %v", dirs, links)
	}
	ents, _ := os.ReadDir(filepath.Join(lay.SocketsDir(), nsbox.Mode))
	var socks []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".listen-") { // the hosts' staging directories stay (link.Listen)
			socks = append(socks, e.Name())
		}
	}
	if len(socks) != 0 {
		t.Fatalf("channel directories left: %v", socks)
	}
}

// A create the pool cannot serve is booted cold and says why; the warm
// neuron stays for the next.
func TestMisses(t *testing.T) {
	m, lay := nsboxManager(t)
	p, err := pool.New(m, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p, 1)
	ctx := context.Background()
	if _, err := m.Create(ctx, "had", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "had", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	st, why, err := p.Create(ctx, "had", sandbox.CreateOptions{})
	if err != nil || why != "not from pool: neuron had has data already" || st.ID != "had" {
		t.Fatalf("create of an id with data: %q %v", why, err)
	}
	_, why, err = p.Create(ctx, "limited", sandbox.CreateOptions{Limits: sandbox.Limits{Pids: 64}})
	if err != nil || why != "not from pool: it asks for limits of its own" {
		t.Fatalf("create with limits: %q %v", why, err)
	}
	// Creates a claim must refuse (an invalid id or environment) are
	// refused as a cold create refuses them, and cost the pool nothing: a
	// review found each one leaked a running warm neuron.
	for _, bad := range []struct {
		id  string
		env []string
	}{{"bad", []string{"x"}}, {"bad", []string{"=x"}}, {"bad", []string{"A=\x00"}}, {"../bad", nil}} {
		if _, _, err := p.Create(ctx, bad.id, sandbox.CreateOptions{Env: bad.env}); err == nil || !errdefs.IsInvalid(err) {
			t.Fatalf("create %q with %q: %v", bad.id, bad.env, err)
		}
	}
	if s := p.Stats(); s.Ready != 1 || s.Failed != 0 {
		t.Fatalf("stats after the invalid creates: %+v", s)
	}
	if _, why, err = p.Create(ctx, "warm", sandbox.CreateOptions{}); err != nil || why != pool.Claimed {
		t.Fatalf("create after the misses: %q %v", why, err)
	}
	if s := p.Stats(); s.Claims != 1 || s.Misses != 6 {
		t.Fatalf("stats %+v", s)
	}
	waitReady(t, p, 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if dirs, _ := warmEntries(t, lay); len(dirs) != 0 {
		t.Fatalf("after close: %v", dirs)
	}
}

// A mode that cannot keep warm neurons is refused loudly.
func TestUnsupportedMode(t *testing.T) {
	t.Setenv(sandbox.EnvAllowInsecure, "1")
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	m := process.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	defer m.Close()
	if _, err := pool.New(m, 2, nil); err == nil || !strings.Contains(err.Error(), "warm pool") {
		t.Fatalf("a pool of process neurons: %v", err)
	}
}

// A daemon killed with a pool leaves its warm neurons running, held by no
// one; the next daemon sweeps them at its start whether it keeps a pool
// or not (pool.Sweep), and leaves a held one alone.
func TestSweep(t *testing.T) {
	m, lay := nsboxManager(t)
	held, err := m.(sandbox.Warmer).Warm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.(sandbox.Warmer).Drop(context.Background(), held)
	env := sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }}
	gone := nsbox.New(env)
	orphan, err := gone.Warm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gone.Close() // killed: its warm neuron runs on, no one's
	set := sandbox.NewSet(env, nsbox.Backend())
	defer set.Close()
	pool.Sweep(context.Background(), set, nil)
	dirs, _ := warmEntries(t, lay)
	if len(dirs) != 1 || dirs[0] != held {
		t.Fatalf("after the sweep: %v (want only %s, held)", dirs, held)
	}
	waittest.For(t, 10*time.Second, "the orphan's processes to end", func() bool {
		return len(sandboxtest.Processes(func(a []string) bool { return strings.Contains(strings.Join(a, " "), "--id "+orphan+" ") })) == 0
	})
}
