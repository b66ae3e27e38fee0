//go:build linux

package agent

import "sync"

// ring keeps the last size bytes written to it, addressed by absolute stream
// offsets: byte k of the stream is at offset k whether or not it is still
// held. Readers wait for growth on the channel Wait returns.
type ring struct {
	mu     sync.Mutex
	buf    []byte
	end    int64 // total bytes ever written
	start  int64 // no byte before it is held (a ring read back from disk)
	closed bool
	notify chan struct{} // closed (and replaced) on every write and on Close

	// Pacing readers (a terminal's writer attachment) hold back the
	// writer, and so the program, instead of losing output: a terminal's
	// flow control. A pacer that stops reading blocks the program, as a
	// terminal under scroll lock does, until it reads or goes away.
	pacers map[*pacer]struct{}
	room   chan struct{} // closed (and replaced) when a pacer moves or leaves
}

// pacer is one pacing reader: off is the next byte it needs.
type pacer struct{ off int64 }

func newRing(size int) *ring {
	return &ring{buf: make([]byte, size), notify: make(chan struct{})}
}

// Write appends p, overwriting the oldest bytes once the ring is full;
// while pacing readers are behind, it waits for them instead.
func (r *ring) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		r.mu.Lock()
		size := int64(len(r.buf))
		k := int64(len(p))
		if len(r.pacers) > 0 && !r.closed {
			oldest := r.end
			for pc := range r.pacers {
				oldest = min(oldest, pc.off)
			}
			if free := size - (r.end - oldest); free < k {
				if free <= 0 {
					room := r.room
					r.mu.Unlock()
					<-room
					continue
				}
				k = free
			}
		}
		r.write(p[:k])
		p = p[k:]
		ch := r.notify
		r.notify = make(chan struct{})
		r.mu.Unlock()
		close(ch)
	}
	return n, nil
}

// write stores p (r.mu held).
func (r *ring) write(p []byte) {
	size := len(r.buf)
	if len(p) > size {
		r.end += int64(len(p) - size)
		p = p[len(p)-size:]
	}
	for len(p) > 0 {
		at := int(r.end % int64(size))
		c := copy(r.buf[at:], p)
		p = p[c:]
		r.end += int64(c)
	}
}

// pace registers a pacing reader starting at off.
func (r *ring) pace(off int64) *pacer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pacers == nil {
		r.pacers = map[*pacer]struct{}{}
		r.room = make(chan struct{})
	}
	pc := &pacer{off: max(off, r.end-int64(len(r.buf)))}
	r.pacers[pc] = struct{}{}
	return pc
}

// advance records that pc has read up to off.
func (r *ring) advance(pc *pacer, off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pacers[pc]; !ok || off <= pc.off {
		return
	}
	pc.off = off
	r.wakeWriter()
}

// unpace removes a pacing reader.
func (r *ring) unpace(pc *pacer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pacers[pc]; ok {
		delete(r.pacers, pc)
		r.wakeWriter()
	}
}

// wakeWriter wakes a Write waiting for room (r.mu held).
func (r *ring) wakeWriter() {
	close(r.room)
	r.room = make(chan struct{})
}

// Close marks the end of the stream and wakes every waiter.
func (r *ring) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	ch := r.notify
	r.notify = make(chan struct{})
	r.mu.Unlock()
	close(ch)
}

// ReadFrom copies up to limit bytes starting at offset off into a new slice.
// start is the offset of the first byte returned: larger than off when the
// bytes before it were overwritten (the caller reports the gap). eof is true
// when the ring is closed and nothing lies at or after start.
func (r *ring) ReadFrom(off int64, limit int) (data []byte, start int64, eof bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := int64(len(r.buf))
	oldest := max(r.start, r.end-size)
	start = off
	if start < oldest {
		start = oldest
	}
	if start > r.end {
		start = r.end
	}
	n := r.end - start
	n = min(n, int64(limit))
	data = make([]byte, n)
	for copied := int64(0); copied < n; {
		at := (start + copied) % size
		c := copy(data[copied:], r.buf[at:min(size, at+n-copied)])
		copied += int64(c)
	}
	return data, start, r.closed && start+n >= r.end
}

// Wait returns a channel closed at the next write or at Close.
func (r *ring) Wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notify
}

// End returns the offset just past the last byte written.
func (r *ring) End() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}

// Snapshot returns what the ring holds and the offset just past it, read
// at one instant.
func (r *ring) Snapshot() ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := int64(len(r.buf))
	oldest := max(r.start, r.end-size)
	data := make([]byte, r.end-oldest)
	for i := range data {
		data[i] = r.buf[(oldest+int64(i))%size]
	}
	return data, r.end
}

// ringFrom is a closed ring holding data as the last bytes of a stream
// that ended at offset end (a terminal's replay, read back from disk).
func ringFrom(data []byte, end int64) *ring {
	end = max(end, int64(len(data)))
	r := newRing(max(len(data), 1))
	r.end, r.start = end, end-int64(len(data))
	for i, b := range data {
		r.buf[(r.start+int64(i))%int64(len(r.buf))] = b
	}
	r.closed = true
	return r
}
