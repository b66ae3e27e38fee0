package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Bench is what RunBenchmarks needs of a mode beyond Config: the
// baselines its figures are set against, and how its idle neuron is
// watched.
type Bench struct {
	// CreateBaseline starts the nearest thing to a neuron without Cortex
	// (a bare bwrap, a `docker run`), timed beside every create.
	CreateBaseline *Baseline
	// ExecBaseline runs /bin/true without the channel (a fork+exec, a
	// `docker exec`), timed beside every exec.
	ExecBaseline *Baseline
	// PauseBaseline and ResumeBaseline pause and resume the neuron without
	// Cortex (`docker pause`, `docker unpause` of its container), timed
	// beside every pause and resume.
	PauseBaseline, ResumeBaseline *Baseline
	// IdleSettle is how long a new neuron is left before it counts as idle
	// (default 200 ms: its start-up's work is done); IdleWindow how long
	// its idle use is measured (default 2 s).
	IdleSettle, IdleWindow time.Duration
}

// Baseline is the same work done without Cortex, timed in the same
// benchmark, interleaved with Cortex's: these machines are noisy, so
// figures are compared within a run (the ratio), not across runs.
type Baseline struct {
	// Name prefixes its metrics: "bwrap" reports bwrap-p50-ms.
	Name string
	// Prepare readies it beside neuron st (nil before a create) and
	// returns one run of it, or nil where it cannot run (after logging
	// why).
	Prepare func(b *testing.B, st *sandbox.State) func() error
}

// RunBenchmarks runs the benchmarks every mode runs, as sub-benchmarks of
// b (restic's backend suite is the model); docs/benchmarks.md records
// their figures:
//
//	CreateToFirstExec  Create to the first exec answered (p50, p99)
//	CreateDestroy      Create to an agent that answered, then Destroy
//	ExecTrue           an exec of /bin/true through the channel
//	ChannelRoundTrip   a request the agent answers without a process
//	File64M            64 MiB into a neuron and back out, on disk and on
//	                   tmpfs, against plain file calls on the same one
//	Idle               the host CPU and memory of an idle neuron
//	Snapshot           a running neuron's snapshot and its channel back
//	Restore            a restore to the first answer, of a running
//	                   neuron and of a stopped one
//	PauseResume        a pause and a resume through the Go API, and an
//	                   exec on a paused neuron (resume + exec)
//
// Snapshot and Restore run where the manager is a sandbox.Snapshotter,
// PauseResume where it can pause.
// A mode's own benchmarks (against its own tools) stay beside its tests.
func RunBenchmarks(b *testing.B, cfg Config) {
	if cfg.New == nil || cfg.Env == nil {
		b.Fatal("sandboxtest: Config needs New and Env")
	}
	for _, bm := range []struct {
		name string
		run  func(*testing.B, Config)
	}{
		{"CreateToFirstExec", benchCreateToFirstExec},
		{"CreateDestroy", benchCreateDestroy},
		{"ExecTrue", benchExecTrue},
		{"ChannelRoundTrip", benchChannelRoundTrip},
		{"File64M", benchFile64M},
		{"Idle", benchIdle},
		{"Snapshot", benchSnapshot},
		{"Restore", benchRestore},
		{"PauseResume", benchPauseResume},
	} {
		b.Run(bm.name, func(b *testing.B) { bm.run(b, cfg) })
	}
}

// bench is one benchmark's home directory and the manager over it.
type bench struct {
	b    *testing.B
	cfg  Config
	home string
	lay  layout.Layout
	m    sandbox.Manager
	ctx  context.Context
}

// newBench makes a home under dir ("" for the temp directory: the file
// system a neuron's files live on matters to file benchmarks).
func newBench(b *testing.B, cfg Config, dir string) *bench {
	b.Helper()
	home, err := os.MkdirTemp(dir, "cxb")
	if err != nil {
		b.Fatal(err)
	}
	lay, err := layout.New(filepath.Join(home, "h"), "")
	if err != nil {
		b.Fatal(err)
	}
	env := cfg.Env(b)
	env.Layout = lay
	f := &bench{b: b, cfg: cfg, home: home, lay: lay, m: cfg.New(env), ctx: context.Background()}
	b.Cleanup(func() {
		DestroyAll(f.m)
		f.m.Close()
		os.RemoveAll(home)
	})
	return f
}

// neuron creates neuron id and connects to it.
func (f *bench) neuron(id string) (*sandbox.State, *link.Client) {
	f.b.Helper()
	st, err := f.m.Create(f.ctx, id, f.cfg.Options)
	if err != nil {
		f.b.Fatalf("create %s: %v", id, err)
	}
	c, err := f.m.Connect(f.ctx, id)
	if err != nil {
		f.b.Fatalf("connect %s: %v", id, err)
	}
	return st, c
}

