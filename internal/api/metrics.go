package api

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/pool"
)

// metrics are the daemon's Prometheus series, in a registry of its own.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	inflight prometheus.Gauge
}

func newMetrics(set *sandbox.Set, pools pool.Pools) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortex_api_requests_total", Help: "API requests answered, by route and HTTP status.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cortex_api_request_duration_seconds", Help: "Time to answer an API request (streams: until they end), by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortex_api_errors_total", Help: "API error answers, by error code.",
		}, []string{"code"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cortex_api_file_bytes_total", Help: "File bytes moved through the API, by direction (upload, download).",
		}, []string{"direction"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cortex_api_requests_in_flight", Help: "API requests being answered now.",
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.errors, m.bytes, m.inflight,
		&neuronCollector{set: set}, poolCollector{pools}, claimCollector{set}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// claimCollector reports the creates that were claims on a warm pool the
// cluster keeps (kube.warm_pool), of the managers built so far.
type claimCollector struct{ set *sandbox.Set }

var (
	claimSecondsDesc = prometheus.NewDesc("cortex_claim_seconds", "Creates that claimed a neuron from the cluster's warm pool: from the claim to the agent connected.", perMode, nil)
	claimsDesc       = prometheus.NewDesc("cortex_claims_total", "Creates that claimed a neuron from the cluster's warm pool, by how the claim was answered (warm: a neuron of the pool; cold: one made for it; failed).", []string{"mode", "start"}, nil)
)

func (c claimCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- claimSecondsDesc
	ch <- claimsDesc
}

func (c claimCollector) Collect(ch chan<- prometheus.Metric) {
	if c.set == nil {
		return
	}
	for _, m := range c.set.Built() {
		r, ok := m.(sandbox.ClaimReporter)
		if !ok {
			continue
		}
		s := r.ClaimStats()
		buckets := make(map[float64]uint64, len(s.Buckets))
		for i, le := range s.Buckets {
			buckets[le] = s.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(claimSecondsDesc, s.Count, s.Sum, buckets, s.Mode)
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.CounterValue, float64(s.Warm), s.Mode, "warm")
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.CounterValue, float64(s.Cold), s.Mode, "cold")
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.CounterValue, float64(s.Failed), s.Mode, "failed")
	}
}

// poolCollector reports the warm pools (serve --pool) at each scrape.
type poolCollector struct{ pools pool.Pools }

var (
	perMode         = []string{"mode"}
	poolSizeDesc    = prometheus.NewDesc("cortex_pool_size", "Warm neurons the pool keeps.", perMode, nil)
	poolReadyDesc   = prometheus.NewDesc("cortex_pool_ready", "Warm neurons ready to be claimed.", perMode, nil)
	poolBootingDesc = prometheus.NewDesc("cortex_pool_booting", "Warm neurons being booted.", perMode, nil)
	poolClaimsDesc  = prometheus.NewDesc("cortex_pool_claims_total", "Creates answered by a warm neuron.", perMode, nil)
	poolMissesDesc  = prometheus.NewDesc("cortex_pool_misses_total", "Creates of the pool's mode booted cold (pool empty, data under the id, options a warm neuron cannot give).", perMode, nil)
	poolFailedDesc  = prometheus.NewDesc("cortex_pool_failures_total", "Warm boots and claims that failed.", perMode, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolSizeDesc, poolReadyDesc, poolBootingDesc, poolClaimsDesc, poolMissesDesc, poolFailedDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.pools.Stats() {
		ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(s.Size), s.Mode)
		ch <- prometheus.MustNewConstMetric(poolReadyDesc, prometheus.GaugeValue, float64(s.Ready), s.Mode)
		ch <- prometheus.MustNewConstMetric(poolBootingDesc, prometheus.GaugeValue, float64(s.Booting), s.Mode)
		ch <- prometheus.MustNewConstMetric(poolClaimsDesc, prometheus.CounterValue, float64(s.Claims), s.Mode)
		ch <- prometheus.MustNewConstMetric(poolMissesDesc, prometheus.CounterValue, float64(s.Misses), s.Mode)
		ch <- prometheus.MustNewConstMetric(poolFailedDesc, prometheus.CounterValue, float64(s.Failed), s.Mode)
	}
}

// neuronCollector counts neurons by mode and status at each scrape, and
// measures each existing neuron (sandbox.MetricsReader): one series set
// per neuron, gone once it is wiped (docs/api.md, Metrics).
type neuronCollector struct{ set *sandbox.Set }

