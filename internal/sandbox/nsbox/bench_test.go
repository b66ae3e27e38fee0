package nsbox_test

// Benchmarks of nsbox (docs/benchmarks.md, scripts/bench.sh). Baselines run
// in the same benchmark, interleaved: a bare bubblewrap sandbox running
// /bin/true (when bwrap is installed), and process mode.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

func benchEnv(b *testing.B) sandbox.Env {
	b.Helper()
	home, err := os.MkdirTemp("", "cxb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(home) })
	lay, _ := layout.New(home, "")
	return sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }}
}

func benchManager(b *testing.B, m *lifecycle.Manager) *lifecycle.Manager {
	b.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bwrapTrue runs /bin/true in a bare bubblewrap sandbox with every namespace
// unshared; nil when bwrap is not installed.
func bwrapTrue() *exec.Cmd {
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

// BenchmarkCreateToFirstExec: from Create to the first exec answered,
// interleaved with a bare bwrap running /bin/true.
func BenchmarkCreateToFirstExec(b *testing.B) {
	m := benchManager(b, nsbox.New(benchEnv(b)))
	ctx := context.Background()
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	// The first create builds the shared base and probes the machine.
	if _, err := m.Create(ctx, "warm", sandbox.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var nsb, bw []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "c" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := m.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		c, err := m.Connect(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if res, err := c.Exec(ctx, req); err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
		nsb = append(nsb, time.Since(t0))
		b.StopTimer()
		m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true})
		if cmd := bwrapTrue(); cmd != nil {
			t1 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("bwrap: %v %s", err, out)
			}
			bw = append(bw, time.Since(t1))
		}
		b.StartTimer()
	}
	b.ReportMetric(ms(pct(nsb, 0.5)), "p50-ms")
	b.ReportMetric(ms(pct(nsb, 0.99)), "p99-ms")
	if len(bw) > 0 {
		b.ReportMetric(ms(pct(bw, 0.5)), "bwrap-p50-ms")
		b.ReportMetric(float64(pct(nsb, 0.5))/float64(pct(bw, 0.5)), "ratio-p50")
	}
}

// BenchmarkExecTrue: `exec /bin/true` in an nsbox neuron, interleaved with
// the same in a process-mode neuron.
func BenchmarkExecTrue(b *testing.B) {
	t := os.Getenv("NSYS_CORTEX_ALLOW_INSECURE_DEV")
	os.Setenv("NSYS_CORTEX_ALLOW_INSECURE_DEV", "1")
	defer os.Setenv("NSYS_CORTEX_ALLOW_INSECURE_DEV", t)
	ctx := context.Background()
	connect := func(m *lifecycle.Manager) *link.Client {
		if _, err := m.Create(ctx, "x", sandbox.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		c, err := m.Connect(ctx, "x")
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	nc := connect(benchManager(b, nsbox.New(benchEnv(b))))
	pc := connect(benchManager(b, process.New(benchEnv(b))))
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	for i := 0; i < 20; i++ {
		nc.Exec(ctx, req)
		pc.Exec(ctx, req)
	}
	var ns, pr []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := nc.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := pc.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		ns, pr = append(ns, t1.Sub(t0)), append(pr, time.Since(t1))
	}
	b.ReportMetric(float64(pct(ns, 0.5).Microseconds()), "nsbox-p50-µs")
	b.ReportMetric(float64(pct(pr, 0.5).Microseconds()), "process-p50-µs")
	b.ReportMetric(float64(pct(ns, 0.5))/float64(pct(pr, 0.5)), "ratio-p50")
}

// BenchmarkIdleNeurons creates NSYS_CORTEX_BENCH_NEURONS (default 200)
// idle neurons at once and reports the host memory each one costs: the
// proportional set size of its processes, and the host's used memory
// before and after.
func BenchmarkIdleNeurons(b *testing.B) {
	count := 200
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_BENCH_NEURONS")); err == nil && v > 0 {
		count = v
	}
	for i := 0; i < b.N; i++ {
		m := benchManager(b, nsbox.New(benchEnv(b)))
		ctx := context.Background()
		before := memUsed()
		t0 := time.Now()
		var pids []int
		for j := 0; j < count; j++ {
			st, err := m.Create(ctx, fmt.Sprintf("idle%03d", j), sandbox.CreateOptions{})
			if err != nil {
				b.Fatalf("neuron %d: %v", j, err)
			}
			pids = append(pids, st.PID)
		}
		created := time.Since(t0)
		time.Sleep(2 * time.Second) // settle
		var pss int64
		for _, pid := range pids {
			pss += treePss(pid)
		}
		after := memUsed()
		// Every one still answers.
		for j := 0; j < count; j += count / 10 {
			c, err := m.Connect(ctx, fmt.Sprintf("idle%03d", j))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Health(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(count), "neurons")
		b.ReportMetric(float64(pss)/float64(count)/(1<<20), "pss-MiB/neuron")
		b.ReportMetric(float64(after-before)/float64(count)/(1<<20), "host-MiB/neuron")
		b.ReportMetric(ms(created)/float64(count), "create-ms/neuron")
		m.Close()
		for j := 0; j < count; j++ {
			m.Destroy(ctx, fmt.Sprintf("idle%03d", j), sandbox.DestroyOptions{Wipe: true})
		}
	}
}

// memUsed is MemTotal - MemAvailable, in bytes.
func memUsed() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	var total, avail int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return total - avail
}

// treePss sums the proportional set size of pid and its descendants.
func treePss(pid int) int64 {
	var sum int64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				sum += v << 10
			}
		}
	}
	kids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, k := range kids {
		b, _ := os.ReadFile(k)
		for _, c := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(c)); err == nil {
				sum += treePss(n)
			}
		}
	}
	return sum
}