var execTrue = &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}

func (f *bench) execTrue(c *link.Client) {
	f.b.Helper()
	if res, err := c.Exec(f.ctx, execTrue); err != nil || res.ExitCode != 0 {
		f.b.Fatalf("exec /bin/true: %v %+v", err, res)
	}
}

// firstAnswer waits for neuron c's agent to answer: a channel that drops
// across a snapshot is dialled again.
func (f *bench) firstAnswer(c *link.Client) {
	f.b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Health(f.ctx)
		if err == nil {
			return
		}
		if !errdefs.IsNotRunning(err) || time.Now().After(deadline) {
			f.b.Fatalf("the agent's answer: %v", err)
		}
	}
}

// timed is a baseline made ready and the times of its runs.
type timed struct {
	base  *Baseline
	run   func() error
	times []time.Duration
}

func (f *bench) baseline(base *Baseline, st *sandbox.State) *timed {
	if base == nil {
		return nil
	}
	run := base.Prepare(f.b, st)
	if run == nil {
		return nil
	}
	return &timed{base: base, run: run}
}

// time runs the baseline once (none: nothing) and records how long it took.
func (t *timed) time(b *testing.B) {
	if t == nil {
		return
	}
	start := time.Now()
	if err := t.run(); err != nil {
		b.Fatalf("%s: %v", t.base.Name, err)
	}
	t.times = append(t.times, time.Since(start))
}

// reportLatency reports the p50 and p99 of ours as prefix-p50-unit, and
// beside them the baseline's p50 and the ratio of the two p50s.
func reportLatency(b *testing.B, prefix string, unit time.Duration, ours []time.Duration, base *timed) {
	suffix := map[time.Duration]string{time.Millisecond: "ms", time.Microsecond: "µs"}[unit]
	in := func(d time.Duration) float64 { return float64(d) / float64(unit) }
	b.ReportMetric(in(Percentile(ours, 0.5)), prefix+"p50-"+suffix)
	b.ReportMetric(in(Percentile(ours, 0.99)), prefix+"p99-"+suffix)
	if base == nil || len(base.times) == 0 {
		return
	}
	theirs := Percentile(base.times, 0.5)
	b.ReportMetric(in(theirs), base.base.Name+"-p50-"+suffix)
	b.ReportMetric(float64(Percentile(ours, 0.5))/float64(theirs), "ratio-p50")
}

// Percentile returns the p-th percentile (0 to 1) of d.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func benchCreateToFirstExec(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	// The first create builds and probes what every later one shares.
	f.neuron("warm")
	f.m.Destroy(f.ctx, "warm", sandbox.DestroyOptions{Wipe: true})
	base := f.baseline(cfg.Bench.CreateBaseline, nil)
	ours := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "c" + strconv.Itoa(i)
		start := time.Now()
		_, c := f.neuron(id)
		f.execTrue(c)
		ours = append(ours, time.Since(start))
		b.StopTimer()
		f.m.Destroy(f.ctx, id, sandbox.DestroyOptions{Wipe: true})
		base.time(b)
		b.StartTimer()
	}
	b.StopTimer()
	reportLatency(b, "", time.Millisecond, ours, base)
}

