package agent

import "sync"

// ring keeps the last size bytes written to it, addressed by absolute stream
// offsets: byte k of the stream is at offset k whether or not it is still
// held. Readers wait for growth on the channel Wait returns.
type ring struct {
	mu     sync.Mutex
	buf    []byte
	end    int64 // total bytes ever written
	closed bool
	notify chan struct{} // closed (and replaced) on every write and on Close
}

func newRing(size int) *ring {
	return &ring{buf: make([]byte, size), notify: make(chan struct{})}
}

// Write appends p, overwriting the oldest bytes once the ring is full.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	n := len(p)
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
	ch := r.notify
	r.notify = make(chan struct{})
	r.mu.Unlock()
	close(ch)
	return n, nil
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
	oldest := max(0, r.end-size)
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

// ringFrom is a closed ring holding data as the last bytes of a stream
// that ended at offset end (a terminal's replay, read back from disk).
func ringFrom(data []byte, end int64) *ring {
	r := newRing(max(len(data), 1))
	copy(r.buf, data)
	r.end = max(end, int64(len(data)))
	if n := len(data); n > 0 {
		// Place the bytes where Write would have: byte k at k % size.
		r.buf = make([]byte, n)
		for i := 0; i < n; i++ {
			off := r.end - int64(n) + int64(i)
			r.buf[off%int64(n)] = data[i]
		}
	}
	r.closed = true
	return r
}
