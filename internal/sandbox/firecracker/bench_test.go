package firecracker

import (
	"context"
	"fmt"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/internal/fakefc"
)

// These measure the host's own cost around a VM against the fake
// Firecracker, whose guest answers at once: jail staging, the jailer and
// Firecracker processes, the API calls, the vsock bridge and the channel
// handshake. A real VM adds its kernel's boot (or its memory's load) to
// them; docs/kvm-validation.md measures those on a KVM host.

func instantGuest(c *fakefc.Config) { c.BootDelayMs = 0 }

// BenchmarkCreateDestroy: from Create to an agent that answered, then
// Destroy (its guest flush included).
func BenchmarkCreateDestroy(b *testing.B) {
	f := newFixtureWith(b, instantGuest)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("b%d", i%4)
		if _, err := f.mgr.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := f.mgr.Destroy(ctx, id, sandbox.DestroyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestoreToFirstAnswer: from Restore (a running neuron is
// replaced) to the first exec's answer, the guest's clock and entropy
// renewed on the way.
func BenchmarkRestoreToFirstAnswer(b *testing.B) {
	f := newFixtureWith(b, instantGuest)
	ctx := context.Background()
	if _, err := f.mgr.Create(ctx, "r", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 128 << 20}}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.mgr.Snapshot(ctx, "r", "base"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.mgr.Restore(ctx, "r", "base"); err != nil {
			b.Fatal(err)
		}
		c, err := f.mgr.Connect(ctx, "r")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot: pause, snapshot (128 MiB of guest memory, sparse),
// overlay copy, resume, and the channel back.
func BenchmarkSnapshot(b *testing.B) {
	f := newFixtureWith(b, instantGuest)
	ctx := context.Background()
	if _, err := f.mgr.Create(ctx, "s", sandbox.CreateOptions{Limits: sandbox.Limits{MemoryBytes: 128 << 20}}); err != nil {
		b.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "s")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.mgr.Snapshot(ctx, "s", fmt.Sprintf("s%d", i)); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}}); err == nil {
				break
			} else if !errdefs.IsNotRunning(err) {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkExecThroughBridge: one small exec over the channel, whose bytes
// cross the bridge's relay and the fake vsock.
func BenchmarkExecThroughBridge(b *testing.B) {
	f := newFixtureWith(b, instantGuest)
	ctx := context.Background()
	if _, err := f.mgr.Create(ctx, "e", sandbox.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "e")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"true"}}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFileThroughBridge: a 1 MiB file read over the channel.
func BenchmarkReadFileThroughBridge(b *testing.B) {
	f := newFixtureWith(b, instantGuest)
	ctx := context.Background()
	if _, err := f.mgr.Create(ctx, "rf", sandbox.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	c, err := f.mgr.Connect(ctx, "rf")
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1<<20)
	if err := c.WriteFile(ctx, "big", data, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.ReadFile(ctx, "big"); err != nil {
			b.Fatal(err)
		}
	}
}
