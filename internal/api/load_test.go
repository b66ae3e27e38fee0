package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settle waits until f() is at most limit, or gives up after 30 s; it
// returns the last value.
func settle(f func() int, limit int) int {
	var v int
	waittest.Until(30*time.Second, func() bool { v = f(); return v <= limit })
	return v
}

// connGoroutines counts the goroutines of HTTP connections, both ends (the
// client and the server are in this process).
func connGoroutines() int {
	return waittest.Goroutines("net/http.(*conn).serve") + waittest.Goroutines("net/http.(*persistConn).readLoop") +
		waittest.Goroutines("net/http.(*persistConn).writeLoop")
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestLoad: 50 concurrent clients run exec against 10 neurons for 20 s
// (NSYS_CORTEX_LOAD_SECONDS; 3 s with -short): no request may fail, and
// no goroutine or descriptor may be left over afterwards.
func TestLoad(t *testing.T) {
	seconds := 20
	if testing.Short() {
		seconds = 3
	}
	if v := os.Getenv("NSYS_CORTEX_LOAD_SECONDS"); v != "" {
		seconds, _ = strconv.Atoi(v)
	}
	const clients, neurons = 50, 10
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	handles := make([]*cortex.NeuronClient, neurons)
	for i := range handles {
		handles[i] = d.create(t, fmt.Sprintf("load%d", i))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients, DialContext: (&net.Dialer{}).DialContext}
	c, _ := cortex.New(d.ts.URL, cortex.WithHTTPClient(&http.Client{Transport: tr}))
	req := &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"true"}}}
	// Warm up every neuron's channel, then take the baseline.
	for i := range handles {
		if _, err := c.Neuron(handles[i].ID()).Exec(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	tr.CloseIdleConnections()
	d.ts.CloseClientConnections()
	waittest.For(t, 30*time.Second, "the closed connections' goroutines to end", func() bool { return connGoroutines() == 0 })
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat      []time.Duration
		failures atomic.Int64
		firstErr atomic.Value
	)
	stop := time.Now().Add(time.Duration(seconds) * time.Second)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(stop); i++ {
				n := c.Neuron(handles[(w+i)%neurons].ID())
				start := time.Now()
				res, err := n.Exec(ctx, req)
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", res.ExitCode)
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d requests failed; the first: %v", n, int64(len(lat))+n, firstErr.Load())
	}
	t.Logf("%d clients x %d neurons, %d s: %d execs (%.0f/s), p50 %s, p99 %s", clients, neurons, seconds, len(lat),
		float64(len(lat))/float64(seconds), percentile(lat, 0.5), percentile(lat, 0.99))
	tr.CloseIdleConnections()
	d.ts.CloseClientConnections()
	if got := settle(runtime.NumGoroutine, goroutines+2); got > goroutines+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutines, got, buf[:runtime.Stack(buf, true)])
	}
	if got := settle(func() int { return openFDs(t) }, fds+2); got > fds+2 {
		t.Errorf("descriptors: %d before, %d after", fds, got)
	}
}

