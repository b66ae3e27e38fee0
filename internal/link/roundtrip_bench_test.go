//go:build linux

package link_test

import (
	"context"
	"testing"
)

func BenchmarkExistsInProcess(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.client.Exists(ctx, "."); err != nil {
			b.Fatal(err)
		}
	}
}
