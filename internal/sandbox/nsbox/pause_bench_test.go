package nsbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkPausedNeurons creates NSYS_CORTEX_BENCH_NEURONS (default 1000)
// neurons, pauses them all, and reports the host memory each paused one
// costs and the CPU the host spends while they sit paused (the whole
// machine's busy time over 5 s, against 5 s before they were made: both
// include whatever else runs). Then it resumes every one and runs an exec
// in each. Run it once: -bench PausedNeurons -benchtime 1x.
func BenchmarkPausedNeurons(b *testing.B) {
	requireNsbox(b)
	count := 1000
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_BENCH_NEURONS")); err == nil && v > 0 {
		count = v
	}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		m := benchManager(b, func(e sandbox.Env) sandbox.Manager { return nsbox.New(e) })
		pm := m.(sandbox.Pauser)
		baseCPU := busyOver(5 * time.Second)
		before := sandboxtest.MemUsed()
		t0 := time.Now()
		var pids []int
		for j := range count {
			st, err := m.Create(ctx, fmt.Sprintf("p%04d", j), sandbox.CreateOptions{})
			if err != nil {
				b.Fatalf("neuron %d: %v", j, err)
			}
			pids = append(pids, st.PID)
		}
		created := time.Since(t0)
		t0 = time.Now()
		for j := range count {
			if _, err := pm.Pause(ctx, fmt.Sprintf("p%04d", j), sandbox.PauseOptions{}); err != nil {
				b.Fatalf("pause %d: %v", j, err)
			}
		}
		pausing := time.Since(t0)
		after := sandboxtest.MemUsed()
		cpu0 := neuronsCPU(pids)
		pausedCPU := busyOver(5 * time.Second)
		neuronCPU := neuronsCPU(pids) - cpu0
		t0 = time.Now()
		req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
		for j := range count {
			c, err := m.Connect(ctx, fmt.Sprintf("p%04d", j))
			if err != nil {
				b.Fatalf("connect %d: %v", j, err)
			}
			if _, err := c.Exec(ctx, req); err != nil {
				b.Fatalf("exec %d: %v", j, err)
			}
		}
		resumed := time.Since(t0)
		b.ReportMetric(float64(count), "neurons")
		b.ReportMetric(float64(after-before)/float64(count)/(1<<20), "host-MiB/neuron")
		b.ReportMetric(float64(created.Microseconds())/1000/float64(count), "create-ms/neuron")
		b.ReportMetric(float64(pausing.Microseconds())/1000/float64(count), "pause-ms/neuron")
		b.ReportMetric(float64(resumed.Microseconds())/1000/float64(count), "resume+exec-ms/neuron")
		b.ReportMetric(baseCPU*100, "host-busy-%-before")
		b.ReportMetric(pausedCPU*100, "host-busy-%-paused")
		b.ReportMetric(float64(neuronCPU.Microseconds())/1000, "neurons-cpu-ms-in-5s-paused")
		sandboxDestroyAll(ctx, m, count)
	}
}

// sandboxDestroyAll wipes the benchmark's neurons, closing its manager
// first (its channels to a thousand neurons).
func sandboxDestroyAll(ctx context.Context, m sandbox.Manager, count int) {
	m.Close()
	for j := range count {
		m.Destroy(ctx, fmt.Sprintf("p%04d", j), sandbox.DestroyOptions{Wipe: true})
	}
}

// neuronsCPU sums the CPU time every process of the neurons has used.
func neuronsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		if d, ok := sandboxtest.TreeCPU(pid); ok {
			sum += d
		}
	}
	return sum
}

// busyOver returns the share of the machine's CPU time that was busy
// (not idle or iowait) over d.
func busyOver(d time.Duration) float64 {
	busy0, total0 := cpuTimes()
	<-time.After(d)
	busy1, total1 := cpuTimes()
	if total1 == total0 {
		return 0
	}
	return float64(busy1-busy0) / float64(total1-total0)
}

// cpuTimes reads /proc/stat's cpu line: busy and total jiffies.
func cpuTimes() (busy, total int64) {
	raw, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(raw), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}
