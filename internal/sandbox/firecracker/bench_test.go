package firecracker

import (
	"testing"

	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// BenchmarkSuite runs the benchmarks every mode runs against the fake
// Firecracker, whose guest answers at once: they measure the host's own
// cost around a VM (jail staging, the jailer and Firecracker processes,
// the API calls, the vsock bridge and the channel handshake). A real VM
// adds its kernel's boot (or its memory's load) to them;
// docs/kvm-validation.md measures those on a KVM host. Guests have 128
// MiB, which a snapshot writes (sparse).
func BenchmarkSuite(b *testing.B) {
	cfg := fakeConformance(b, func(c *fakefc.Config) { c.BootDelayMs = 0 })
	cfg.Options.Limits.MemoryBytes = 128 << 20
	sandboxtest.RunBenchmarks(b, cfg)
}
