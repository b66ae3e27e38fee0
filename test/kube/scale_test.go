package kube_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube/kubesim"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// BenchmarkScale is issue 24's scale run: NSYS_CORTEX_KUBE_SCALE neurons
// (default 1000) created through the real API server, each timed from
// its create to its first command's answer (8 at a time, as a busy
// host's API would); the namespace listed; the memory a second host's
// pod informer takes per neuron; then every neuron wiped. kubesim runs
// the agents in this process, so only the informer's share of the heap
// is the host's. Run it once: -bench Scale -benchtime 1x.
func BenchmarkScale(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_KUBE_SCALE")); err == nil && v > 0 {
		n = v
	}
	rc := cluster.Start(b, cluster.Options{Sandboxes: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	ctx := context.Background()
	for i := range b.N {
		cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: fmt.Sprintf("scale-%d", i)}.Defaults()
		cluster.Prepare(b, core, cfg)
		kubesim.Start(b, core, ag, cfg)
		m := hostManager(b, rc, core, cfg)
		key := m.Key
		ids := make([]string, n)
		for j := range ids {
			ids[j] = fmt.Sprintf("s%d", j)
		}
		first := parallel(b, ids, func(id string) error {
			if _, err := m.Create(ctx, id, sandbox.CreateOptions{BootTimeout: time.Minute}); err != nil {
				return err
			}
			c, err := m.Connect(ctx, id)
			if err != nil {
				return err
			}
			_, err = c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}})
			return err
		})
		// The list, three times, interleaved with the same list through a
		// client that asks for JSON (as the host did before 2026-12-05).
		mj := &kube.Manager{Cluster: &kube.Cluster{Core: core, Agents: ag, Config: cfg}, Key: key}
		var lists, jsonLists []time.Duration
		for range 3 {
			for _, l := range []struct {
				m *kube.Manager
				d *[]time.Duration
			}{{m, &lists}, {mj, &jsonLists}} {
				start := time.Now()
				all, err := l.m.List(ctx)
				*l.d = append(*l.d, time.Since(start))
				if err != nil || len(all) != n {
					b.Fatalf("list: %d neurons, %v", len(all), err)
				}
			}
		}
		listed, listedJSON := pct(lists, 50), pct(jsonLists, 50)
		// A second host's informer over the n pods.
		cl2, err := kube.NewCluster(ctx, rc, cfg)
		if err != nil {
			b.Fatal(err)
		}
		m2 := &kube.Manager{Cluster: cl2, Key: key}
		before := heap()
		start := time.Now()
		if !waittest.Until(time.Minute, m2.Watching) {
			b.Fatal("the informer did not list the pods within a minute")
		}
		synced := time.Since(start)
		perNeuron := float64(heap()-before) / float64(n)
		m2.Close()
		wiped := parallel(b, ids, func(id string) error { return m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}) })
		m.Close()
		b.ReportMetric(ms(pct(first, 50)), "first-exec-p50-ms")
		b.ReportMetric(ms(pct(first, 99)), "first-exec-p99-ms")
		b.ReportMetric(ms(listed), "list-ms")
		b.ReportMetric(ms(listedJSON), "list-json-ms")
		b.ReportMetric(ms(synced), "informer-sync-ms")
		b.ReportMetric(perNeuron/1024, "informer-KiB/neuron")
		b.ReportMetric(ms(pct(wiped, 50)), "wipe-p50-ms")
		b.ReportMetric(ms(pct(wiped, 99)), "wipe-p99-ms")
		b.ReportMetric(float64(n), "neurons")
	}
}

