package qemu_test

import (
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkSuite runs the benchmarks every mode runs; an idle VM is
// watched 20 s once 10 s after its boot have passed (the guest's boot-time
// work is done by then). Each iteration boots or resumes a VM: run with
// -benchtime=Nx, e.g.
//
//	go test ./internal/sandbox/qemu -run '^$' -bench 'Suite/(CreateToFirstExec|Snapshot|Restore)' -benchtime 5x
//	go test ./internal/sandbox/qemu -run '^$' -bench Suite/Idle -benchtime 1x
func BenchmarkSuite(b *testing.B) {
	cfg := conformance(b)
	cfg.Bench = sandboxtest.Bench{IdleSettle: 10 * time.Second, IdleWindow: 20 * time.Second}
	sandboxtest.RunBenchmarks(b, cfg)
}
