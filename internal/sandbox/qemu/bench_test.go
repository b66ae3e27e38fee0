package qemu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/qemu"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// Each iteration boots or resumes a VM: run with -benchtime=Nx, e.g.
//
//	go test ./internal/sandbox/qemu -run '^$' -bench 'Boot|Snapshot|Restore' -benchtime 5x
//	go test ./internal/sandbox/qemu -run '^$' -bench IdleCPU -benchtime 1x

func benchManager(b *testing.B) (*qemu.Manager, string) {
	img := requireQEMU(b)
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(b), "h"), "")
	if err != nil {
		b.Fatal(err)
	}
	m := qemu.New(sandbox.Env{Layout: lay, AgentBinary: func() (string, error) { return agentBin, nil }})
	b.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m, img
}

// firstAnswer connects to neuron id and waits for its agent's answer to
// a health request.
func firstAnswer(b *testing.B, m *qemu.Manager, id string) {
	c, err := m.Connect(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Health(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBoot: create (a cold boot of the VM) to the agent's first
// answer. The accelerator is chosen before the clock starts.
func BenchmarkBoot(b *testing.B) {
	m, img := benchManager(b)
	ctx := context.Background()
	if _, err := m.Create(ctx, "warm", sandbox.CreateOptions{Image: img}); err != nil {
		b.Fatal(err)
	}
	m.Destroy(ctx, "warm", sandbox.DestroyOptions{Wipe: true})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("boot%d", i)
		if _, err := m.Create(ctx, id, sandbox.CreateOptions{Image: img}); err != nil {
			b.Fatal(err)
		}
		firstAnswer(b, m, id)
		b.StopTimer()
		m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true})
		b.StartTimer()
	}
}

// BenchmarkSnapshot: a running neuron's snapshot (the VM is paused
// throughout: state and overlay disk are written).
func BenchmarkSnapshot(b *testing.B) {
	m, img := benchManager(b)
	ctx := context.Background()
	if _, err := m.Create(ctx, "snap", sandbox.CreateOptions{Image: img}); err != nil {
		b.Fatal(err)
	}
	firstAnswer(b, m, "snap")
	var paused time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		info, err := m.SnapshotVM(ctx, "snap", fmt.Sprintf("s%d", i))
		if err != nil {
			b.Fatal(err)
		}
		paused += info.Took
		b.StopTimer()
		os.RemoveAll(filepath.Join(m.SnapshotsDir("snap"), info.Name))
		b.StartTimer()
	}
	b.ReportMetric(float64(paused.Milliseconds())/float64(b.N), "ms-paused/op")
}

// BenchmarkRestore: a stopped neuron restored from its snapshot to the
// agent's first answer (QEMU starts, loads the state, runs; the guest
// sets its clock, reseeds, and greets the host again).
func BenchmarkRestore(b *testing.B) {
	m, img := benchManager(b)
	ctx := context.Background()
	if _, err := m.Create(ctx, "rest", sandbox.CreateOptions{Image: img}); err != nil {
		b.Fatal(err)
	}
	firstAnswer(b, m, "rest")
	if _, err := m.Snapshot(ctx, "rest", "s"); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := m.Destroy(ctx, "rest", sandbox.DestroyOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		st, err := m.Restore(ctx, "rest", "s")
		if err != nil {
			b.Fatal(err)
		}
		firstAnswer(b, m, "rest")
		b.StopTimer()
		cpu += processCPU(b, st.PID)
		b.StartTimer()
	}
	// The CPU time QEMU spent (its threads together) until the first
	// answer: the guest's work, which a busy host's stolen time does not
	// inflate as it does the wall clock.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "ms-vmm-cpu/op")
}

// BenchmarkIdleCPU: the host CPU an idle VM takes (its QEMU's threads),
// in ms per second, measured over 20 s once 10 s after its boot have
// passed (the guest's boot-time work is done by then). Each iteration
// takes half a minute: -benchtime 1x.
func BenchmarkIdleCPU(b *testing.B) {
	m, img := benchManager(b)
	ctx := context.Background()
	var used time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("idle%d", i)
		st, err := m.Create(ctx, id, sandbox.CreateOptions{Image: img})
		if err != nil {
			b.Fatal(err)
		}
		firstAnswer(b, m, id)
		time.Sleep(10 * time.Second)
		before := processCPU(b, st.PID)
		time.Sleep(20 * time.Second)
		used += processCPU(b, st.PID) - before
		if err := m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(used.Microseconds())/1000/20/float64(b.N), "ms-cpu/s")
}

// processCPU is the CPU time process pid's threads have used so far
// (the first field of each /proc/<pid>/task/<tid>/schedstat, in ns).
func processCPU(b *testing.B, pid int) time.Duration {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("the threads of process %d: %v", pid, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that just ended
		}
		var ns int64
		if _, err := fmt.Sscan(string(raw), &ns); err != nil {
			b.Fatalf("%s: %v", t, err)
		}
		sum += time.Duration(ns)
	}
	return sum
}
