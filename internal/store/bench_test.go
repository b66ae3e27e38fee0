package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/store"
)

// benchTree makes a neuron's overlay as a snapshot sees it: 1,000 small
// files in 20 directories, a symlink in each, and one 32 MiB file.
func benchTree(b *testing.B) (overlay string, bytes int64) {
	b.Helper()
	overlay = filepath.Join(b.TempDir(), "overlay")
	small := []byte(strings.Repeat("x", 4096))
	for d := range 20 {
		dir := filepath.Join(overlay, "upper", "root", fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 50 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), small, 0o644); err != nil {
				b.Fatal(err)
			}
			bytes += int64(len(small))
		}
		os.Symlink("f00", filepath.Join(dir, "link"))
	}
	big := make([]byte, 32<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(overlay, "upper", "root", "big"), big, 0o644); err != nil {
		b.Fatal(err)
	}
	return overlay, bytes + int64(len(big))
}

// BenchmarkSnapshotTree is a file copy snapshot (nsbox, docker) of that
// tree; BenchmarkRestoreTree puts it back.
func BenchmarkSnapshotTree(b *testing.B) {
	overlay, n := benchTree(b)
	dir := filepath.Join(b.TempDir(), "snaps")
	b.SetBytes(n)
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("s%d", i)
		if _, err := store.CreateSnapshot(dir, name, "bench", overlay); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := store.RemoveSnapshot(dir, name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkRestoreTree(b *testing.B) {
	overlay, n := benchTree(b)
	dir := filepath.Join(b.TempDir(), "snaps")
	if _, err := store.CreateSnapshot(dir, "s", "bench", overlay); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	b.ResetTimer()
	for range b.N {
		if _, err := store.RestoreSnapshot(dir, "s", overlay); err != nil {
			b.Fatal(err)
		}
	}
}
