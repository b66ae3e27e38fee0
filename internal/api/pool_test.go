package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/pool"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// pooled is a server over nsbox with a warm pool of size neurons.
type pooled struct {
	*daemon
	m    sandbox.Manager
	pool *pool.Pool
}

func newPooled(t testing.TB, size int) *pooled {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	env := sandbox.Env{Layout: lay, Exclusive: true, AgentBinary: func() (string, error) { return agentBin, nil }}
	if c := nsbox.SelfCheck(context.Background(), env); !c.OK {
		if os.Getenv("NSYS_CORTEX_REQUIRE_NSBOX") == "1" {
			t.Fatalf("nsbox cannot run here: %s", c.Summary)
		}
		t.Skipf("nsbox cannot run here: %s", c.Summary)
	}
	set := sandbox.NewSet(env, nsbox.Backend())
	pools, err := pool.Start(set, []pool.Spec{{Mode: nsbox.Mode, Size: size}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{Set: set, Version: "test", Pools: pools})
	ts := httptest.NewServer(srv.Handler())
	c, err := cortex.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := set.Manager(nsbox.Mode)
	p := &pooled{daemon: &daemon{set: set, srv: srv, ts: ts, c: c, lay: lay}, m: m, pool: pools[nsbox.Mode]}
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		pools.Close()
		sandboxtest.DestroyAll(m)
		set.Close()
	})
	waittest.For(t, 2*time.Minute, "the pool to fill", func() bool { return p.pool.Stats().Ready == size })
	return p
}

// A create over the API claims a warm neuron and says so; warm neurons
// are not reachable by their names on any route (they are not valid ids);
// /metrics reports the pool.
func TestPoolOverHTTP(t *testing.T) {
	d := newPooled(t, 2)
	ctx := context.Background()
	cr, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "hot", Mode: nsbox.Mode, Env: []string{"FOO=bar"}, Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cr.ModeReason, pool.Claimed) || cr.Neuron.ID != "hot" || cr.Neuron.Labels["team"] != "a" {
		t.Fatalf("created %+v (%q)", cr.Neuron, cr.ModeReason)
	}
	res, err := d.c.Neuron("hot").Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Shell: `echo "$(hostname) $FOO"`}})
	if err != nil || string(res.Stdout) != "hot bar\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	entries, _ := os.ReadDir(d.lay.Overlays)
	var warm []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".warm-") && e.IsDir() {
			warm = append(warm, e.Name())
		}
	}
	if len(warm) == 0 {
		t.Fatal("no warm neuron to try to reach")
	}
	for _, name := range warm {
		for _, try := range []struct{ method, path, body string }{
			{"GET", "/v1/neurons/" + name, ""},
			{"POST", "/v1/neurons/" + name + "/exec", `{"command":{"argv":["id"]}}`},
			{"DELETE", "/v1/neurons/" + name, ""},
			{"GET", "/v1/neurons/" + name + "/files?path=/etc/hostname", ""},
			{"POST", "/v1/neurons/" + name + "/fork", `{"ids":["stolen"]}`},
		} {
			if code, body := raw(t, d.daemon, try.method, try.path, try.body); code < 400 || code == 500 {
				t.Fatalf("%s %s: %d %s", try.method, try.path, code, body)
			}
		}
	}
	list, err := d.c.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "hot" {
		t.Fatalf("list: %+v %v", list, err)
	}
	req, _ := http.NewRequest("GET", d.ts.URL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`cortex_pool_claims_total{mode="nsbox"} 1`, `cortex_pool_size{mode="nsbox"} 2`, `cortex_pool_misses_total{mode="nsbox"} 0`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %s:\n%s", want, b)
		}
	}
}

// BenchmarkPoolCreate: a create that claims a warm neuron, over HTTP and
// through the Go API (the pool's Create), against a cold nsbox create
// through the Go API, interleaved in one run. Each create is destroyed
// (untimed) before the next, and each claim waits (untimed) for the pool
// to be full and idle: a claim's own latency, not that of a refill's
// boots sharing the CPUs (TestConcurrentCreates in internal/sandbox/pool
// is the burst).
func BenchmarkPoolCreate(b *testing.B) {
	d := newPooled(b, 2)
	ctx := context.Background()
	var viaHTTP, viaAPI, cold []time.Duration
	ready := func() {
		waittest.For(b, time.Minute, "a full pool", func() bool { s := d.pool.Stats(); return s.Ready == s.Size })
	}
	wipe := func(id string) {
		if err := d.m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ready()
		id := fmt.Sprintf("h%d", i)
		b.StartTimer()
		start := time.Now()
		cr, err := d.c.Create(ctx, &cortex.CreateRequest{ID: id, Mode: nsbox.Mode})
		viaHTTP = append(viaHTTP, time.Since(start))
		b.StopTimer()
		if err != nil || !strings.Contains(cr.ModeReason, pool.Claimed) {
			b.Fatalf("%v %+v", err, cr)
		}
		wipe(id)
		ready()
		id = fmt.Sprintf("a%d", i)
		b.StartTimer()
		start = time.Now()
		_, why, err := d.pool.Create(ctx, id, sandbox.CreateOptions{})
		viaAPI = append(viaAPI, time.Since(start))
		b.StopTimer()
		if err != nil || why != pool.Claimed {
			b.Fatalf("%v %s", err, why)
		}
		wipe(id)
		id = fmt.Sprintf("c%d", i)
		b.StartTimer()
		start = time.Now()
		_, err = d.m.Create(ctx, id, sandbox.CreateOptions{})
		cold = append(cold, time.Since(start))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		wipe(id)
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(percentile(viaAPI, 0.5)), "claim-p50-ms")
	b.ReportMetric(ms(percentile(viaAPI, 0.99)), "claim-p99-ms")
	b.ReportMetric(ms(percentile(viaHTTP, 0.5)), "http-claim-p50-ms")
	b.ReportMetric(ms(percentile(viaHTTP, 0.99)), "http-claim-p99-ms")
	b.ReportMetric(ms(percentile(cold, 0.5)), "cold-p50-ms")
	b.ReportMetric(ms(percentile(cold, 0.99)), "cold-p99-ms")
	b.ReportMetric(float64(percentile(cold, 0.5))/float64(percentile(viaAPI, 0.5)), "cold/claim-p50")
}