func benchCreateDestroy(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "b" + strconv.Itoa(i%4)
		if _, err := f.m.Create(f.ctx, id, cfg.Options); err != nil {
			b.Fatal(err)
		}
		if err := f.m.Destroy(f.ctx, id, sandbox.DestroyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchExecTrue(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	st, c := f.neuron("exec")
	base := f.baseline(cfg.Bench.ExecBaseline, st)
	for i := 0; i < 20; i++ { // warm up both paths
		f.execTrue(c)
		base.time(b)
	}
	if base != nil {
		base.times = nil
	}
	ours := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		f.execTrue(c)
		ours = append(ours, time.Since(start))
		b.StopTimer()
		base.time(b)
		b.StartTimer()
	}
	b.StopTimer()
	reportLatency(b, "exec-", time.Microsecond, ours, base)
}

func benchChannelRoundTrip(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	_, c := f.neuron("rt")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := c.Exists(f.ctx, "."); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(float64(Percentile(lat, 0.5).Microseconds()), "p50-µs")
}

// fileDirs are the file systems the file benchmark runs on: tmpfs
// (memory, where the channel is the limit) and the temp directory's disk.
func fileDirs() map[string]string {
	dirs := map[string]string{"disk": os.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dirs["tmpfs"] = "/dev/shm"
	}
	return dirs
}

func benchFile64M(b *testing.B, cfg Config) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	for name, dir := range fileDirs() {
		b.Run(name, func(b *testing.B) {
			f := newBench(b, cfg, dir)
			_, c := f.neuron("files")
			local := filepath.Join(f.home, "local.bin")
			var write, read, localWrite, localRead, ddWrite, newWrite, ddNew time.Duration
			// Each iteration's upload against its dd: into a new file, and
			// over the file the iteration before left.
			var newRatios, ratios []float64
			b.SetBytes(int64(len(data)) * 2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each write starts with nothing dirty in the page cache:
				// the writeback of the step before (ours or dd's) would
				// otherwise land on whichever step comes next.
				b.StopTimer()
				if err := c.Remove(f.ctx, "big.bin", false); err != nil && i > 0 {
					b.Fatal(err)
				}
				syscall.Sync()
				t := time.Now()
				if err := c.WriteFile(f.ctx, "big.bin", data, nil); err != nil {
					b.Fatal(err)
				}
				nw := time.Since(t)
				syscall.Sync()
				b.StartTimer()
				t0 := time.Now()
				if err := c.WriteFile(f.ctx, "big.bin", data, nil); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if n, err := c.ReadFileTo(f.ctx, "big.bin", discard{}); err != nil || n != int64(len(data)) {
					b.Fatal(err, n)
				}
				t2 := time.Now()
				b.StopTimer()
				// The same bytes on the same file system, without Cortex.
				syscall.Sync()
				lw, lr := localCopy(b, local, data)
				os.Remove(local)
				syscall.Sync()
				dn := ddCopy(b, local, len(data))
				syscall.Sync()
				dw := ddCopy(b, local, len(data))
				b.StartTimer()
				newRatios = append(newRatios, dn.Seconds()/nw.Seconds())
				ratios = append(ratios, dw.Seconds()/t1.Sub(t0).Seconds())
				write, read, newWrite = write+t1.Sub(t0), read+t2.Sub(t1), newWrite+nw
				localWrite, localRead, ddWrite, ddNew = localWrite+lw, localRead+lr, ddWrite+dw, ddNew+dn
			}
			b.StopTimer()
			gbs := func(d time.Duration) float64 { return float64(len(data)) * float64(b.N) / d.Seconds() / 1e9 }
			b.ReportMetric(gbs(write), "write-GB/s")
			b.ReportMetric(gbs(read), "read-GB/s")
			b.ReportMetric(gbs(localWrite), "local-write-GB/s")
			b.ReportMetric(gbs(localRead), "local-read-GB/s")
			b.ReportMetric(gbs(ddWrite), "dd-write-GB/s")
			b.ReportMetric(gbs(write)/gbs(ddWrite), "write/dd")
			b.ReportMetric(median(ratios), "write/dd-p50")
			b.ReportMetric(gbs(newWrite), "new-write-GB/s")
			b.ReportMetric(gbs(ddNew), "dd-new-GB/s")
			b.ReportMetric(median(newRatios), "new-write/dd-p50")
		})
	}
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// localCopy writes data to path with os.WriteFile and reads it back in
// chunks of the channel's size, and says how long each took.
func localCopy(b *testing.B, path string, data []byte) (write, read time.Duration) {
	start := time.Now()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	mid := time.Now()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, protocol.ChunkSize)
	for {
		if _, err := f.Read(buf); err != nil {
			break
		}
	}
	return mid.Sub(start), time.Since(mid)
}

