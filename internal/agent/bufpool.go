//go:build linux

package agent

import (
	"sync"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// Chunk-sized buffers are reused: allocating (and zeroing) a fresh megabyte
// for every file chunk costs more than moving it.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, protocol.ChunkSize); return &b }}

// minPooled is the smallest buffer worth taking from the pool.
const minPooled = 64 << 10

// getBuf returns a buffer of length n and the func that gives it back.
func getBuf(n int) ([]byte, func()) {
	if n < minPooled || n > protocol.ChunkSize {
		return make([]byte, n), func() {}
	}
	bp := chunkPool.Get().(*[]byte)
	return (*bp)[:n], func() { chunkPool.Put(bp) }
}
