package docker_test

// Benchmarks of docker mode (docs/benchmarks.md): the ones every mode
// runs, and copies against `docker cp`. Each runs its docker baseline in
// the same benchmark, interleaved: `docker run --rm IMAGE /bin/true`,
// `docker exec`, `docker cp`. The image is the test image, or
// NSYS_CORTEX_BENCH_IMAGE.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

func benchManager(b *testing.B) sandbox.Manager {
	b.Helper()
	benchSetup(b)
	home, err := os.MkdirTemp("", "cxb")
	if err != nil {
		b.Fatal(err)
	}
	lay, _ := layout.New(home, "")
	m := docker.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	b.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
		os.RemoveAll(home)
	})
	return m
}

// BenchmarkSuite runs the benchmarks every mode runs, over the unix
// transport. A create is set against `docker run --rm IMAGE /bin/true`,
// an exec against `docker exec` in the same container, a pause and a
// resume against `docker pause` and `docker unpause` of it.
func BenchmarkSuite(b *testing.B) {
	benchSetup(b)
	cfg := conformance
	cfg.Bench.CreateBaseline = &sandboxtest.Baseline{Name: "docker-run", Prepare: func(*testing.B, *sandbox.State) func() error {
		return func() error {
			return run("run", "--rm", "--pull", "never", "--network", "none", os.Getenv(docker.EnvImage), "/bin/true")
		}
	}}
	cfg.Bench.ExecBaseline = &sandboxtest.Baseline{Name: "docker-exec", Prepare: func(b *testing.B, st *sandbox.State) func() error {
		name := containerOf(b, st)
		return func() error { return run("exec", name, "/bin/true") }
	}}
	// A pause and a resume against the daemon's own, of the same container.
	cfg.Bench.PauseBaseline = &sandboxtest.Baseline{Name: "docker-pause", Prepare: func(b *testing.B, st *sandbox.State) func() error {
		name := containerOf(b, st)
		return func() error { return run("pause", name) }
	}}
	cfg.Bench.ResumeBaseline = &sandboxtest.Baseline{Name: "docker-unpause", Prepare: func(b *testing.B, st *sandbox.State) func() error {
		name := containerOf(b, st)
		return func() error { return run("unpause", name) }
	}}
	sandboxtest.RunBenchmarks(b, cfg)
}

// benchSetup readies docker mode for a benchmark, or skips it.
func benchSetup(b *testing.B) {
	if err := setup(); err != nil {
		b.Skipf("docker mode cannot run here: %v", err)
	}
	if img := os.Getenv("NSYS_CORTEX_BENCH_IMAGE"); img != "" {
		b.Setenv(docker.EnvImage, img)
	}
	b.Setenv(docker.EnvTransport, "unix")
}

// run runs docker with args.
func run(args ...string) error {
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker %v: %v %s", args, err, out)
	}
	return nil
}

