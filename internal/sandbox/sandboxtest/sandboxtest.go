// Package sandboxtest is the conformance suite every sandbox backend runs
// unchanged: lifecycle, exec, files, background processes, PTYs,
// persistence across destroy/recreate, agent death, and discovery across
// host processes. A backend's test calls Run with a Config that builds its
// manager; nothing here knows any backend. RunSnapshotter is the suite of
// the snapshot capability (sandbox.Snapshotter), run by every mode that
// has it, and RunBenchmarks the benchmarks every mode runs.
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Config describes the backend under test.
type Config struct {
	// New builds a manager over env. The suite calls it more than once per
	// env to stand in for separate host processes.
	New func(env sandbox.Env) sandbox.Manager
	// Env returns the environment for a fresh home directory (the suite
	// fills in Layout).
	Env func(t testing.TB) sandbox.Env
	// Confined is true when file operations are confined to the workdir, so
	// that ".." and symlinks out of it must fail with PATH_ESCAPE.
	Confined bool
	// Kill kills a neuron's agent from outside; the default SIGKILLs State.PID.
	Kill func(t *testing.T, st *sandbox.State)
	// Detached is true when no host process of the manager's stands for a
	// neuron (a detached container): its state names no pid.
	Detached bool
	// OwnKernel is true when neurons run a kernel of their own (a VM):
	// their processes are not the host's, so the suite looks for them
	// inside the neuron, through its channel.
	OwnKernel bool
	// Options are the options of every neuron the suite creates.
	Options sandbox.CreateOptions
	// ChannelDir is where the host's sockets appear inside the neuron
	// (empty: at their host path, as in process mode).
	ChannelDir string
	// Unconfined says why the fixture's neurons are no boundary at all
	// (process mode), so the escape battery is not tried; empty otherwise.
	Unconfined string
	// EscapeExempt names the attempts of the escape battery that do not
	// apply to the mode, each with why (docs/security.md lists them).
	EscapeExempt map[string]string
	// NoDiskWrites says why the fixture's neurons do not write to the disk
	// their ceiling sizes (a fake VMM, whose guest writes to the host), so
	// the disk ceiling cannot be tried on it; empty for real neurons.
	NoDiskWrites string
	// NoGuestState says why the fixture's snapshots do not hold the
	// guest's files and processes (a fake VMM, whose guest runs on the
	// host), so RunSnapshotter does not look for them after a restore;
	// empty for real VMs.
	NoGuestState string
	// Lacks names the lifecycle capabilities the mode does not have
	// ("pause", "pause --to-disk"), each with why: RunLifecycle checks it
	// refuses them as unsupported, and that it lacks nothing it does.
	Lacks map[string]string
	// RemoteFiles is true when the neurons' files are not on this host (a
	// cluster's volume): State.OverlayPath is empty.
	RemoteFiles bool
	// IDLimit is the longest id the mode takes, when it is shorter than
	// ids.MaxLen (Kubernetes names objects by DNS labels); 0: ids.MaxLen.
	IDLimit int
	// Skip names the tests of Run the mode cannot take, each with why (a
	// limit of the mode or of its test fixture, said in the mode's docs);
	// Run skips them saying so. Empty for every mode that runs on the
	// host.
	Skip map[string]string
	// Bench is what RunBenchmarks needs beyond the above.
	Bench Bench
}

// SeePID1 is the escape battery's attempt to list PID 1's threads, which
// in nsbox would show the host's network (its PID 1 lives there). Modes
// whose PID 1 is in the neuron's own namespaces exempt it with this why.
const SeePID1 = "see PID 1 in /proc (its threads show the host's network)"

// ShortTempDir returns a fresh directory with a short path (Unix socket
// paths are limited) that is removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// DestroyAll destroys every neuron m lists, their data too: a test's or
// a benchmark's cleanup, before it closes m. Errors are ignored (what is
// left is the test's own check to make).
func DestroyAll(m interface {
	List(context.Context) ([]*sandbox.State, error)
	Destroy(context.Context, string, sandbox.DestroyOptions) error
}) {
	all, _ := m.List(context.Background())
	for _, st := range all {
		m.Destroy(context.Background(), st.ID, sandbox.DestroyOptions{Wipe: true})
	}
}

// fixture is one test's home directory and the managers over it.
type fixture struct {
	t    *testing.T
	cfg  Config
	env  sandbox.Env
	ctx  context.Context
	mgrs []sandbox.Manager
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	return newFixtureAt(t, cfg, filepath.Join(ShortTempDir(t), "h"))
}

// newFixtureAt is newFixture with its home at home.
func newFixtureAt(t *testing.T, cfg Config, home string) *fixture {
	t.Helper()
	env := cfg.Env(t)
	lay, err := layout.New(home, "")
	if err != nil {
		t.Fatal(err)
	}
	env.Layout = lay
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	f := &fixture{t: t, cfg: cfg, env: env, ctx: ctx}
	t.Cleanup(func() {
		// Destroy whatever the test left running, then close every manager.
		m := f.manager()
		if all, err := m.List(context.Background()); err == nil {
			for _, st := range all {
				m.Destroy(context.Background(), st.ID, sandbox.DestroyOptions{Wipe: true})
			}
		}
		for _, m := range f.mgrs {
			m.Close()
		}
		cancel()
	})
	return f
}

