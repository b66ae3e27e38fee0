package sandbox

import (
	"testing"
	"time"
)

// The claims' histogram is cumulative, as Prometheus reads it, with each
// claim at the first bound at or over its latency; a failed claim is
// counted apart, with no latency.
func TestClaimRecorder(t *testing.T) {
	var r ClaimRecorder
	if s := r.Stats("kube"); s.Count != 0 || len(s.Counts) != len(s.Buckets) || s.Mode != "kube" {
		t.Fatalf("empty: %+v", s)
	}
	r.Record(40*time.Millisecond, true, false)
	r.Record(300*time.Millisecond, false, false)
	r.Record(time.Hour, true, true)
	s := r.Stats("kube")
	if s.Warm != 1 || s.Cold != 1 || s.Failed != 1 || s.Count != 2 || s.Sum < 0.339 || s.Sum > 0.341 {
		t.Fatalf("counts: %+v", s)
	}
	for i, le := range s.Buckets {
		want := uint64(0)
		if le >= 0.04 {
			want++
		}
		if le >= 0.3 {
			want++
		}
		if s.Counts[i] != want {
			t.Errorf("bucket le=%v holds %d, want %d", le, s.Counts[i], want)
		}
	}
	s.Counts[0] = 99
	if r.Stats("kube").Counts[0] == 99 {
		t.Error("Stats shares its counts with the recorder")
	}
}