// timeRun runs docker with args and says how long it took.
func timeRun(b *testing.B, args ...string) time.Duration {
	b.Helper()
	start := time.Now()
	if err := run(args...); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkCopy64MiB: a 64 MiB file into the neuron and back out, through
// the agent and with `docker cp`, two ways: between files on the host's
// disk (as `nsys-cortex cp` and `docker cp` are used), and between streams
// in memory (`docker cp -` with a tar stream), which leaves out the host
// disk work both share.
func BenchmarkCopy64MiB(b *testing.B) {
	m := benchManager(b)
	ctx := context.Background()
	st, err := m.Create(ctx, "bench", sandbox.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := m.Connect(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	name := containerOf(b, st)
	data := make([]byte, 64<<20)
	rand.Read(data)
	dir := b.TempDir()
	src := filepath.Join(dir, "in")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	tw.WriteHeader(&tar.Header{Name: "viastream", Mode: 0o644, Size: int64(len(data))})
	tw.Write(data)
	tw.Close()
	var oursFiles, cpFiles, oursStream, cpStream []time.Duration
	b.SetBytes(int64(2 * len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Files.
		start := time.Now()
		timeRun(b, "cp", src, name+":/home/agent/workspace/viacp")
		timeRun(b, "cp", name+":/home/agent/workspace/viacp", filepath.Join(dir, "out"))
		cpFiles = append(cpFiles, time.Since(start))
		// As nsys-cortex cp does it: streamed from the file and into one.
		start = time.Now()
		in, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WriteFileFrom(ctx, "viaagent", in, nil); err != nil {
			b.Fatal(err)
		}
		in.Close()
		out, err := os.Create(filepath.Join(dir, "out2"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.ReadFileTo(ctx, "viaagent", out); err != nil {
			b.Fatal(err)
		}
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
		oursFiles = append(oursFiles, time.Since(start))
		if back, _ := os.ReadFile(filepath.Join(dir, "out2")); !bytes.Equal(back, data) {
			b.Fatal("the file came back different")
		}
		// Streams.
		start = time.Now()
		up := exec.Command("docker", "cp", "-", name+":/home/agent/workspace")
		up.Stdin = bytes.NewReader(tarball.Bytes())
		if out, err := up.CombinedOutput(); err != nil {
			b.Fatalf("docker cp -: %v %s", err, out)
		}
		down := exec.Command("docker", "cp", name+":/home/agent/workspace/viastream", "-")
		var got countWriter
		down.Stdout = &got
		if err := down.Run(); err != nil || got.n < int64(len(data)) {
			b.Fatalf("docker cp to a stream: %v (%d bytes)", err, got.n)
		}
		cpStream = append(cpStream, time.Since(start))
		start = time.Now()
		if err := c.WriteFile(ctx, "viaagent", data, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := c.ReadFile(ctx, "viaagent"); err != nil {
			b.Fatal(err)
		}
		oursStream = append(oursStream, time.Since(start))
	}
	p50 := func(d []time.Duration) time.Duration { return sandboxtest.Percentile(d, 0.5) }
	ms := func(d []time.Duration) float64 { return float64(p50(d).Microseconds()) / 1000 }
	b.ReportMetric(ms(oursFiles), "agent-files-ms")
	b.ReportMetric(ms(cpFiles), "docker-cp-files-ms")
	b.ReportMetric(float64(p50(cpFiles))/float64(p50(oursFiles)), "speedup-files")
	b.ReportMetric(ms(oursStream), "agent-stream-ms")
	b.ReportMetric(ms(cpStream), "docker-cp-stream-ms")
	b.ReportMetric(float64(p50(cpStream))/float64(p50(oursStream)), "speedup-stream")
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func containerOf(b *testing.B, st *sandbox.State) string {
	out, err := exec.Command("docker", "ps", "--format", "{{.Names}}", "--filter", "label=nsys-cortex.id="+st.ID).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		b.Fatalf("the container of %s: %v", st.ID, err)
	}
	return string(bytes.Fields(out)[0])
}

// BenchmarkIdleNeurons creates NSYS_CORTEX_BENCH_NEURONS (default 100)
// idle docker neurons at once and reports what each costs the host: the
// proportional set size of its container's processes (the agent and
// containerd's shim), of docker clients left on the host for it (none: it
// runs detached), and the host's used memory before and after. Then, in
// the same run, it attaches a docker client to every container (`docker
// attach`, the client holding the container's output as the attached
// `docker run` of earlier versions did) and reports what those add.
func BenchmarkIdleNeurons(b *testing.B) {
	count := 100
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_BENCH_NEURONS")); err == nil && v > 0 {
		count = v
	}
	for i := 0; i < b.N; i++ {
		m := benchManager(b)
		ctx := context.Background()
		before := sandboxtest.MemUsed()
		var names []string
		for j := 0; j < count; j++ {
			st, err := m.Create(ctx, fmt.Sprintf("idle%03d", j), sandbox.CreateOptions{})
			if err != nil {
				b.Fatalf("neuron %d: %v", j, err)
			}
			names = append(names, containerOf(b, st))
		}
		time.Sleep(2 * time.Second) // settle: a measurement window (memory at rest), not a wait for a condition
		var container, clients int64
		for _, name := range names {
			out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", name).Output()
			pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
			if err != nil || pid <= 0 {
				b.Fatalf("the agent of %s: %v", name, err)
			}
			container += sandboxtest.MemOf("Pss:", sandboxtest.ProcessTree(pid)...) + sandboxtest.MemOf("Pss:", parentOf(pid)) // the shim
			clients += sandboxtest.MemOf("Pss:", clientsOf(name)...)
		}
		after := sandboxtest.MemUsed()
		// Every one still answers.
		for j := 0; j < count; j += max(1, count/10) {
			c, err := m.Connect(ctx, fmt.Sprintf("idle%03d", j))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Health(ctx); err != nil {
				b.Fatal(err)
			}
		}
		// The same neurons, each with an attached client beside it.
		var attached []*exec.Cmd
		for _, name := range names {
			cmd := exec.Command("docker", "attach", "--no-stdin", "--sig-proxy=false", name)
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			attached = append(attached, cmd)
		}
		time.Sleep(2 * time.Second) // settle, as above
		var pids []int
		for _, cmd := range attached {
			pids = append(pids, cmd.Process.Pid)
		}
		clientPss, clientRss := sandboxtest.MemOf("Pss:", pids...), sandboxtest.MemOf("Rss:", pids...)
		withClients := sandboxtest.MemUsed()
		for _, cmd := range attached {
			cmd.Process.Kill()
			cmd.Wait()
		}
		per := func(v int64) float64 { return float64(v) / float64(count) / (1 << 20) }
		b.ReportMetric(float64(count), "neurons")
		b.ReportMetric(per(container), "container-pss-MiB/neuron")
		b.ReportMetric(per(clients), "host-client-pss-MiB/neuron")
		b.ReportMetric(per(after-before), "host-MiB/neuron")
		b.ReportMetric(per(clientPss), "attached-client-pss-MiB/neuron")
		b.ReportMetric(per(clientRss), "attached-client-rss-MiB/neuron")
		b.ReportMetric(per(withClients-before), "attached-host-MiB/neuron")
		for j := 0; j < count; j++ {
			m.Destroy(ctx, fmt.Sprintf("idle%03d", j), sandbox.DestroyOptions{Wipe: true})
		}
	}
}

// parentOf is pid's parent.
func parentOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(b, ')'); i > 0 {
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			return ppid
		}
	}
	return 0
}
