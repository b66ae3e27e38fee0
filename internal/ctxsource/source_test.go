package ctxsource_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxfstest"
	"github.com/nsys-cortex/cortex/internal/ctxsource"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/model"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func TestMain(m *testing.M) {
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

func canMount() string {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "needs /dev/fuse: " + err.Error()
	}
	if os.Geteuid() != 0 {
		return "needs root: the test acts as another uid (setpriv) and mounts with allow_other"
	}
	return ""
}

type env struct {
	ctx   context.Context
	set   *sandbox.Set
	lay   layout.Layout
	model *model.Model
	src   *ctxsource.Source
	tree  *ctxfs.Tree
	dir   string
}

// neuronUID is the host uid n1's agent is taken to run as (a uid no one
// uses; setpriv needs no passwd entry).
const neuronUID = 64124

// newEnv creates process-mode neurons n1 and n2 and mounts /ctx over them.
// n1's subtree belongs to the test user's uid (process neurons run as the
// operator, so the uid mapping is the model's, as nsbox's mapped uids are).
func newEnv(t testing.TB) *env {
	if why := canMount(); why != "" {
		t.Skip(why)
	}
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	root := sandboxtest.ShortTempDir(t)
	os.Chmod(root, 0o755)
	lay, err := layout.New(filepath.Join(root, "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	set := sandbox.NewSet(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return bin, nil }}, process.Backend())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	m, _ := set.Manager(process.Mode)
	for _, id := range []string{"n1", "n2"} {
		if _, err := m.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		all, _ := set.List(context.Background())
		for _, st := range all {
			m.Destroy(context.Background(), st.ID, sandbox.DestroyOptions{Wipe: true})
		}
		set.Close()
	})
	uid := neuronUID
	mod := model.New(set, model.WithInterval(200*time.Millisecond), model.WithUID(func(st *sandbox.State) int {
		if st.ID == "n1" {
			return uid
		}
		return set.AgentUID(st)
	}))
	if _, err := mod.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { mod.Run(mctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	src := ctxsource.New(set, lay, mod, api.NeuronOf)
	tree := ctxfs.NewTree(ctxfs.Options{Source: src, Channel: src, Controller: src, Meter: src, Records: src,
		Auditor: launch.NewAudit(src.AuditLog()), Token: "t0k"})
	dir := filepath.Join(root, "ctx")
	os.Mkdir(dir, 0o755)
	srv, err := ctxfs.Mount(dir, tree, ctxfs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctxfstest.Unmount(t, srv) })
	return &env{ctx: ctx, set: set, lay: lay, model: mod, src: src, tree: tree, dir: dir}
}

func (e *env) path(p string) string { return filepath.Join(e.dir, p) }

func sh(t *testing.T, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", script).CombinedOutput()
	return string(out), err
}

func (e *env) client(t *testing.T, id string) interface {
	ProcStart(context.Context, *protocol.ProcStartArgs) (*protocol.ProcInfo, error)
	PtySpawn(context.Context, *protocol.PtySpawnArgs) (*protocol.ProcInfo, error)
} {
	m, _ := e.set.Manager(process.Mode)
	c, err := m.Connect(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls f until it is true or 30 s pass.
func eventually(t *testing.T, what string, f func() (bool, string)) {
	t.Helper()
	var last string
	if !waittest.Until(30*time.Second, func() bool { ok, l := f(); last = l; return ok }) {
		t.Fatalf("%s: never happened; last: %q", what, last)
	}
}

func TestMountedNeurons(t *testing.T) {
	e := newEnv(t)

	// List neurons, read status and the API's JSON.
	if out, err := sh(t, "ls "+e.path("neurons")); err != nil || out != "n1\nn2\n" {
		t.Fatalf("ls neurons: %q, %v", out, err)
	}
	out, err := sh(t, "cat "+e.path("neurons/n1/status"))
	if err != nil || !strings.HasPrefix(out, "running mode=process pid=") || strings.Count(out, "\n") != 1 {
		t.Fatalf("status: %q, %v", out, err)
	}
	if out, err := sh(t, "cat "+e.path("neurons/n1/state.json")); err != nil || !strings.Contains(out, `"status": "running"`) {
		t.Errorf("state.json: %q, %v", out, err)
	}
	if out, err := sh(t, "cat "+e.path("neurons/n1/health.json")); err != nil || !strings.Contains(out, `"version"`) {
		t.Errorf("health.json: %q, %v", out, err)
	}

	// Follow a process's stdout with tail -f.
	p, err := e.client(t, "n1").ProcStart(e.ctx, &protocol.ProcStartArgs{Command: protocol.Command{
		Argv: []string{"sh", "-c", "i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); sleep 0.2; done"}}})
	if err != nil {
		t.Fatal(err)
	}
	stdout := e.path("neurons/n1/processes/" + strconv.Itoa(p.PID) + "/stdout")
	tctx, tcancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer tcancel()
	tail := exec.CommandContext(tctx, "tail", "-n", "+1", "-f", stdout)
	pipe, _ := tail.StdoutPipe()
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tail.Process.Kill(); tail.Wait() }()
	sc := bufio.NewScanner(pipe)
	for want := 0; want < 6; want++ { // lines written after tail started: it followed
		if !sc.Scan() {
			t.Fatalf("tail -f ended: %v", sc.Err())
		}
		if sc.Text() != "line "+strconv.Itoa(want) {
			t.Fatalf("tail -f: %q; want line %d", sc.Text(), want)
		}
	}
	if out, _ := sh(t, "cat "+filepath.Dir(stdout)+"/argv"); !strings.HasPrefix(out, "sh -c '") {
		t.Errorf("argv: %q", out)
	}
	if out, _ := sh(t, "echo signal KILL > "+filepath.Dir(stdout)+"/ctl"); out != "" {
		t.Errorf("signal: %q", out)
	}
	eventually(t, "the process's exit after signal KILL", func() (bool, string) {
		out, _ := sh(t, "cat "+filepath.Dir(stdout)+"/exit")
		return out == "signal KILL\n", out
	})

	// Type into a terminal; see it in replay.
	term, err := e.client(t, "n1").PtySpawn(e.ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"sh"}}, Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	tdir := e.path("neurons/n1/terminals/" + term.ID)
	if term.ID == "" {
		tdir = e.path("neurons/n1/terminals/" + strconv.Itoa(term.PID))
	}
	if out, err := sh(t, "printf 'echo typed-$((6*7))\\n' > "+tdir+"/input"); err != nil {
		t.Fatalf("input: %q, %v", out, err)
	}
	eventually(t, "the typed command's output in replay", func() (bool, string) {
		out, _ := sh(t, "cat "+tdir+"/replay")
		return strings.Contains(out, "typed-42"), out
	})
	if out, err := sh(t, "echo resize 100x30 > "+tdir+"/ctl"); err != nil {
		t.Fatalf("resize: %q, %v", out, err)
	}
	eventually(t, "the new size", func() (bool, string) {
		out, _ := sh(t, "cat "+tdir+"/size")
		return out == "100x30\n", out
	})

	// A bad verb: EINVAL, the reason in ctl and in the audit log.
	if err := os.WriteFile(e.path("neurons/n2/ctl"), []byte("explode\n"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad verb: %v; want EINVAL", err)
	}
	if out, _ := sh(t, "cat "+e.path("neurons/n2/ctl")); !strings.Contains(out, "explode") {
		t.Errorf("ctl after a bad verb: %q", out)
	}
	if out, _ := sh(t, "cat "+e.path("audit/log")); !strings.Contains(out, `"event":"ctx.ctl"`) || !strings.Contains(out, "explode") {
		t.Errorf("audit log: %q", out)
	}
	// Read-only files: EACCES.
	if err := os.WriteFile(e.path("neurons/n2/status"), []byte("running"), 0); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write status: %v; want EACCES", err)
	}

	// A neuron's uid sees its own subtree and nothing of another's.
	as := func(script string) (string, error) {
		return sh(t, "setpriv --reuid "+strconv.Itoa(neuronUID)+" --regid "+strconv.Itoa(neuronUID)+" --clear-groups -- bash -c '"+script+"'")
	}
	if out, err := as("cat " + e.path("neurons/n1/status")); err != nil || !strings.HasPrefix(out, "running") {
		t.Errorf("n1's uid reads n1: %q, %v", out, err)
	}
	if out, err := as("cat " + e.path("neurons/n2/status")); err == nil {
		t.Errorf("n1's uid reads n2: %q", out)
	}
	if out, err := as("ls " + e.path("neurons")); err != nil || out != "n1\n" {
		t.Errorf("n1's uid lists: %q, %v", out, err)
	}

	// Snapshot and stop a neuron via ctl.
	if out, err := sh(t, "echo snapshot first > "+e.path("neurons/n2/ctl")); err != nil {
		t.Fatalf("snapshot: %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(e.lay.SnapshotsDir("n2"), "first")); err != nil {
		t.Errorf("the snapshot: %v", err)
	}
	if out, err := sh(t, "echo stop > "+e.path("neurons/n2/ctl")); err != nil {
		t.Fatalf("stop: %q, %v", out, err)
	}
	if out, _ := sh(t, "cat "+e.path("neurons/n2/status")); !strings.HasPrefix(out, "stopped") {
		t.Errorf("status after stop: %q", out)
	}
	if _, st, err := e.set.FindExact(e.ctx, "n2"); err != nil || st.Status != sandbox.StatusStopped {
		t.Errorf("n2 after stop: %+v, %v", st, err)
	}
}

func TestMountedRecords(t *testing.T) {
	e := newEnv(t)
	_, st, err := e.set.FindExact(e.ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	rdir := launch.ReceiptsDir(e.lay, st)
	os.MkdirAll(rdir, 0o700)
	os.WriteFile(filepath.Join(rdir, "r1.json"), []byte(`{"id":"r1"}`), 0o600)
	os.MkdirAll(e.lay.SessionsDir(), 0o700)
	os.WriteFile(filepath.Join(e.lay.SessionsDir(), "s1.jsonl"), []byte("{\"a\":1}\n{\"b\":2}\n"), 0o600)
	os.MkdirAll(filepath.Join(e.lay.Home, "agents", "coder"), 0o700)
	os.WriteFile(filepath.Join(e.lay.Home, "agents", "coder", "SOUL.md"), []byte("calm\n"), 0o600)
	// The records are read again once their cache (RecordsTTL) is stale.
	for p, want := range map[string]string{
		"neurons/n1/receipts/r1.json":  `{"id":"r1"}`,
		"sessions/s1/transcript.jsonl": "{\"a\":1}\n{\"b\":2}\n",
		"agents/coder/SOUL.md":         "calm\n",
	} {
		var out string
		var err error
		if !waittest.Until(30*time.Second, func() bool { out, err = sh(t, "cat "+e.path(p)); return err == nil && out == want }) {
			t.Errorf("%s: %q, %v; want %q", p, out, err, want)
		}
	}
	if out, _ := sh(t, "cat "+e.path("sessions/s1/meta.json")); !strings.Contains(out, `"entries": 2`) {
		t.Errorf("meta.json: %q", out)
	}
}

// BenchmarkStatusReadReal is BenchmarkStatusRead of internal/ctxfs over
// the real source: process-mode neurons, the model, the adapter.
func BenchmarkStatusReadReal(b *testing.B) {
	e := newEnv(b)
	status := e.path("neurons/n1/status")
	buf := make([]byte, 4096)
	read := func() {
		fd, err := syscall.Open(status, syscall.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := syscall.Read(fd, buf); err != nil || n == 0 {
			b.Fatal(n, err)
		}
		syscall.Close(fd)
	}
	for range 1000 {
		read()
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		read()
		d = append(d, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// A paused neuron through /ctx: ctl pauses and resumes it; status shows
// it paused and its deadline; metrics.json reads; health.json and
// processes/ never resume it, even when the model has not seen the pause
// yet (the reads are quiet).
func TestMountedPausedNeuron(t *testing.T) {
	e := newEnv(t)
	m, _ := e.set.Manager(process.Mode)
	status := func(id string) string {
		_, st, err := e.set.FindExact(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return string(st.Status)
	}
	if out, err := sh(t, "cat "+e.path("neurons/n2/metrics.json")); err != nil || !strings.Contains(out, `"cpuSeconds"`) ||
		!strings.Contains(out, `"status": "running"`) {
		t.Fatalf("metrics.json: %q, %v", out, err)
	}
	if _, err := m.(sandbox.Deadliner).SetTimeout(e.ctx, "n2", time.Hour, sandbox.OnTimeoutPause); err != nil {
		t.Fatal(err)
	}
	if out, err := sh(t, "echo pause > "+e.path("neurons/n2/ctl")+" && cat "+e.path("neurons/n2/status")); err != nil ||
		!strings.HasPrefix(out, "paused ") || !strings.Contains(out, " deadline=") || !strings.Contains(out, " on-timeout=pause") {
		t.Fatalf("pause through ctl: %q, %v", out, err)
	}
	if out, err := sh(t, "echo pause > "+e.path("neurons/n2/ctl")+" && cat "+e.path("neurons/n2/ctl")); err != nil || !strings.Contains(out, `ok "pause"`) {
		t.Errorf("a second pause: %q, %v", out, err)
	}
	for p, want := range map[string]string{"health.json": `{"paused":true,"running":false}`, "metrics.json": `"status": "paused"`} {
		if out, err := sh(t, "cat "+e.path("neurons/n2/"+p)); err != nil || !strings.Contains(out, want) {
			t.Errorf("%s of a paused neuron: %q, %v", p, out, err)
		}
	}
	if out, err := sh(t, "ls "+e.path("neurons/n2/processes")); err != nil || out != "" {
		t.Errorf("processes of a paused neuron: %q, %v", out, err)
	}
	if got := status("n2"); got != "paused" {
		t.Fatalf("after the reads: %s", got)
	}
	if out, err := sh(t, "echo resume > "+e.path("neurons/n2/ctl")+" && cat "+e.path("neurons/n2/status")); err != nil || !strings.HasPrefix(out, "running ") {
		t.Fatalf("resume through ctl: %q, %v", out, err)
	}

	// Paused behind the model's back: the channel reads answer that it is
	// paused, and leave it so.
	if _, err := m.(sandbox.Pauser).Pause(e.ctx, "n1", sandbox.PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Health(e.ctx, "n1"); !errdefs.IsNotRunning(err) || !strings.Contains(err.Error(), "paused") {
		t.Errorf("health of a neuron paused behind the model: %v", err)
	}
	if _, err := e.src.Processes(e.ctx, "n1"); !errdefs.IsNotRunning(err) {
		t.Errorf("processes of a neuron paused behind the model: %v", err)
	}
	if got := status("n1"); got != "paused" {
		t.Fatalf("the quiet reads resumed it: %s", got)
	}
	// A write resumes it (kill SIG signals its processes: none here).
	if out, err := sh(t, "echo 'kill TERM' > "+e.path("neurons/n1/ctl")); err != nil {
		t.Fatalf("kill through ctl: %q, %v", out, err)
	}
	if got := status("n1"); got != "running" {
		t.Errorf("after a ctl write: %s", got)
	}
}

type facts []map[string]any

func (f *facts) Record(event string, m map[string]any) error { *f = append(*f, m); return nil }

// Every verb of a neuron's ctl is asked about as an action the gate
// knows (an unknown one is refused whoever asks).
func TestGateKnowsEveryNeuronVerb(t *testing.T) {
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	var log facts
	g := ctxsource.NewGate(lay, &log)
	for _, verb := range []string{"stop", "restart", "snapshot", "kill", "pause", "resume"} {
		c := &ctxfs.Command{Neuron: "n1", Target: ctxfs.TargetNeuron, Verb: verb}
		if err := g.Authorize(context.Background(), true, c); err != nil {
			t.Errorf("the operator's %s: %v", verb, err)
			continue
		}
		if a, _ := log[len(log)-1]["action"].(string); !gate.Known(gate.Action(a)) {
			t.Errorf("%s is asked about as %q", verb, a)
		}
	}
}
