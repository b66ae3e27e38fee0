package textedit

import (
	"fmt"
	"strings"
	"testing"
)

// sourceLike returns about size bytes of distinct, code-like lines.
func sourceLike(size int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "\tresult%d := compute(ctx, %d, \"value-%d\") // step %d\n", i, i*7, i, i)
	}
	return []byte(b.String())
}

func BenchmarkApplyEdit1MiB(b *testing.B) {
	content := sourceLike(1 << 20)
	edits := []Edit{{OldString: "\tresult12345 := compute(ctx, 86415, \"value-12345\")", NewString: "\tresult12345 := other()"}}
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Apply(content, edits); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyNotFound1MiB measures the failure path, which builds hints.
func BenchmarkApplyNotFound1MiB(b *testing.B) {
	content := sourceLike(1 << 20)
	edits := []Edit{{OldString: "\tresult12345 := compute(ctx, 1, \"value-12345\")\n\tresult12346 := x", NewString: "y"}}
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if _, _, err := Apply(content, edits); err == nil {
			b.Fatal("want error")
		}
	}
}

func BenchmarkFormat1MiB(b *testing.B) {
	content := sourceLike(1 << 20)
	o := ReadOptions{Limit: 1 << 30, MaxChars: 1 << 30}
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Format(content, o); err != nil {
			b.Fatal(err)
		}
	}
}
