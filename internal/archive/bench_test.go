//go:build !cortex_light

package archive

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// mixedTree makes 1 GiB of mixed files under dir: half in 64 files of
// random bytes (incompressible: binaries, media), half in 4096 files of
// 128 KiB of repetitive text (source, logs), in 64 directories.
func mixedTree(b *testing.B, dir string) int64 {
	b.Helper()
	var total int64
	rnd := make([]byte, 8<<20)
	text := bytes.Repeat([]byte("func main() { fmt.Println(\"hello, neuron\") } // a line of code\n"), 4096)[:128<<10]
	for i := range 64 {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		rand.Read(rnd)
		if err := os.WriteFile(filepath.Join(d, "blob.bin"), rnd, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(rnd))
		for j := range 64 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d.go", j)), text, 0o644); err != nil {
				b.Fatal(err)
			}
			total += int64(len(text))
		}
	}
	return total
}

// BenchmarkArchive1GiB: Export writes 1 GiB of mixed files to an archive
// file on disk (synced), Import reads it back into a fresh tree, checked
// whole against its manifest; the figure is MB/s of the files' data.
func BenchmarkArchive1GiB(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	total := mixedTree(b, src)
	arc := filepath.Join(dir, "a.tar.zst")
	b.Run("Export", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			f, err := os.Create(arc)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Write(context.Background(), f, Record{ID: "bench", Mode: "nsbox"}, []Tree{{Name: "data", Dir: src}}); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		if fi, err := os.Stat(arc); err == nil {
			b.ReportMetric(float64(fi.Size())/float64(total), "archive/data")
		}
	})
	b.Run("Import", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; b.Loop(); i++ {
			stage := filepath.Join(dir, fmt.Sprintf("stage%d", i))
			os.Mkdir(stage, 0o700)
			f, err := os.Open(arc)
			if err != nil {
				b.Fatal(err)
			}
			ar, err := Open(f)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ar.Extract(context.Background(), stage, ExtractOptions{}); err != nil {
				b.Fatal(err)
			}
			ar.Close()
			f.Close()
			b.StopTimer()
			os.RemoveAll(stage)
			b.StartTimer()
		}
	})
}
