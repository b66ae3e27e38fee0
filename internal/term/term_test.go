package term_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/term"
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
	os.Setenv(sandbox.EnvAllowInsecure, "1")
	os.Exit(m.Run())
}

func neuron(t testing.TB) *link.Client {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	m := process.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	ctx := context.Background()
	if _, err := m.Create(ctx, "term", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Destroy(ctx, "term", sandbox.DestroyOptions{Wipe: true}); m.Close() })
	c, err := m.Connect(ctx, "term")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// session is the channel's terminal, failing on a gap (lost output).
type session struct {
	c    *link.Client
	pid  int
	gaps int
}

func (s *session) Follow(ctx context.Context, off int64, out func([]byte) error) (*protocol.ProcInfo, error) {
	res, err := s.c.PtyFollow(ctx, s.pid, off, true, func(stream string, _ int64, p []byte) error {
		if strings.HasPrefix(stream, protocol.StreamGap) {
			s.gaps++
			return nil
		}
		return out(p)
	})
	if err != nil {
		return nil, err
	}
	return res.Info, nil
}
func (s *session) Write(ctx context.Context, p []byte) error  { return s.c.PtyWrite(ctx, s.pid, p) }
func (s *session) Resize(ctx context.Context, c, r int) error { return s.c.PtyResize(ctx, s.pid, c, r) }

type counter struct{ n, other int64 }

func (c *counter) Write(p []byte) (int, error) {
	// bytes.Count, not a loop over the bytes: the check must cost the
	// consumer about what the raw read's io.Discard costs.
	c.other += int64(len(p) - bytes.Count(p, []byte{'a'}))
	c.n += int64(len(p))
	return len(p), nil
}

// 100 MiB from a fast producer arrives complete through an attachment.
func TestFastProducerArrivesComplete(t *testing.T) {
	c := neuron(t)
	ctx := context.Background()
	const size = 100 << 20
	info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Hold: true, Command: protocol.Command{Shell: fmt.Sprintf("stty raw -echo; head -c %d /dev/zero | tr '\\0' a", size)}})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{c: c, pid: info.PID}
	var out counter
	// The attachment comes late (as under load): the output it missed was
	// held for it, not lost.
	waittest.For(t, 30*time.Second, "output before the attachment", func() bool {
		list, err := c.ProcList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list, func(p protocol.ProcInfo) bool { return p.PID == info.PID && p.StdoutEnd > 0 })
	})
	start := time.Now()
	res, err := term.Attach(ctx, s, term.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if res.Exit == nil || res.Exit.ExitCode != 0 || s.gaps != 0 || out.n != size || out.other != 0 {
		t.Fatalf("exit %+v, %d gaps, %d bytes (%d not 'a')", res.Exit, s.gaps, out.n, out.other)
	}
	t.Logf("100 MiB in %s (%.0f MB/s)", took, size/took.Seconds()/1e6)
}

// A terminal whose process writes a final burst and exits at once
// delivers all of it to the attachment, every time: the agent reads its
// terminal to the end (EIO) before it reports the exit.
func TestLastOutputArrives(t *testing.T) {
	c := neuron(t)
	ctx := context.Background()
	const size = 64 << 10
	for i := 0; i < 20; i++ {
		script := "stty raw -echo; head -c %d /dev/zero | tr '\\0' a; printf END"
		info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Hold: true, Command: protocol.Command{Shell: fmt.Sprintf(script, size)}})
		if err != nil {
			t.Fatal(err)
		}
		s := &session{c: c, pid: info.PID}
		var out strings.Builder
		res, err := term.Attach(ctx, s, term.Options{Out: &syncWriter{b: &out}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Exit == nil || out.Len() != size+3 || !strings.HasSuffix(out.String(), "END") {
			t.Fatalf("run %d: exit %+v, %d bytes of %d, %d gaps", i, res.Exit, out.Len(), size+3, s.gaps)
		}
	}
}

// The detach keys end an attachment; the terminal runs on.
func TestDetach(t *testing.T) {
	c := neuron(t)
	ctx := context.Background()
	info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"cat"}}})
	if err != nil {
		t.Fatal(err)
	}
	in, w := ioPipe()
	out := &syncWriter{b: &strings.Builder{}}
	done := make(chan *term.Result, 1)
	go func() {
		res, err := term.Attach(ctx, &session{c: c, pid: info.PID}, term.Options{In: in, Out: out})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	w.Write([]byte("hello\x10x\n")) // a lone Ctrl-P is a key
	waittest.For(t, 30*time.Second, "the keys before the detach keys to reach the terminal", func() bool { return strings.Contains(out.String(), "hello") })
	w.Write([]byte{0x10, 0x11})
	select {
	case res := <-done:
		if res == nil || !res.Detached {
			t.Fatalf("%+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no detach")
	}
	list, _ := c.ProcList(ctx)
	if len(list) != 1 || !list[0].Running {
		t.Fatalf("after detach: %+v", list)
	}
}

// BenchmarkKeystrokeEcho: a key typed through an attachment until its
// echo comes back (cat on a terminal echoes it).
func BenchmarkKeystrokeEcho(b *testing.B) {
	c := neuron(b)
	ctx := context.Background()
	info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"cat"}}})
	if err != nil {
		b.Fatal(err)
	}
	in, w := ioPipe()
	echoes := make(chan struct{}, 1)
	go term.Attach(ctx, &session{c: c, pid: info.PID}, term.Options{In: in, Out: notifyWriter(echoes)})
	w.Write([]byte{'k'}) // one echo before the clock starts: the attachment is up
	<-echoes
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		w.Write([]byte{'k'})
		<-echoes
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "echo-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "echo-p99-ms")
}

// BenchmarkAttachThroughput: PTY output through an attachment, against
// the same program on a PTY read directly by this process (what the
// kernel's terminal layer allows on this machine), in the same run.
func BenchmarkAttachThroughput(b *testing.B) {
	c := neuron(b)
	ctx := context.Background()
	const size = 64 << 20
	script := fmt.Sprintf("stty raw -echo; head -c %d /dev/zero | tr '\\0' a", size)
	var through, direct time.Duration
	b.SetBytes(size)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Hold: true, Command: protocol.Command{Shell: script}})
		if err != nil {
			b.Fatal(err)
		}
		var out counter
		if _, err := term.Attach(ctx, &session{c: c, pid: info.PID}, term.Options{Out: &out}); err != nil || out.n != size {
			b.Fatal(out.n, err)
		}
		through += time.Since(start)
		start = time.Now()
		if n := rawPty(b, script); n != size {
			b.Fatal(n)
		}
		direct += time.Since(start)
	}
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/through.Seconds(), "attach-MB/s")
	b.ReportMetric(mb/direct.Seconds(), "raw-pty-MB/s")
	b.ReportMetric(through.Seconds()/direct.Seconds(), "ratio")
}
