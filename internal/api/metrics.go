package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nsys-cortex/cortex/internal/sandbox"
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

func newMetrics(set *sandbox.Set) *metrics {
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
		&neuronCollector{set: set}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// neuronCollector counts neurons by mode and status at each scrape.
type neuronCollector struct{ set *sandbox.Set }

var neuronsDesc = prometheus.NewDesc("cortex_neurons", "Neurons known, by mode and status.", []string{"mode", "status"}, nil)

func (c *neuronCollector) Describe(ch chan<- *prometheus.Desc) { ch <- neuronsDesc }

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
		for _, st := range []sandbox.Status{sandbox.StatusPending, sandbox.StatusRunning, sandbox.StatusStopped} {
			counts[key{mode, string(st)}] = 0
		}
	}
	for _, st := range all {
		counts[key{st.Mode, string(st.Status)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(neuronsDesc, prometheus.GaugeValue, float64(n), k.mode, k.status)
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
			if code := sw.Header().Get("X-Cortex-Error"); code != "" && status != 499 {
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