// ddCopy writes size bytes to path with dd (1 MiB blocks, no sync: as
// the channel's writes, into the page cache) and says how long it took,
// its process start included.
func ddCopy(b *testing.B, path string, size int) time.Duration {
	start := time.Now()
	out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=1M", fmt.Sprintf("count=%d", size>>20), "status=none").CombinedOutput()
	if err != nil {
		b.Fatalf("dd: %v\n%s", err, out)
	}
	return time.Since(start)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// benchIdle reports the host CPU (ms a second) and resident memory of an
// idle neuron's host processes: State.PID and its descendants.
func benchIdle(b *testing.B, cfg Config) {
	settle, window := cfg.Bench.IdleSettle, cfg.Bench.IdleWindow
	if settle == 0 {
		settle = 200 * time.Millisecond
	}
	if window == 0 {
		window = 2 * time.Second
	}
	f := newBench(b, cfg, "")
	var cpu time.Duration
	var rss int64
	for i := 0; i < b.N; i++ {
		st, c := f.neuron("idle" + strconv.Itoa(i))
		if _, err := c.Health(f.ctx); err != nil {
			b.Fatal(err)
		}
		if _, ok := TreeCPU(st.PID); !ok {
			b.Skipf("the neuron's host process %d cannot be read here", st.PID)
		}
		time.Sleep(settle) // a measurement window, not a wait for a condition
		before, _ := TreeCPU(st.PID)
		time.Sleep(window)
		after, _ := TreeCPU(st.PID)
		cpu += after - before
		rss += TreeRSS(st.PID)
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/window.Seconds()/float64(b.N), "ms-cpu/s")
	b.ReportMetric(float64(rss)/(1<<20)/float64(b.N), "rss-MiB")
}

// snapshotter returns m as a sandbox.Snapshotter, or skips the benchmark.
func (f *bench) snapshotter() sandbox.Snapshotter {
	s, ok := f.m.(sandbox.Snapshotter)
	if !ok {
		f.b.Skipf("%s mode takes no snapshots of its own", f.m.Mode())
	}
	return s
}

func benchSnapshot(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	s := f.snapshotter()
	_, c := f.neuron("snap")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := "s" + strconv.Itoa(i)
		if _, err := s.Snapshot(f.ctx, "snap", name); err != nil {
			b.Fatal(err)
		}
		f.firstAnswer(c)
		b.StopTimer()
		os.RemoveAll(filepath.Join(f.lay.SnapshotsDir("snap"), name))
		b.StartTimer()
	}
}

// benchRestore reports, beside the time, the CPU the neuron's host
// processes spent until the first answer (a VMM's every thread): the
// guest's work, which a busy host's stolen time does not inflate as it
// does the wall clock.
func benchRestore(b *testing.B, cfg Config) {
	for _, stopped := range []bool{false, true} {
		b.Run(map[bool]string{false: "running", true: "stopped"}[stopped], func(b *testing.B) {
			f := newBench(b, cfg, "")
			s := f.snapshotter()
			f.neuron("rest")
			if _, err := s.Snapshot(f.ctx, "rest", "s"); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if stopped {
					b.StopTimer()
					if err := f.m.Destroy(f.ctx, "rest", sandbox.DestroyOptions{}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				st, err := s.Restore(f.ctx, "rest", "s")
				if err != nil {
					b.Fatal(err)
				}
				c, err := f.m.Connect(f.ctx, "rest")
				if err != nil {
					b.Fatal(err)
				}
				f.firstAnswer(c)
				b.StopTimer()
				used, _ := TreeCPU(st.PID)
				cpu += used
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "ms-vmm-cpu/op")
		})
	}
}

// ProcessTree returns pid and its live descendants.
func ProcessTree(pid int) []int { return store.Descendants(pid) }

// TreeCPU returns the CPU time that pid and its descendants have used so
// far, every thread's (the first field of /proc/<pid>/task/<tid>/schedstat,
// in ns); false when pid cannot be read.
func TreeCPU(pid int) (time.Duration, bool) {
	var sum time.Duration
	ok := false
	for _, p := range ProcessTree(pid) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p))
		for _, t := range tasks {
			raw, err := os.ReadFile(t)
			if err != nil {
				continue // a thread that just ended
			}
			var ns int64
			if _, err := fmt.Sscan(string(raw), &ns); err == nil {
				sum += time.Duration(ns)
				ok = true
			}
		}
	}
	return sum, ok
}

// TreeRSS returns the resident memory of pid and its descendants, in bytes.
func TreeRSS(pid int) int64 {
	var sum int64
	for _, p := range ProcessTree(pid) {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				sum += kb << 10
			}
		}
	}
	return sum
}

// MemUsed is the host's used memory, MemTotal - MemAvailable, in bytes.
func MemUsed() int64 {
	return memField("/proc/meminfo", "MemTotal:") - memField("/proc/meminfo", "MemAvailable:")
}

// MemOf sums a field of /proc/<pid>/smaps_rollup ("Pss:", "Rss:") over
// pids, in bytes.
func MemOf(field string, pids ...int) int64 {
	var sum int64
	for _, p := range pids {
		sum += memField(fmt.Sprintf("/proc/%d/smaps_rollup", p), field)
	}
	return sum
}

// memField reads a "Name: N kB" line of a /proc file, in bytes.
func memField(path, field string) int64 {
	raw, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

// BwrapTrue is /bin/true in a bare bubblewrap sandbox with every namespace
// unshared (a peer's floor); nil when bwrap is not installed.
func BwrapTrue() *exec.Cmd {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return nil
	}
	args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"}
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		if t, err := os.Readlink("/" + d); err == nil {
			args = append(args, "--symlink", t, "/"+d)
		}
	}
	return exec.Command(bw, append(args, "/bin/true")...)
}
