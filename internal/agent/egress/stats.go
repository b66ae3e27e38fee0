package egress

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// counters are what a Proxy let through.
type counters struct {
	bytes, conns atomic.Int64
}

// Stats returns what the proxy let through since it started.
func (p *Proxy) Stats() boot.EgressStats {
	return boot.EgressStats{Bytes: p.counts.bytes.Load(), Connections: p.counts.conns.Load()}
}

// PublishStats writes the proxy's Stats to f (rewritten whole, from its
// start) whenever they changed, checking every interval, until ctx ends;
// then once more.
func (p *Proxy) PublishStats(ctx context.Context, f *os.File, every time.Duration) {
	last := boot.EgressStats{Bytes: -1}
	write := func() {
		s := p.Stats()
		if s == last {
			return
		}
		b, _ := json.Marshal(s)
		b = append(b, '\n')
		if _, err := f.WriteAt(b, 0); err == nil && f.Truncate(int64(len(b))) == nil {
			last = s
		}
	}
	write()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			write()
			return
		case <-t.C:
			write()
		}
	}
}

// counting adds what passes through it to n.
type counting struct {
	r io.Reader
	n *atomic.Int64
}

func (c counting) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}
