package sandboxtest

import (
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// benchPauseResume times a pause and a resume of a running neuron through
// the Go API (the mode's baselines beside them: the same without Cortex),
// and an exec on a paused neuron, which resumes it first.
func benchPauseResume(b *testing.B, cfg Config) {
	f := newBench(b, cfg, "")
	st, c := f.neuron("pause")
	pm, ok := f.m.(sandbox.Pauser)
	if !ok {
		b.Skipf("%s mode's manager is no sandbox.Pauser", f.m.Mode())
	}
	// Warm both paths (the first pause finds what it freezes).
	if _, err := pm.Pause(f.ctx, "pause", sandbox.PauseOptions{}); errdefs.IsUnsupported(err) {
		b.Skipf("%s mode cannot pause: %v", f.m.Mode(), err)
	} else if err != nil {
		b.Fatal(err)
	}
	if _, err := pm.Resume(f.ctx, "pause"); err != nil {
		b.Fatal(err)
	}
	pauseBase, resumeBase := f.baseline(cfg.Bench.PauseBaseline, st), f.baseline(cfg.Bench.ResumeBaseline, st)
	pauseBase.time(b)
	resumeBase.time(b)
	if pauseBase != nil {
		pauseBase.times, resumeBase.times = nil, nil
	}
	pauses, resumes, execs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := pm.Pause(f.ctx, "pause", sandbox.PauseOptions{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := pm.Resume(f.ctx, "pause"); err != nil {
			b.Fatal(err)
		}
		pauses, resumes = append(pauses, t1.Sub(t0)), append(resumes, time.Since(t1))
		b.StopTimer()
		// An exec on a paused neuron: it resumes it, then runs.
		if _, err := pm.Pause(f.ctx, "pause", sandbox.PauseOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t2 := time.Now()
		f.execTrue(c)
		execs = append(execs, time.Since(t2))
		b.StopTimer()
		pauseBase.time(b)
		resumeBase.time(b)
		b.StartTimer()
	}
	b.StopTimer()
	reportVs(b, "pause-", pauses, pauseBase)
	reportVs(b, "resume-", resumes, resumeBase)
	reportVs(b, "paused-exec-", execs, nil)
}

// reportVs reports the p50 and p99 of ours in milliseconds as
// prefix-p50-ms, and beside them the baseline's p50 and prefix-ratio-p50,
// ours over theirs.
func reportVs(b *testing.B, prefix string, ours []time.Duration, base *timed) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(Percentile(ours, 0.5)), prefix+"p50-ms")
	b.ReportMetric(ms(Percentile(ours, 0.99)), prefix+"p99-ms")
	if base == nil || len(base.times) == 0 {
		return
	}
	theirs := Percentile(base.times, 0.5)
	b.ReportMetric(ms(theirs), base.base.Name+"-p50-ms")
	b.ReportMetric(float64(Percentile(ours, 0.5))/float64(theirs), prefix+"ratio-p50")
}