// hostManager is a host's Manager of cfg's namespace on the cluster rc
// reaches, with a signing key of its own whose public half the trust
// ConfigMap holds, and the clients as a host makes them (kube.NewCluster:
// the built-in kinds in protobuf, and the host's own limit on its
// requests, as from a kubeconfig, which sets none).
func hostManager(b *testing.B, rc *rest.Config, core kubernetes.Interface, cfg kube.Config) *kube.Manager {
	b.Helper()
	key, _ := podtoken.NewKey()
	if err := kube.EnsureTrust(context.Background(), core, cfg, key); err != nil {
		b.Fatal(err)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 0, 0
	cl, err := kube.NewCluster(context.Background(), rc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return &kube.Manager{Cluster: cl, Key: key}
}

// parallel runs f for each id, 8 at a time, and returns how long each took.
func parallel(b *testing.B, ids []string, f func(id string) error) []time.Duration {
	took := make([]time.Duration, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Go(func() {
			for j := range next {
				start := time.Now()
				err := f(ids[j])
				took[j] = time.Since(start)
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("%s: %w", ids[j], err))
					mu.Unlock()
				}
			}
		})
	}
	for j := range ids {
		next <- j
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	return took
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// heap is the live heap after a collection.
func heap() int64 {
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	return int64(st.HeapAlloc)
}

// BenchmarkWarmClaims is issue 24's warm-claim run: a warm pool of 50
// (agent-sandbox's controllers and kubesim, in this process), then
// NSYS_CORTEX_KUBE_CLAIMS creates (default 50) started 20 a second
// whatever the ones before are doing, each a SandboxClaim on the pool,
// timed to the create's return (the agent connected) and to its first
// command's answer; then, as the baseline in the same run, a fifth as
// many cold creates (a neuron with a memory limit of its own, which no
// claim serves: a claimed pod's resources are the template's) at the
// same rate. agent-sandbox's controller refills the pool at most
// NSYS_CORTEX_KUBE_REFILL_RATE Sandboxes a second (default 5, its
// --sandbox-warm-pool-max-refill-rate, as docs/kube.md advises; 0: its
// default, unpaced). Reported: p50 and p99 of each, the claims the pool
// answered warm, the ratio of the p50s, and the refill rate. Run it
// once: -bench WarmClaims -benchtime 1x.
func BenchmarkWarmClaims(b *testing.B) {
	n := 50
	if v, err := strconv.Atoi(os.Getenv("NSYS_CORTEX_KUBE_CLAIMS")); err == nil && v > 0 {
		n = v
	}
	refill := 5.0
	if v := os.Getenv("NSYS_CORTEX_KUBE_REFILL_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 {
			b.Fatalf("NSYS_CORTEX_KUBE_REFILL_RATE=%q: want a number of Sandboxes a second, 0 for unpaced", v)
		}
		refill = r
	}
	const poolSize, rate = 50, 20
	rc := cluster.Start(b, cluster.Options{Sandboxes: true, Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	ext := cluster.Extensions(rc)
	cluster.Controller{MaxRefillRate: refill}.Start(b, rc)
	ctx := context.Background()
	for i := range b.N {
		cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", Namespace: fmt.Sprintf("warm-%d", i), WarmPool: poolSize}.Defaults()
		cluster.Prepare(b, core, cfg)
		kubesim.StartBeside(b, core, ag, cfg).CollectClaims(ext)
		m := hostManager(b, rc, core, cfg)
		// The pool, made by a first claim and filled before the timing.
		if _, err := m.Create(ctx, "w-first", sandbox.CreateOptions{BootTimeout: time.Minute}); err != nil {
			b.Fatal(err)
		}
		warmReady(b, ext, cfg, poolSize)
		before := m.ClaimStats()
		run := func(prefix string, count int, opts sandbox.CreateOptions) (created, first []time.Duration) {
			created, first = make([]time.Duration, count), make([]time.Duration, count)
			errs := make([]error, count)
			var wg sync.WaitGroup
			tick := time.NewTicker(time.Second / rate)
			defer tick.Stop()
			for j := range count {
				if j > 0 {
					<-tick.C
				}
				wg.Go(func() {
					id := fmt.Sprintf("%s%d", prefix, j)
					start := time.Now()
					if _, errs[j] = m.Create(ctx, id, opts); errs[j] != nil {
						return
					}
					created[j] = time.Since(start)
					c, err := m.Connect(ctx, id)
					if err == nil {
						_, err = c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}})
					}
					first[j], errs[j] = time.Since(start), err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			return created, first
		}
		b.ResetTimer()
		warmCreated, warmFirst := run("w", n, sandbox.CreateOptions{BootTimeout: time.Minute})
		b.StopTimer()
		after := m.ClaimStats()
		cold := max(n/5, 1)
		coldCreated, coldFirst := run("c", cold, sandbox.CreateOptions{BootTimeout: time.Minute, Limits: sandbox.Limits{MemoryBytes: 256 << 20}})
		if got := m.ClaimStats(); got.Warm != after.Warm || got.Cold != after.Cold {
			b.Fatalf("the cold baseline went to the pool: %+v after the claims, %+v after it", after, got)
		}
		ids := []string{"w-first"}
		for j := range n {
			ids = append(ids, fmt.Sprintf("w%d", j))
		}
		for j := range cold {
			ids = append(ids, fmt.Sprintf("c%d", j))
		}
		parallel(b, ids, func(id string) error { return m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}) })
		m.Close()
		b.ReportMetric(ms(pct(warmCreated, 50)), "claim-p50-ms")
		b.ReportMetric(ms(pct(warmCreated, 99)), "claim-p99-ms")
		b.ReportMetric(ms(pct(warmFirst, 50)), "claim-first-exec-p50-ms")
		b.ReportMetric(ms(pct(warmFirst, 99)), "claim-first-exec-p99-ms")
		b.ReportMetric(ms(pct(coldCreated, 50)), "cold-p50-ms")
		b.ReportMetric(ms(pct(coldCreated, 99)), "cold-p99-ms")
		b.ReportMetric(ms(pct(coldFirst, 50)), "cold-first-exec-p50-ms")
		b.ReportMetric(float64(pct(warmCreated, 50))/float64(pct(coldCreated, 50)), "claim/cold-p50")
		b.ReportMetric(float64(after.Warm-before.Warm), "answered-warm")
		b.ReportMetric(float64(n), "claims")
		b.ReportMetric(refill, "refill-per-s")
	}
}

// BenchmarkConnect times what a new host process (a CLI call in kube
// mode) pays to reach a running neuron: Connect (the neuron's objects
// read, its pod checked and dialled, the hello) and one exec of true,
// from a Manager of its own each time, for three neurons: one a claim
// started cold (so named as its claim), one a claim that took a warm
// Sandbox (named as the pool's), and one that no claim holds (a create
// with limits, which no warm Sandbox serves).
func BenchmarkConnect(b *testing.B) {
	rc := cluster.Start(b, cluster.Options{Sandboxes: true, Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	ag := cluster.Agents(rc)
	ext := cluster.Extensions(rc)
	cluster.StartController(b, rc)
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1", WarmPool: 1}.Defaults()
	cluster.Prepare(b, core, cfg)
	kubesim.StartBeside(b, core, ag, cfg).CollectClaims(ext)
	m := hostManager(b, rc, core, cfg)
	defer m.Close()
	ctx := context.Background()
	boot := sandbox.CreateOptions{BootTimeout: time.Minute}
	if _, err := m.Create(ctx, "first", boot); err != nil {
		b.Fatal(err)
	}
	warmReady(b, ext, cfg, 1)
	if _, err := m.Create(ctx, "pooled", boot); err != nil {
		b.Fatal(err)
	}
	if name, _, err := m.Cluster.Resolve(ctx, "pooled"); err != nil || name == kube.ObjectName("pooled") {
		b.Fatalf("pooled runs in %q (%v), not a warm Sandbox", name, err)
	}
	cold := boot
	cold.Limits.MemoryBytes = 256 << 20
	if _, err := m.Create(ctx, "unclaimed", cold); err != nil {
		b.Fatal(err)
	}
	ids := []string{"first", "pooled", "unclaimed"}
	took := make([][]time.Duration, len(ids))
	b.ResetTimer()
	for range b.N {
		for i, id := range ids {
			fresh := &kube.Manager{Cluster: m.Cluster, Key: m.Key}
			start := time.Now()
			c, err := fresh.Connect(ctx, id)
			if err == nil {
				_, err = c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}})
			}
			took[i] = append(took[i], time.Since(start))
			fresh.Close()
			if err != nil {
				b.Fatalf("%s: %v", id, err)
			}
		}
	}
	b.StopTimer()
	for i, id := range ids {
		b.ReportMetric(ms(pct(took[i], 50)), id+"-p50-ms")
	}
}