// Shutdown: in-flight requests finish, streams end, Serve returns.
func TestGracefulShutdown(t *testing.T) {
	d := newDaemon(t, api.Options{})
	n := d.create(t, "gs")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{Set: d.set, Token: "gs-token"})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	// The grace period is far beyond the wait for Serve below: a shutdown
	// that waited for it (for the stream, which never ends by itself)
	// fails the test.
	go func() { served <- srv.Serve(ctx, ln, time.Hour) }()
	c, _ := cortex.New("http://"+ln.Addr().String(), cortex.WithToken("gs-token"))
	h := c.Neuron(n.ID())
	bg := context.Background()
	p, err := h.Start(bg, &cortex.StartRequest{Command: cortex.Command{Argv: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := h.Output(bg, p.PID, cortex.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	go func() {
		res, err := h.Exec(bg, &cortex.ExecRequest{Command: cortex.Command{Shell: "sleep 2; echo done"}})
		if err == nil && res.Stdout != "done\n" {
			err = fmt.Errorf("%+v", res)
		}
		execDone <- err
	}()
	// The server answers three requests: the stream, the exec and this one.
	waittest.For(t, 30*time.Second, "the exec to be in flight", func() bool {
		return inFlight(t, "http://"+ln.Addr().String(), "gs-token") >= 3
	})
	cancel()
	if err := waittest.Recv(t, 2*time.Minute, "the request in flight to finish", execDone); err != nil {
		t.Fatalf("the request in flight: %v", err)
	}
	for {
		if _, err := stream.Next(); err != nil {
			break // the stream ended
		}
	}
	if err := waittest.Recv(t, 2*time.Minute, "Serve to return", served); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(bg); err == nil {
		t.Fatal("still answering after shutdown")
	}
	// The neuron kept running, and its process too.
	if st, err := d.c.Get(bg, n.ID()); err != nil || st.Status != string(sandbox.StatusRunning) {
		t.Fatalf("%+v %v", st, err)
	}
}

// inFlight reads how many requests the server at url answers now (this
// one included) from its metrics.
func inFlight(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^cortex_api_requests_in_flight (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no in-flight gauge in the metrics (%d): %s", resp.StatusCode, b)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// BenchmarkHTTPExecTrue: /bin/true through the API on a keep-alive
// connection, against the same through the channel directly.
func BenchmarkHTTPExecTrue(b *testing.B) {
	d := newDaemon(b, api.Options{})
	n := d.create(b, "bench")
	ctx := context.Background()
	_, direct, err := connectDirect(d, "bench")
	if err != nil {
		b.Fatal(err)
	}
	req := &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"true"}}}
	lreq := &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}}
	var viaHTTP, viaChannel []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		viaHTTP = append(viaHTTP, time.Since(start))
		start = time.Now()
		if _, err := direct.Exec(ctx, lreq); err != nil {
			b.Fatal(err)
		}
		viaChannel = append(viaChannel, time.Since(start))
	}
	b.ReportMetric(float64(percentile(viaHTTP, 0.5).Microseconds())/1000, "http-p50-ms")
	b.ReportMetric(float64(percentile(viaHTTP, 0.99).Microseconds())/1000, "http-p99-ms")
	b.ReportMetric(float64(percentile(viaChannel, 0.5).Microseconds())/1000, "channel-p50-ms")
}

func connectDirect(d *daemon, id string) (sandbox.Manager, *link.Client, error) {
	m, st, err := d.set.FindExact(context.Background(), id)
	if err != nil {
		return nil, nil, err
	}
	c, err := m.Connect(context.Background(), st.ID)
	return m, c, err
}

// BenchmarkHTTPFile64MiB: a 64 MiB upload and download through the API,
// with the neuron's data on disk and on tmpfs (/dev/shm), against the same
// through the channel directly.
func BenchmarkHTTPFile64MiB(b *testing.B) {
	for _, where := range []string{"disk", "tmpfs"} {
		b.Run(where, func(b *testing.B) {
			overlays := ""
			if where == "tmpfs" {
				dir, err := os.MkdirTemp("/dev/shm", "cxbench")
				if err != nil {
					b.Skip("no /dev/shm")
				}
				b.Cleanup(func() { os.RemoveAll(dir) })
				overlays = dir
			}
			benchFile(b, newDaemonAt(b, api.Options{}, overlays))
		})
	}
}

func benchFile(b *testing.B, d *daemon) {
	n := d.create(b, "bench")
	ctx := context.Background()
	_, direct, err := connectDirect(d, "bench")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var up, down, cup, cdown time.Duration
	b.SetBytes(2 * int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.WriteFile(ctx, "big", bytesReader(data), &cortex.WriteOptions{Size: int64(len(data))}); err != nil {
			b.Fatal(err)
		}
		up += time.Since(start)
		start = time.Now()
		got, err := n.Download(ctx, "big", discardCounter{})
		if err != nil || got != int64(len(data)) {
			b.Fatal(got, err)
		}
		down += time.Since(start)
		start = time.Now()
		if _, err := direct.WriteFileFrom(ctx, "big2", bytesReader(data), nil); err != nil {
			b.Fatal(err)
		}
		cup += time.Since(start)
		start = time.Now()
		if _, err := direct.ReadFileTo(ctx, "big2", discardCounter{}); err != nil {
			b.Fatal(err)
		}
		cdown += time.Since(start)
	}
	gb := float64(len(data)) * float64(b.N) / 1e9
	b.ReportMetric(gb/up.Seconds(), "upload-GB/s")
	b.ReportMetric(gb/down.Seconds(), "download-GB/s")
	b.ReportMetric(gb/cup.Seconds(), "channel-write-GB/s")
	b.ReportMetric(gb/cdown.Seconds(), "channel-read-GB/s")
}

type discardCounter struct{}

func (discardCounter) Write(p []byte) (int, error) { return len(p), nil }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
