package ctxfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
)

// openReadClose is one open+read+close, in syscalls (what cat costs
// without its exec).
func openReadClose(tb testing.TB, p string, buf []byte) {
	fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := syscall.Read(fd, buf); err != nil {
		tb.Fatal(err)
	}
	syscall.Close(fd)
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkStatusRead measures open+read+close of neurons/<id>/status
// through the mount (p50), and the same on tmpfs in the same run.
func BenchmarkStatusRead(b *testing.B) {
	f := newFake(b, map[string]int{"a": 0, "b": 0, "c": 0})
	dir := mountTree(b, f.tree())
	status := filepath.Join(dir, "neurons/b/status")
	tmp, err := os.MkdirTemp("/dev/shm", "ctxbench-")
	if err != nil {
		b.Skip("needs /dev/shm (tmpfs) for the comparison")
	}
	defer os.RemoveAll(tmp)
	plain := filepath.Join(tmp, "status")
	os.WriteFile(plain, f.Snapshot().ByID["b"].Status, 0o644)
	buf := make([]byte, 4096)
	for range 1000 { // warm both
		openReadClose(b, status, buf)
		openReadClose(b, plain, buf)
	}
	ctx := make([]time.Duration, 0, b.N)
	fs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		openReadClose(b, status, buf)
		ctx = append(ctx, time.Since(t))
		t = time.Now()
		openReadClose(b, plain, buf)
		fs = append(fs, time.Since(t))
	}
	b.StopTimer()
	c, m := p50(ctx), p50(fs)
	b.ReportMetric(float64(c.Nanoseconds())/1e3, "ctx-p50-µs")
	b.ReportMetric(float64(m.Nanoseconds())/1e3, "tmpfs-p50-µs")
	b.ReportMetric(float64(c)/float64(m), "ratio")
}

// BenchmarkLs1000 lists neurons/ with 1 000 neurons (fake source): names
// only (ls), and names with a stat each (ls -l).
func BenchmarkLs1000(b *testing.B) {
	uids := map[string]int{}
	for i := range 1000 {
		uids[fmt.Sprintf("n%04d", i)] = 0
	}
	dir := mountTree(b, newFake(b, uids).tree())
	neurons := filepath.Join(dir, "neurons")
	b.Run("ls", func(b *testing.B) {
		for range b.N {
			ents, err := os.ReadDir(neurons)
			if err != nil || len(ents) != 1000 {
				b.Fatal(len(ents), err)
			}
		}
	})
	b.Run("ls-l", func(b *testing.B) {
		for range b.N {
			ents, err := os.ReadDir(neurons)
			if err != nil || len(ents) != 1000 {
				b.Fatal(len(ents), err)
			}
			for _, e := range ents {
				if _, err := os.Lstat(filepath.Join(neurons, e.Name())); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkMemory100kReads reads status 100 000 times and reports how
// much the heap (server and reader share this process) grew.
func BenchmarkMemory100kReads(b *testing.B) {
	f := newFake(b, map[string]int{"a": 0})
	dir := mountTree(b, f.tree())
	status := filepath.Join(dir, "neurons/a/status")
	buf := make([]byte, 4096)
	for range 1000 {
		openReadClose(b, status, buf)
	}
	read := func() runtime.MemStats {
		for range 100_000 {
			openReadClose(b, status, buf)
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m
	}
	for range b.N {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		first := read()
		second := read()
		b.ReportMetric(float64(int64(first.HeapAlloc)-int64(before.HeapAlloc))/1024, "growth-1st-100k-KiB")
		b.ReportMetric(float64(int64(second.HeapAlloc)-int64(first.HeapAlloc))/1024, "growth-2nd-100k-KiB")
		b.ReportMetric(float64(second.HeapAlloc)/1024, "heap-after-KiB")
	}
}
