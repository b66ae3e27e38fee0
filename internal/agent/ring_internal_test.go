//go:build linux

package agent

import (
	"bytes"
	"testing"
)

// A ring read back from disk holds each byte at its own offset, and
// nothing before what it was given.
func TestRingFromRoundTrip(t *testing.T) {
	for _, size := range []int{7, 16} {
		for n := 0; n <= 100; n++ {
			stream := make([]byte, n)
			for i := range stream {
				stream[i] = byte('A' + i%26)
			}
			r := newRing(size)
			r.Write(stream)
			data, end := r.Snapshot()
			back := ringFrom(data, end)
			if back.End() != int64(n) {
				t.Fatalf("size %d, %d bytes: end %d", size, n, back.End())
			}
			for off := int64(0); off <= int64(n); off++ {
				got, start, _ := back.ReadFrom(off, 1<<20)
				if want := stream[max(start, 0):]; !bytes.Equal(got, want) || start < off && off >= int64(n-len(data)) {
					t.Fatalf("size %d, %d bytes, from %d: got %q at %d", size, n, off, got, start)
				}
			}
		}
	}
	// No history at all: nothing is made up.
	if got, start, eof := ringFrom(nil, 100).ReadFrom(0, 10); len(got) != 0 || start != 100 || !eof {
		t.Fatalf("%q %d %v", got, start, eof)
	}
}
