package process_test

// Benchmarks of the spine in process mode, over the real Unix socket to a
// real cortex-agent process. scripts/bench.sh runs them; docs/benchmarks.md
// records the figures. Each benchmark measures its baseline in the same run
// (interleaved), because these machines are noisy.

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
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// benchManager returns a manager over a home under dir (the file system the
// neuron's files live on matters for file benchmarks).
func benchManager(b *testing.B, dir string) *lifecycle.Manager {
	b.Helper()
	home, err := os.MkdirTemp(dir, "cxb")
	if err != nil {
		b.Fatal(err)
	}
	lay, _ := layout.New(home, "")
	m := process.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	b.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
		os.RemoveAll(home)
	})
	return m
}

func running(b *testing.B, m *lifecycle.Manager, id string) (*sandbox.State, *link.Client) {
	b.Helper()
	ctx := context.Background()
	st, err := m.Create(ctx, id, sandbox.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := m.Connect(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	return st, c
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkExecTrue: `exec /bin/true` through the agent, interleaved with a
// plain fork+exec of /bin/true from this process.
func BenchmarkExecTrue(b *testing.B) {
	m := benchManager(b, "")
	_, c := running(b, m, "bench")
	ctx := context.Background()
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	for i := 0; i < 20; i++ { // warm up both paths
		c.Exec(ctx, req)
		exec.Command("/bin/true").Run()
	}
	agent := make([]time.Duration, 0, b.N)
	fork := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		res, err := c.Exec(ctx, req)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
		t1 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		agent = append(agent, t1.Sub(t0))
		fork = append(fork, time.Since(t1))
	}
	b.StopTimer()
	pa, pf := percentile(agent, 0.5), percentile(fork, 0.5)
	b.ReportMetric(float64(pa.Microseconds()), "exec-p50-µs")
	b.ReportMetric(float64(percentile(agent, 0.99).Microseconds()), "exec-p99-µs")
	b.ReportMetric(float64(pf.Microseconds()), "forkexec-p50-µs")
	b.ReportMetric(float64(pa)/float64(pf), "ratio-p50")
}

// BenchmarkExecRoundTrip: a request the agent answers without starting a
// process (health): the channel's own cost.
func BenchmarkChannelRoundTrip(b *testing.B) {
	m := benchManager(b, "")
	_, c := running(b, m, "rt")
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Exists(ctx, "."); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
}

// fileDirs are the file systems the file benchmarks run on: tmpfs (memory,
// where the channel is the limit) and the disk under the temp directory.
func fileDirs() map[string]string {
	dirs := map[string]string{"disk": os.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dirs["tmpfs"] = "/dev/shm"
	}
	return dirs
}

// BenchmarkFile64M writes and reads a 64 MiB file through the agent, and
// for comparison writes and reads the same bytes with plain file calls on
// the same file system in the same run.
func BenchmarkFile64M(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	for name, dir := range fileDirs() {
		b.Run(name, func(b *testing.B) {
			m := benchManager(b, dir)
			st, c := running(b, m, "files")
			ctx := context.Background()
			local := filepath.Join(st.OverlayPath, "local.bin")
			var tw, tr, lw, lr time.Duration
			b.SetBytes(int64(len(data)) * 2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := c.WriteFile(ctx, "big.bin", data, nil); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				n, err := c.ReadFileTo(ctx, "big.bin", discard{})
				if err != nil || n != int64(len(data)) {
					b.Fatal(err, n)
				}
				t2 := time.Now()
				// The same on the same file system, without Cortex.
				if err := os.WriteFile(local, data, 0o644); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				f, _ := os.Open(local)
				buf := make([]byte, protocol.ChunkSize)
				for {
					if _, err := f.Read(buf); err != nil {
						break
					}
				}
				f.Close()
				t4 := time.Now()
				tw, tr, lw, lr = tw+t1.Sub(t0), tr+t2.Sub(t1), lw+t3.Sub(t2), lr+t4.Sub(t3)
			}
			b.StopTimer()
			gbs := func(d time.Duration) float64 { return float64(len(data)) * float64(b.N) / d.Seconds() / 1e9 }
			b.ReportMetric(gbs(tw), "write-GB/s")
			b.ReportMetric(gbs(tr), "read-GB/s")
			b.ReportMetric(gbs(lw), "local-write-GB/s")
			b.ReportMetric(gbs(lr), "local-read-GB/s")
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkCreateToFirstExec: from Create to the first exec answered.
func BenchmarkCreateToFirstExec(b *testing.B) {
	m := benchManager(b, "")
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
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
		if _, err := c.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true})
		b.StartTimer()
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkIdleAgent reports the resident memory of an idle agent and the
// CPU time it uses while nothing happens for two seconds.
func BenchmarkIdleAgent(b *testing.B) {
	m := benchManager(b, "")
	var rss, cpu []float64
	for i := 0; i < b.N; i++ {
		st, c := running(b, m, "idle"+strconv.Itoa(i))
		if _, err := c.Health(context.Background()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // let start-up settle
		before := cpuTicks(b, st.PID)
		time.Sleep(2 * time.Second)
		cpu = append(cpu, float64(cpuTicks(b, st.PID)-before))
		rss = append(rss, float64(vmRSS(b, st.PID))/(1<<20))
	}
	sort.Float64s(rss)
	b.ReportMetric(rss[len(rss)/2], "rss-MiB")
	b.ReportMetric(cpu[len(cpu)/2], "cpu-ticks/2s")
}

func vmRSS(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// cpuTicks returns utime+stime of pid and its threads, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
