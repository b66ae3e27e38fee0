package process_test

import (
	"os/exec"
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkSuite runs the benchmarks every mode runs, over the real Unix
// socket to a real cortex-agent process; scripts/bench.sh runs them and
// docs/benchmarks.md records the figures. An exec is set against a plain
// fork+exec of /bin/true from this process, in the same run.
func BenchmarkSuite(b *testing.B) {
	cfg := conformance
	cfg.Bench.ExecBaseline = &sandboxtest.Baseline{Name: "forkexec", Prepare: func(*testing.B, *sandbox.State) func() error {
		return func() error { return exec.Command("/bin/true").Run() }
	}}
	sandboxtest.RunBenchmarks(b, cfg)
}