// manager returns a new manager over the fixture's home: another "process".
func (f *fixture) manager() sandbox.Manager {
	m := f.cfg.New(f.env)
	f.mgrs = append(f.mgrs, m)
	return m
}

func (f *fixture) create(m sandbox.Manager, id string) *sandbox.State {
	f.t.Helper()
	st, err := m.Create(f.ctx, id, f.cfg.Options)
	if err != nil {
		f.t.Fatalf("create %s: %v", id, err)
	}
	return st
}

func (f *fixture) kill(st *sandbox.State) {
	f.t.Helper()
	if f.cfg.Kill != nil {
		f.cfg.Kill(f.t, st)
		return
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		f.t.Fatalf("kill agent %d: %v", st.PID, err)
	}
}

// Run runs the whole suite.
func Run(t *testing.T, cfg Config) {
	if cfg.New == nil || cfg.Env == nil {
		t.Fatal("sandboxtest: Config needs New and Env")
	}
	run := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if why, ok := cfg.Skip[name]; ok {
				t.Skip(why)
			}
			f(t)
		})
	}
	run("Lifecycle", func(t *testing.T) { testLifecycle(t, newFixture(t, cfg)) })
	run("InvalidIDs", func(t *testing.T) { testInvalidIDs(t, newFixture(t, cfg)) })
	run("Exec", func(t *testing.T) { testExec(t, newFixture(t, cfg)) })
	run("Files", func(t *testing.T) { testFiles(t, newFixture(t, cfg)) })
	run("Processes", func(t *testing.T) { testProcesses(t, newFixture(t, cfg)) })
	run("Pty", func(t *testing.T) { testPty(t, newFixture(t, cfg)) })
	run("Persistence", func(t *testing.T) { testPersistence(t, newFixture(t, cfg)) })
	run("Death", func(t *testing.T) { testDeath(t, newFixture(t, cfg)) })
	run("Discovery", func(t *testing.T) { testDiscovery(t, newFixture(t, cfg)) })
	run("Ownership", func(t *testing.T) { testOwnership(t, newFixture(t, cfg)) })
	run("Boundary", func(t *testing.T) { testBoundary(t, newFixture(t, cfg)) })
	run("Escapes", func(t *testing.T) { testEscapes(t, newFixture(t, cfg)) })
	run("DiskCeiling", func(t *testing.T) { testDiskCeiling(t, newFixture(t, cfg)) })
	run("NoLeaks", func(t *testing.T) { testNoLeaks(t, cfg) })
}