var (
	neuronsDesc = prometheus.NewDesc("cortex_neurons", "Neurons known, by mode and status.", []string{"mode", "status"}, nil)

	perNeuron          = []string{"neuron"}
	neuronCPUDesc      = prometheus.NewDesc("cortex_neuron_cpu_seconds_total", "CPU time the neuron used since it started.", perNeuron, nil)
	neuronMemoryDesc   = prometheus.NewDesc("cortex_neuron_memory_bytes", "The neuron's resident memory.", perNeuron, nil)
	neuronPidsDesc     = prometheus.NewDesc("cortex_neuron_pids", "The neuron's processes (tasks).", perNeuron, nil)
	neuronDiskDesc     = prometheus.NewDesc("cortex_neuron_disk_bytes", "What the neuron's data takes on the host's disk.", perNeuron, nil)
	neuronEgressDesc   = prometheus.NewDesc("cortex_neuron_egress_bytes_total", "Bytes through the neuron's egress proxy (neurons with egress only).", perNeuron, nil)
	neuronPausedDesc   = prometheus.NewDesc("cortex_neuron_paused", "1 while the neuron is paused, else 0.", perNeuron, nil)
	neuronDeadlineDesc = prometheus.NewDesc("cortex_neuron_deadline_seconds", "When the neuron's deadline passes, in Unix seconds (neurons with a deadline only).", perNeuron, nil)
)

func (c *neuronCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{neuronsDesc, neuronCPUDesc, neuronMemoryDesc, neuronPidsDesc, neuronDiskDesc,
		neuronEgressDesc, neuronPausedDesc, neuronDeadlineDesc} {
		ch <- d
	}
}

func (c *neuronCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := c.set.List(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(neuronsDesc, err)
		return
	}
	type key struct{ mode, status string }
	counts := map[key]int{}
	for _, mode := range c.set.Modes() {
		for _, st := range []sandbox.Status{sandbox.StatusPending, sandbox.StatusRunning, sandbox.StatusPaused, sandbox.StatusStopped} {
			counts[key{mode, string(st)}] = 0
		}
	}
	for _, st := range all {
		counts[key{st.Mode, string(st.Status)}]++
		c.collectNeuron(ctx, ch, st)
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(neuronsDesc, prometheus.GaugeValue, float64(n), k.mode, k.status)
	}
}

// collectNeuron sends neuron st's series. Its usage comes from the host's
// records (MetricsReader): a scrape never resumes a paused neuron and
// never counts as use of it.
func (c *neuronCollector) collectNeuron(ctx context.Context, ch chan<- prometheus.Metric, st *sandbox.State) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, st.ID)
	}
	paused := 0.0
	if st.Status == sandbox.StatusPaused {
		paused = 1
	}
	gauge(neuronPausedDesc, paused)
	if st.Deadline != nil {
		gauge(neuronDeadlineDesc, float64(st.Deadline.UnixMilli())/1000)
	}
	m, err := c.set.Manager(st.Mode)
	if err != nil {
		return
	}
	mr, ok := m.(sandbox.MetricsReader)
	if !ok {
		return
	}
	met, err := mr.Metrics(ctx, st.ID)
	if err != nil {
		return // gone since the listing, or unreadable now: no usage this scrape
	}
	ch <- prometheus.MustNewConstMetric(neuronCPUDesc, prometheus.CounterValue, met.CPUSeconds, st.ID)
	gauge(neuronMemoryDesc, float64(met.MemoryBytes))
	gauge(neuronPidsDesc, float64(met.Pids))
	gauge(neuronDiskDesc, float64(met.DiskBytes))
	if met.EgressBytes >= 0 {
		ch <- prometheus.MustNewConstMetric(neuronEgressDesc, prometheus.CounterValue, float64(met.EgressBytes), st.ID)
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush sends what was written: streaming handlers that ask for an
// http.Flusher itself (Connect's) find one, and the stream is unbuffered.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// observe counts and times every request, and logs it (method, route,
// status, duration: never headers, so never the token).
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		s.metrics.inflight.Inc()
		defer func() {
			s.metrics.inflight.Dec()
			route := r.Pattern
			if route == "" || route == "/" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			clientGone := r.Context().Err() != nil
			if clientGone && (status >= 500 || sw.status == 0) {
				status = 499 // the client closed the request: not the daemon's failure
			}
			d := time.Since(start)
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			s.metrics.latency.WithLabelValues(route).Observe(d.Seconds())
			// Only the closed set of codes: a header of anyone else's (a
			// neuron's, through the port proxy) makes no series.
			if code := sw.Header().Get("X-Cortex-Error"); code != "" && status != 499 && slices.Contains(cortex.Codes(), cortex.Code(code)) {
				s.metrics.errors.WithLabelValues(code).Inc()
			}
			level := slog.LevelDebug
			if status >= 500 {
				level = slog.LevelWarn
			}
			s.log.Log(r.Context(), level, "request", "method", r.Method, "route", route, "path", r.URL.Path,
				"status", status, "duration", d)
		}()
		next.ServeHTTP(sw, r)
	})
}
