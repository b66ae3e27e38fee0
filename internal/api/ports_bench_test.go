package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/portsign"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkPortProxy: a small GET to the neuron's server through the
// API's port proxy against the same GET straight to the server on the
// host's loopback (process mode shares it: the floor), interleaved, with
// kept-alive connections on both sides; and a 256 MiB download through
// the proxy, against the same download straight from the server.
func BenchmarkPortProxy(b *testing.B) {
	key := []byte(strings.Repeat("k", portsign.KeySize))
	d := newDaemon(b, api.Options{Token: "tok", URLKey: key})
	d.create(b, "web")
	_, c, err := connectDirect(d, "web")
	if err != nil {
		b.Fatal(err)
	}
	port := sandboxtest.FreePort(b)
	sandboxtest.StartPortServer(b, context.Background(), c, port)
	proxied := fmt.Sprintf("%s/v1/neurons/web/ports/%d", d.ts.URL, port)
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	get := func(url string) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("GET %s: %s", url, resp.Status)
		}
	}
	b.Run("Small", func(b *testing.B) {
		get(proxied + "/")
		get(direct + "/")
		var viaProxy, straight []time.Duration
		for b.Loop() {
			t0 := time.Now()
			get(proxied + "/")
			t1 := time.Now()
			get(direct + "/")
			viaProxy, straight = append(viaProxy, t1.Sub(t0)), append(straight, time.Since(t1))
		}
		p, s := percentile(viaProxy, 0.5), percentile(straight, 0.5)
		b.ReportMetric(float64(p.Microseconds())/1000, "proxy-p50-ms")
		b.ReportMetric(float64(s.Microseconds())/1000, "direct-p50-ms")
		b.ReportMetric(float64((p-s).Microseconds())/1000, "added-p50-ms")
	})
	const size = 256 << 20
	for _, tc := range []struct{ name, url string }{{"Download256MiB", proxied}, {"Download256MiBDirect", direct}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				get(fmt.Sprintf("%s/big?n=%d", tc.url, size))
			}
		})
	}
}