func testLifecycle(t *testing.T, f *fixture) {
	m := f.manager()
	st := f.create(m, "life")
	if st.Status != sandbox.StatusRunning || (st.PID <= 0) != f.cfg.Detached || st.Pending || st.Mode != m.Mode() || st.Workdir == "" || (st.OverlayPath == "") != f.cfg.RemoteFiles {
		t.Fatalf("state after create: %+v", st)
	}
	got, err := m.Get(f.ctx, "life")
	if err != nil || got.Status != sandbox.StatusRunning || got.PID != st.PID {
		t.Fatalf("get: %+v, %v", got, err)
	}
	all, err := m.List(f.ctx)
	if err != nil || len(all) != 1 || all[0].ID != "life" {
		t.Fatalf("list: %+v, %v", all, err)
	}
	_, err = m.Create(f.ctx, "life", f.cfg.Options)
	var ar *sandbox.AlreadyRunningError
	if !errors.As(err, &ar) || ar.State.PID != st.PID {
		t.Fatalf("create of a running neuron: %v, want AlreadyRunningError", err)
	}
	c, err := m.Connect(f.ctx, "life")
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(f.ctx)
	if err != nil || h.PID <= 0 || h.Protocol == "" || h.UptimeMs < 0 || h.HeapBytes <= 0 || h.Goroutines <= 0 {
		t.Fatalf("health: %+v, %v", h, err)
	}
	if err := m.Destroy(f.ctx, "life", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = m.Get(f.ctx, "life")
	if err != nil || got.Status != sandbox.StatusStopped || got.PID != 0 {
		t.Fatalf("get after destroy: %+v, %v", got, err)
	}
	if store.Alive(st.PID, 0) {
		t.Fatalf("agent %d still alive after destroy", st.PID)
	}
	if _, err := c.Health(f.ctx); !errdefs.IsNotRunning(err) {
		t.Fatalf("health after destroy: %v, want NOT_RUNNING", err)
	}
	if _, err := m.Connect(f.ctx, "life"); !errdefs.IsNotRunning(err) {
		t.Fatalf("connect after destroy: %v, want NotRunningError", err)
	}
	for _, op := range []func() error{
		func() error { _, err := m.Get(f.ctx, "nope"); return err },
		func() error { return m.Destroy(f.ctx, "nope", sandbox.DestroyOptions{}) },
		func() error { _, err := m.Connect(f.ctx, "nope"); return err },
	} {
		if err := op(); !errdefs.IsNotFound(err) {
			t.Fatalf("unknown id: %v, want NotFoundError", err)
		}
	}
}

func testInvalidIDs(t *testing.T, f *fixture) {
	m := f.manager()
	limit := ids.MaxLen
	if f.cfg.IDLimit > 0 {
		limit = f.cfg.IDLimit
	}
	for _, id := range []string{"", "a/b", "..", ".hidden", "-flag", "a b", "x\x00y", "é", strings.Repeat("a", limit+1)} {
		if _, err := m.Create(f.ctx, id, f.cfg.Options); !errdefs.IsInvalid(err) {
			t.Errorf("create %q: %v, want InvalidError", id, err)
		}
		if _, err := m.Get(f.ctx, id); !errdefs.IsInvalid(err) {
			t.Errorf("get %q: %v, want InvalidError", id, err)
		}
	}
	if _, err := m.Create(f.ctx, strings.Repeat("a", limit), f.cfg.Options); err != nil {
		t.Fatalf("a %d-character id must work: %v", limit, err)
	}
}

// uniqueSleep returns the argv of a sleep no other test runs: its argv
// finds it among the host's processes whatever pid namespace it runs in.
func uniqueSleep() []string {
	return []string{"sleep", fmt.Sprintf("%d", 100000+int64(os.Getpid()%1000)*100+sleepSeq.Add(1))}
}

var sleepSeq atomic.Int64

// processes lists the live processes whose argv is argv that the neuron c
// reaches runs: among the host's, or inside the neuron when it has a
// kernel of its own (none once it cannot be reached).
func (f *fixture) processes(c *link.Client, argv []string) []int {
	if !f.cfg.OwnKernel {
		return hostProcesses(argv)
	}
	return neuronProcesses(f.ctx, c, argv)
}

// neuronProcesses scans /proc inside the neuron for live processes whose
// argv is argv.
func neuronProcesses(ctx context.Context, c *link.Client, argv []string) []int {
	const scan = `for p in /proc/[0-9]*; do
  s=$(cat "$p/stat" 2>/dev/null) || continue
  case "$s" in *") Z "*) continue;; esac
  [ "$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"
done; true`
	res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"sh", "-c", scan, "sh", strings.Join(argv, " ") + " "}}})
	if err != nil || res.ExitCode != 0 {
		return nil
	}
	var out []int
	for _, l := range strings.Fields(string(res.Stdout)) {
		if pid, err := strconv.Atoi(l); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// hostProcesses lists the live host processes whose argv is argv.
func hostProcesses(argv []string) []int {
	return Processes(func(a []string) bool { return slices.Equal(a, argv) })
}

// testNoLeaks checks that a full lifecycle leaves no goroutine behind.
func testNoLeaks(t *testing.T, cfg Config) {
	before := runtime.NumGoroutine()
	func() {
		f := &fixture{t: t, cfg: cfg, env: cfg.Env(t), ctx: context.Background()}
		lay, err := layout.New(filepath.Join(ShortTempDir(t), "h"), "")
		if err != nil {
			t.Fatal(err)
		}
		f.env.Layout = lay
		m := f.manager()
		st := f.create(m, "leak")
		c, err := m.Connect(f.ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := c.Health(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Destroy(f.ctx, st.ID, sandbox.DestroyOptions{Wipe: true}); err != nil {
			t.Fatal(err)
		}
		m.Close()
	}()
	var after int
	waittest.Until(5*time.Second, func() bool { after = runtime.NumGoroutine(); return after <= before })
	if after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

var buildOnce sync.Once
var buildPath string
var buildErr error

// BuildAgent builds cmd/cortex-agent (static) once per test binary and
// returns its path; NSYS_CORTEX_TEST_AGENT names a prebuilt one instead
// (for test binaries run where no Go toolchain is, as another user).
func BuildAgent() (string, error) {
	if p := os.Getenv("NSYS_CORTEX_TEST_AGENT"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cxagent")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "cortex-agent")
		// As make builds it: static, stripped.
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", buildPath, "github.com/nsys-cortex/cortex/cmd/cortex-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building cortex-agent: %v\n%s", err, out)
		}
	})
	return buildPath, buildErr
}

// ServeText serves text (and a newline) to every HTTP request on a
// listener of the host's at addr ("127.0.0.1:0": a free loopback port)
// until the test ends, and returns the port: the far side of network
// egress tests.
func ServeText(t testing.TB, addr, text string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, text) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// Processes lists the live processes of this host whose argv match
// accepts (zombies are not alive).
func Processes(match func(argv []string) bool) []int {
	var out []int
	for _, f := range store.FindProcesses(func(argv []string) (struct{}, bool) { return struct{}{}, match(argv) }) {
		out = append(out, f.PID)
	}
	return out
}

// TunnelProcesses lists the live "cortex-agent egress-tunnel" processes
// whose arguments hold arg (a rule, a socket path).
func TunnelProcesses(arg string) []int {
	return Processes(func(argv []string) bool {
		return len(argv) > 1 && argv[1] == "egress-tunnel" && slices.Contains(argv, arg)
	})
}
