package sandboxtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// testMetrics: a running neuron's use as another process reads it — CPU
// that grows with a busy loop, memory, processes, where the figures come
// from — and a paused one's, read without resuming it, whose CPU stands
// still.
func testMetrics(t *testing.T, f *fixture) {
	m := f.manager()
	f.create(m, "met")
	c, err := m.Connect(f.ctx, "met")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ProcStart(f.ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"sh", "-c", "while :; do :; done"}}}); err != nil {
		t.Fatal(err)
	}
	other := f.manager()
	mr, ok := other.(sandbox.MetricsReader)
	if !ok {
		t.Fatalf("%s mode's manager is no sandbox.MetricsReader", m.Mode())
	}
	read := func() *sandbox.Metrics {
		t.Helper()
		met, err := mr.Metrics(f.ctx, "met")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		return met
	}
	var met *sandbox.Metrics
	waittest.For(t, 30*time.Second, "the busy loop's CPU time", func() bool { met = read(); return met.CPUSeconds >= 0.2 })
	// Processes: the agent and the loop at least (a VM's guest counts its
	// own, as its agent says).
	if met.Status != sandbox.StatusRunning || met.MemoryBytes <= 0 || met.Pids < 2 || met.Source == "" || met.UptimeSeconds <= 0 ||
		met.Mode != m.Mode() || met.ID != "met" || met.DiskBytes < 0 {
		t.Fatalf("metrics of a running neuron: %+v", met)
	}
	if met.MemoryLimitBytes > 0 && met.MemoryLimitBytes < met.MemoryBytes/2 {
		t.Errorf("a memory limit below what it uses: %+v", met)
	}
	t.Logf("running: %+v", *met)

	_, err = m.(sandbox.Pauser).Pause(f.ctx, "met", sandbox.PauseOptions{})
	if f.lacks("pause", err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	p0 := read()
	<-time.After(time.Second)
	p1 := read()
	if p1.Status != sandbox.StatusPaused || p1.Source == "" {
		t.Fatalf("metrics of a paused neuron: %+v", p1)
	}
	if grew := p1.CPUSeconds - p0.CPUSeconds; grew > 0.2 {
		t.Errorf("a paused neuron used %.2f s of CPU in a second (%+v, then %+v)", grew, p0, p1)
	}
	t.Logf("paused: %+v", *p1)
	// Reading it neither resumed it nor counted as a request.
	if got := f.get(other, "met"); got.Status != sandbox.StatusPaused {
		t.Fatalf("after its metrics were read: %s", got.Status)
	}
	if _, names := f.eventsOf("met"); strings.Contains(names, "resumed") {
		t.Errorf("reading metrics resumed it: %s", names)
	}
	if err := m.Destroy(f.ctx, "met", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Status != sandbox.StatusStopped || got.CPUSeconds != 0 || got.Pids != 0 {
		t.Errorf("metrics of a stopped neuron: %+v", got)
	}
}

// WantEgressCounted waits until neuron id's metrics count at least conns
// connections through its egress proxy, and some bytes.
func WantEgressCounted(t testing.TB, m sandbox.Manager, id string, conns int64) {
	t.Helper()
	mm, ok := m.(sandbox.MetricsReader)
	if !ok {
		t.Fatalf("%s mode's manager has no metrics", m.Mode())
	}
	var met *sandbox.Metrics
	var err error
	if !waittest.Until(30*time.Second, func() bool {
		met, err = mm.Metrics(context.Background(), id)
		return err == nil && met.EgressConnections >= conns && met.EgressBytes > 0
	}) {
		t.Errorf("egress in %s's metrics: %+v %v, want %d connections or more and some bytes", id, met, err, conns)
	}
}
