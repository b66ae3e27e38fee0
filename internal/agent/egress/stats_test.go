package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// TestProxyCountsWhatItLetsThrough: connections made to allowed
// destinations and the bytes both ways are counted; a denied request adds
// nothing; PublishStats writes the figures whole to the file it is given.
func TestProxyCountsWhatItLetsThrough(t *testing.T) {
	rig := newRig(t, []string{"127.0.0.1:ORIGIN"}, nil)
	if s := rig.p.Stats(); s != (boot.EgressStats{}) {
		t.Fatalf("before any request: %+v", s)
	}
	stats := filepath.Join(t.TempDir(), "stats")
	f, err := os.Create(stats)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rig.p.PublishStats(ctx, f, 10*time.Millisecond) }()

	var body int
	for i := range 2 {
		code, b := rig.get(fmt.Sprintf("http://127.0.0.1:%d/n%d", rig.origin.Port(), i))
		if code != 200 {
			t.Fatalf("allowed request: %d %q", code, b)
		}
		body += len(b)
	}
	if line, _ := rig.raw("CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: x\r\n\r\n"); line == "" || line[9:12] != "403" {
		t.Fatalf("denied CONNECT: %q", line)
	}
	// The tunnels' ends are counted as they close.
	var s boot.EgressStats
	waittest.For(t, 10*time.Second, "the proxy to count two connections", func() bool {
		s = rig.p.Stats()
		return s.Connections == 2 && s.Bytes > int64(body)
	})
	// A figure of the file is one the proxy had: it only grows.
	waittest.For(t, 10*time.Second, "the report to say so", func() bool {
		var got boot.EgressStats
		b, _ := os.ReadFile(stats)
		return json.Unmarshal(b, &got) == nil && got == rig.p.Stats()
	})
	cancel()
	<-done
	var last boot.EgressStats
	b, _ := os.ReadFile(stats)
	if err := json.Unmarshal(b, &last); err != nil || last != rig.p.Stats() {
		t.Errorf("the last report %q, the proxy's %+v: %v", b, rig.p.Stats(), err)
	}
}
