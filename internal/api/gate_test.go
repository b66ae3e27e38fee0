package api_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/gate"
)

// factLog records the gate's facts.
type factLog struct {
	mu    sync.Mutex
	facts []map[string]any
}

func (l *factLog) Record(event string, f map[string]any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if event == "gate" {
		l.facts = append(l.facts, f)
	}
	return nil
}

func (l *factLog) last() map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.facts) == 0 {
		return nil
	}
	return l.facts[len(l.facts)-1]
}

// Every route of the router passes the gate, as the action it declares,
// before its handler runs: the test walks the router's own table, so a
// route added without the gate, or with an action the gate does not know,
// fails here.
func TestEveryRouteGoesThroughTheGate(t *testing.T) {
	log := &factLog{}
	d := newDaemon(t, api.Options{Gate: &gate.Gate{Audit: log, AuditReads: true}})
	routes := d.srv.Routes()
	if len(routes) < 30 {
		t.Fatalf("%d routes", len(routes))
	}
	for _, r := range routes {
		if !gate.Known(r.Action) {
			t.Errorf("%s %s declares the action %q, which the gate does not know", r.Method, r.Pattern, r.Action)
			continue
		}
		path := strings.NewReplacer("{id}", "gtest", "{pid}", "1", "{sid}", "s1", "{name}", "n1").Replace(r.Pattern)
		if r.Pattern == "/v1/events" {
			path += "?until=0s" // the recorded events only: it would follow otherwise
		}
		before := len(log.facts)
		raw(t, d, r.Method, path, `{}`)
		f := log.last()
		if len(log.facts) == before || f["action"] != string(r.Action) || f["principal"] != "api" {
			t.Errorf("%s %s: the gate's last fact is %v; want its action %s asked about", r.Method, r.Pattern, f, r.Action)
		}
		if strings.Contains(r.Pattern, "{id}") && f["neuron"] != "gtest" {
			t.Errorf("%s %s: the gate was not told the neuron: %v", r.Method, r.Pattern, f)
		}
	}
}
