//go:build linux

package link_test

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

func BenchmarkExecTrue(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	req := &link.ExecRequest{Command: protocol.Command{Argv: []string{"/bin/true"}}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.client.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkForkExecTrue(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteFile64M(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.client.WriteFile(ctx, "big", data, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFile64M(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	if err := p.client.WriteFile(ctx, "big", data, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := p.client.ReadFile(ctx, "big")
		if err != nil || len(got) != len(data) {
			b.Fatal(err, len(got))
		}
	}
}

func BenchmarkReadFileTo64M(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	if err := p.client.WriteFile(ctx, "big", data, nil); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, err := p.client.ReadFileTo(ctx, "big", io.Discard)
		if err != nil || n != int64(len(data)) {
			b.Fatal(err, n)
		}
	}
}
