package sandbox

import (
	"sort"
	"sync"
	"time"
)

// ClaimReporter is implemented by managers whose creates claim neurons
// that a cluster keeps warm (kube mode's SandboxWarmPool, kube.warm_pool):
// /metrics reports what ClaimStats returns.
type ClaimReporter interface {
	ClaimStats() ClaimStats
}

// ClaimStats are a manager's creates that were claims on a warm pool the
// cluster keeps.
type ClaimStats struct {
	Mode string
	// Warm counts the claims answered with a warm neuron of the pool,
	// Cold those answered with one made for the claim (the pool empty or
	// out of date), Failed those that failed.
	Warm, Cold, Failed uint64
	// Buckets are the latency histogram's upper bounds in seconds, and
	// Counts the claims at or under each (cumulative); Count and Sum are
	// of every claim that succeeded. The latency is the create's: from
	// the claim made to the neuron's agent connected.
	Buckets []float64
	Counts  []uint64
	Count   uint64
	Sum     float64
}

// claimBuckets are ClaimStats' bounds, in seconds.
var claimBuckets = []float64{0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30, 60, 120}

// ClaimRecorder keeps ClaimStats; the zero value is ready.
type ClaimRecorder struct {
	mu sync.Mutex
	s  ClaimStats
}

// Record counts one claim: its latency d, whether a warm neuron answered
// it, and whether it failed.
func (r *ClaimRecorder) Record(d time.Duration, warm bool, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s.Counts == nil {
		r.s.Buckets, r.s.Counts = claimBuckets, make([]uint64, len(claimBuckets))
	}
	switch {
	case failed:
		r.s.Failed++
		return
	case warm:
		r.s.Warm++
	default:
		r.s.Cold++
	}
	sec := d.Seconds()
	for i := sort.SearchFloat64s(r.s.Buckets, sec); i < len(r.s.Counts); i++ {
		r.s.Counts[i]++
	}
	r.s.Count++
	r.s.Sum += sec
}

// Stats returns a copy of what was recorded, for mode.
func (r *ClaimRecorder) Stats(mode string) ClaimStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	s.Mode = mode
	if s.Counts == nil {
		s.Buckets, s.Counts = claimBuckets, make([]uint64, len(claimBuckets))
	}
	s.Counts = append([]uint64(nil), s.Counts...)
	return s
}
