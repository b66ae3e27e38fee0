package nsbox_test

// Benchmarks of nsbox (docs/benchmarks.md, scripts/bench.sh): the ones
// every mode runs, set against a bare bubblewrap sandbox running
// /bin/true (when bwrap is installed) and a process-mode neuron, and how
// many idle neurons a host holds.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkSuite runs the benchmarks every mode runs. A create is set
// against a bare bwrap running /bin/true, an exec against the same in a
// process-mode neuron.
func BenchmarkSuite(b *testing.B) {
	requireNsbox(b)
	cfg := conformance
	cfg.Bench.CreateBaseline = &sandboxtest.Baseline{Name: "bwrap", Prepare: func(b *testing.B, _ *sandbox.State) func() error {
		if sandboxtest.BwrapTrue() == nil {
			b.Log("no bwrap here: creates are not set against it")
			return nil
		}
		return func() error {
			if out, err := sandboxtest.BwrapTrue().CombinedOutput(); err != nil {
				return fmt.Errorf("%v %s", err, out)
			}
			return nil
		}
	}}
	cfg.Bench.ExecBaseline = &sandboxtest.Baseline{Name: "process", Prepare: processNeuron}
	sandboxtest.RunBenchmarks(b, cfg)
}

// processNeuron starts a process-mode neuron and returns an exec of
// /bin/true in it.
func processNeuron(b *testing.B, _ *sandbox.State) func() error {
	b.Setenv(sandbox.EnvAllowInsecure, "1")
	ctx := context.Background()
	m := benchManager(b, func(e sandbox.Env) sandbox.Manager { return process.New(e) })
	if _, err := m.Create(ctx, "x", sandbox.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	c, err := m.Connect(ctx, "x")
	if err != nil {
		b.Fatal(err)
	}
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	return func() error { _, err := c.Exec(ctx, req); return err }
}

// benchManager returns the manager newManager makes over a home of its own.
func benchManager(b *testing.B, newManager func(sandbox.Env) sandbox.Manager) sandbox.Manager {
	home := sandboxtest.ShortTempDir(b)
	lay, err := layout.New(home, "")
	if err != nil {
		b.Fatal(err)
	}
	m := newManager(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	b.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m
}

// BenchmarkIdleNeurons creates NSYS_CORTEX_BENCH_NEURONS (default 200)
// idle neurons at once, each answering an exec of /bin/true as soon as it
// is made (create → first exec, p50 and p99), and reports the host memory
// each one costs (the proportional set size of its processes, and the
// host's used memory before and after) and the CPU all of them use over
// 65 s of rest. Then a second manager over the same home (as another host
// process, a CLI's) makes a new connection to every one and runs
// /bin/true there: past root's 128 inotify instances the agents wait on
// their channel directory's doorbell.
func BenchmarkIdleNeurons(b *testing.B) {
	count := 200
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_BENCH_NEURONS")); err == nil && v > 0 {
		count = v
	}
	requireNsbox(b)
	lay, err := layout.New(sandboxtest.ShortTempDir(b), "")
	if err != nil {
		b.Fatal(err)
	}
	env := sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }}
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	// Whatever happens, no neuron outlives the benchmark (each would hold
	// one of root's inotify instances).
	b.Cleanup(func() {
		d := nsbox.New(env)
		sandboxtest.DestroyAll(d)
		d.Close()
	})
	for i := 0; i < b.N; i++ {
		m := nsbox.New(env)
		ctx := context.Background()
		before := sandboxtest.MemUsed()
		var pids []int
		var first []time.Duration
		for j := 0; j < count; j++ {
			t0 := time.Now()
			id := fmt.Sprintf("idle%04d", j)
			st, err := m.Create(ctx, id, sandbox.CreateOptions{})
			if err != nil {
				b.Fatalf("neuron %d: %v", j, err)
			}
			c, err := m.Connect(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Exec(ctx, req); err != nil {
				b.Fatalf("neuron %d: %v", j, err)
			}
			first = append(first, time.Since(t0))
			pids = append(pids, st.PID)
		}
		// Settle: the last creates' one-off work done (memory and CPU at
		// rest); a measurement window, not a wait for a condition.
		time.Sleep(10 * time.Second)
		var pss int64
		cpu0 := make([]time.Duration, len(pids)) // each neuron's, before the window
		for j, pid := range pids {
			pss += sandboxtest.MemOf("Pss:", sandboxtest.ProcessTree(pid)...)
			cpu0[j], _ = sandboxtest.TreeCPU(pid)
		}
		after := sandboxtest.MemUsed()
		// The idle window the CPU is measured over: longer than the Go
		// runtime's 60 s wake of an idle process (sysmon), so that every
		// process's wake falls in it whenever the neurons were made (a
		// 5 s window read 0 when the creates took under ~45 s: their
		// wakes all came before or after it).
		const window = 65 * time.Second
		time.Sleep(window)
		var idle time.Duration // all the neurons' CPU in the window
		busy := 0              // neurons that used any
		for j, pid := range pids {
			c, _ := sandboxtest.TreeCPU(pid)
			idle += c - cpu0[j]
			if c > cpu0[j] {
				busy++
			}
		}
		// Another host process's new connection to each.
		other := nsbox.New(env)
		var fresh []time.Duration
		for j := 0; j < count; j++ {
			t0 := time.Now()
			c, err := other.Connect(ctx, fmt.Sprintf("idle%04d", j))
			if err != nil {
				b.Fatalf("neuron %d, a new connection: %v", j, err)
			}
			if _, err := c.Exec(ctx, req); err != nil {
				b.Fatalf("neuron %d, a new connection: %v", j, err)
			}
			fresh = append(fresh, time.Since(t0))
		}
		other.Close()
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(float64(count), "neurons")
		b.ReportMetric(float64(pss)/float64(count)/(1<<20), "pss-MiB/neuron")
		b.ReportMetric(float64(after-before)/float64(count)/(1<<20), "host-MiB/neuron")
		b.ReportMetric(ms(sandboxtest.Percentile(first, 0.5)), "create-to-exec-p50-ms")
		b.ReportMetric(ms(sandboxtest.Percentile(first, 0.99)), "create-to-exec-p99-ms")
		b.ReportMetric(float64(sandboxtest.Percentile(first, 0.99))/float64(sandboxtest.Percentile(first, 0.5)), "create-to-exec-p99/p50")
		// Whether creates slow down as neurons accumulate: the p50 of the
		// first and of the last tenth.
		tenth := max(1, count/10)
		b.ReportMetric(ms(sandboxtest.Percentile(first[:tenth], 0.5)), "first-tenth-p50-ms")
		b.ReportMetric(ms(sandboxtest.Percentile(first[count-tenth:], 0.5)), "last-tenth-p50-ms")
		b.ReportMetric(ms(idle)/window.Seconds(), "all-neurons-cpu-ms-per-s")
		b.ReportMetric(float64(busy), "neurons-busy-in-65s")
		b.ReportMetric(ms(sandboxtest.Percentile(fresh, 0.5)), "new-conn-exec-p50-ms")
		b.ReportMetric(ms(sandboxtest.Percentile(fresh, 0.99)), "new-conn-exec-p99-ms")
		m.Close()
		d := nsbox.New(env)
		sandboxtest.DestroyAll(d)
		d.Close()
	}
}
