package docker_test

// Benchmarks of docker mode (docs/benchmarks.md). Each runs its docker
// baseline in the same benchmark, interleaved: `docker run --rm IMAGE
// /bin/true`, `docker exec`, `docker cp`. The image is the test image, or
// NSYS_CORTEX_BENCH_IMAGE.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/docker"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

func benchManager(b *testing.B) sandbox.Manager {
	b.Helper()
	if err := setup(); err != nil {
		b.Skipf("docker mode cannot run here: %v", err)
	}
	if img := os.Getenv("NSYS_CORTEX_BENCH_IMAGE"); img != "" {
		b.Setenv(docker.EnvImage, img)
	}
	b.Setenv(docker.EnvTransport, "unix")
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

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func run(b *testing.B, name string, args ...string) time.Duration {
	b.Helper()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v %s", name, args, err, out)
	}
	return time.Since(start)
}

// BenchmarkCreateToFirstExec: from Create to the first exec answered,
// against `docker run --rm IMAGE /bin/true`.
func BenchmarkCreateToFirstExec(b *testing.B) {
	m := benchManager(b)
	img := os.Getenv(docker.EnvImage)
	ctx := context.Background()
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	var ours, bare []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bare = append(bare, run(b, "docker", "run", "--rm", "--pull", "never", "--network", "none", img, "/bin/true"))
		start := time.Now()
		if _, err := m.Create(ctx, "bench", sandbox.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		c, err := m.Connect(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		b.StopTimer()
		m.Destroy(ctx, "bench", sandbox.DestroyOptions{})
		b.StartTimer()
	}
	b.ReportMetric(ms(p50(ours)), "p50-ms")
	b.ReportMetric(ms(p50(bare)), "docker-run-p50-ms")
	b.ReportMetric(float64(p50(ours))/float64(p50(bare)), "ratio-p50")
}

// BenchmarkExecTrue: /bin/true through the agent against `docker exec` in
// the same container.
func BenchmarkExecTrue(b *testing.B) {
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
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	var ours, theirs []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		theirs = append(theirs, run(b, "docker", "exec", name, "/bin/true"))
		start := time.Now()
		if _, err := c.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
	}
	b.ReportMetric(ms(p50(ours)), "agent-p50-ms")
	b.ReportMetric(ms(p50(theirs)), "docker-exec-p50-ms")
	b.ReportMetric(float64(p50(theirs))/float64(p50(ours)), "speedup-p50")
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
		run(b, "docker", "cp", src, name+":/home/agent/workspace/viacp")
		run(b, "docker", "cp", name+":/home/agent/workspace/viacp", filepath.Join(dir, "out"))
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
	b.ReportMetric(ms(p50(oursFiles)), "agent-files-ms")
	b.ReportMetric(ms(p50(cpFiles)), "docker-cp-files-ms")
	b.ReportMetric(float64(p50(cpFiles))/float64(p50(oursFiles)), "speedup-files")
	b.ReportMetric(ms(p50(oursStream)), "agent-stream-ms")
	b.ReportMetric(ms(p50(cpStream)), "docker-cp-stream-ms")
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
