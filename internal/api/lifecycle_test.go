package api_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
)

func TestLifecycleLabelsAndTimeouts(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	cr, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "lt", Mode: process.Mode, Labels: map[string]string{"team": "a", "run": "1"},
		TimeoutMs: 3_600_000, OnTimeout: "pause", AutoPauseMs: 300_000})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Labels["team"] != "a" || cr.Deadline == nil || time.Until(*cr.Deadline) < 59*time.Minute || cr.TimeoutMs != 3_600_000 ||
		cr.OnTimeout != "pause" || cr.AutoPauseMs != 300_000 {
		t.Fatalf("the create's answer: %+v", cr)
	}
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "other", Mode: process.Mode, Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]string{"team=a": "lt", "team!=a": "other", "team in (a,b)": "lt other", "run": "lt", "!run": "other", "": "lt other"} {
		list, err := d.c.List(ctx, cortex.ListOptions{LabelSelector: sel})
		var got []string
		for _, n := range list {
			got = append(got, n.ID)
		}
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("List(%q) = %v, %v; want %s", sel, got, err, want)
		}
	}
	if _, err := d.c.List(ctx, cortex.ListOptions{LabelSelector: "team in (a"}); !errors.As(err, &cortex.BadRequestError{}) ||
		!strings.Contains(err.Error(), "team in (a") {
		t.Errorf("a bad selector: %v", err)
	}

	n := d.c.Neuron("lt")
	got, err := n.SetLabels(ctx, &cortex.LabelsUpdate{Set: map[string]string{"run": "2", "example.com/owner": "x"}, Remove: []string{"team"}})
	if err != nil || got.Labels["run"] != "2" || got.Labels["example.com/owner"] != "x" || got.Labels["team"] != "" {
		t.Fatalf("SetLabels: %+v %v", got, err)
	}
	got, err = n.SetTimeout(ctx, 10*time.Minute, "")
	if err != nil || got.Deadline == nil || time.Until(*got.Deadline) > 10*time.Minute || got.OnTimeout != "pause" {
		t.Fatalf("SetTimeout 10m: %+v %v", got, err)
	}
	if got, err = n.SetTimeout(ctx, time.Hour, "wipe"); err != nil || got.OnTimeout != "wipe" {
		t.Fatalf("SetTimeout with an action: %+v %v", got, err)
	}
	if got, err = n.SetTimeout(ctx, 0, ""); err != nil || got.Deadline != nil || got.TimeoutMs != 0 {
		t.Fatalf("SetTimeout 0: %+v %v", got, err)
	}
	// Labels outlive a destroy; a deadline is for a running neuron.
	if err := d.c.Destroy(ctx, "lt", false); err != nil {
		t.Fatal(err)
	}
	if got, err := d.c.Get(ctx, "lt"); err != nil || got.Labels["run"] != "2" {
		t.Fatalf("after destroy: %+v %v", got, err)
	}
	if _, err := n.SetTimeout(ctx, time.Minute, ""); !errors.As(err, &cortex.NotRunningError{}) {
		t.Errorf("a timeout of a stopped neuron: %v", err)
	}
	if _, err := d.c.Neuron("nosuch").SetLabels(ctx, &cortex.LabelsUpdate{Set: map[string]string{"a": "b"}}); !errors.As(err, &cortex.NotFoundError{}) {
		t.Errorf("labels of an unknown neuron: %v", err)
	}
}

func TestLifecycleBadInput(t *testing.T) {
	d := newDaemon(t, api.Options{})
	d.create(t, "bad")
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, says               string
	}{
		{"bad label key", "POST", "/v1/neurons", `{"id":"x1","labels":{"-bad":"v"}}`, 400, "BAD_REQUEST", "-bad"},
		{"bad label value", "POST", "/v1/neurons", `{"id":"x1","labels":{"k":"a b"}}`, 400, "BAD_REQUEST", "a b"},
		{"negative timeout", "POST", "/v1/neurons", `{"id":"x1","timeoutMs":-5}`, 400, "BAD_REQUEST", "timeoutMs"},
		{"nonsense on timeout", "POST", "/v1/neurons", `{"id":"x1","timeoutMs":1000,"onTimeout":"explode"}`, 400, "BAD_REQUEST", "explode"},
		{"on timeout without one", "POST", "/v1/neurons", `{"id":"x1","onTimeout":"pause"}`, 400, "BAD_REQUEST", "needs a timeout"},
		{"negative auto-pause", "POST", "/v1/neurons", `{"id":"x1","autoPauseMs":-1}`, 400, "BAD_REQUEST", "autoPauseMs"},
		{"bad selector", "GET", "/v1/neurons?labelSelector=a%20in%20(b", ``, 400, "BAD_REQUEST", "labelSelector"},
		{"no label change", "PATCH", "/v1/neurons/bad/labels", `{}`, 400, "BAD_REQUEST", "set"},
		{"bad label to set", "PATCH", "/v1/neurons/bad/labels", `{"set":{"a/b/c":"v"}}`, 400, "BAD_REQUEST", "a/b/c"},
		{"set and removed", "PATCH", "/v1/neurons/bad/labels", `{"set":{"a":"v"},"remove":["a"]}`, 400, "BAD_REQUEST", "both"},
		{"labels of an unknown neuron", "PATCH", "/v1/neurons/nosuch/labels", `{"set":{"a":"v"}}`, 404, "NOT_FOUND", "nosuch"},
		{"no timeoutMs", "POST", "/v1/neurons/bad/timeout", `{}`, 400, "BAD_REQUEST", "timeoutMs"},
		{"negative timeoutMs", "POST", "/v1/neurons/bad/timeout", `{"timeoutMs":-1}`, 400, "BAD_REQUEST", "negative"},
		{"bad onTimeout", "POST", "/v1/neurons/bad/timeout", `{"timeoutMs":1000,"onTimeout":"never"}`, 400, "BAD_REQUEST", "never"},
		{"onTimeout with a clear", "POST", "/v1/neurons/bad/timeout", `{"timeoutMs":0,"onTimeout":"stop"}`, 400, "BAD_REQUEST", "needs a deadline"},
		{"timeout of an unknown neuron", "POST", "/v1/neurons/nosuch/timeout", `{"timeoutMs":1000}`, 404, "NOT_FOUND", "nosuch"},
		{"pause to disk in process mode", "POST", "/v1/neurons/bad/pause", `{"toDisk":true}`, 501, "UNSUPPORTED", "to-disk"},
		{"pause with no body", "POST", "/v1/neurons/bad/pause", ``, 400, "BAD_REQUEST", "no JSON body"},
		{"pause of an unknown neuron", "POST", "/v1/neurons/nosuch/pause", `{}`, 404, "NOT_FOUND", "nosuch"},
		{"resume of a running neuron", "POST", "/v1/neurons/bad/resume", `{}`, 409, "EXISTS", "not paused"},
		{"metrics of an unknown neuron", "GET", "/v1/neurons/nosuch/metrics", ``, 404, "NOT_FOUND", "nosuch"},
		{"events since nonsense", "GET", "/v1/events?since=yesterday", ``, 400, "BAD_REQUEST", "yesterday"},
		{"events until nonsense", "GET", "/v1/events?until=-5m", ``, 400, "BAD_REQUEST", "-5m"},
		{"events with a bad selector", "GET", "/v1/events?labelSelector=!", ``, 400, "BAD_REQUEST", "labelSelector"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := raw(t, d, c.method, c.path, c.body)
			if status != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) || !strings.Contains(body, c.says) {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
	// Nothing was created or changed by the refusals.
	list, err := d.c.List(context.Background())
	if err != nil || len(list) != 1 || len(list[0].Labels) != 0 || list[0].Deadline != nil || list[0].Status != "running" {
		t.Fatalf("after the bad requests: %+v %v", list, err)
	}
}

func TestPauseResumeAndMetrics(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	n := d.create(t, "pz")
	m, err := n.Metrics(ctx)
	if err != nil || m.ID != "pz" || m.Status != "running" || m.MemoryBytes <= 0 || m.Pids < 1 || m.UptimeSeconds <= 0 ||
		m.EgressBytes != -1 || m.Mode != process.Mode {
		t.Fatalf("metrics of a running neuron: %+v %v", m, err)
	}
	got, err := n.Pause(ctx, nil)
	if err != nil || got.Status != "paused" || got.PausedAt == nil {
		t.Fatalf("Pause: %+v %v", got, err)
	}
	if _, err := n.Pause(ctx, nil); !errors.As(err, &cortex.ExistsError{}) || !strings.Contains(err.Error(), "already paused") {
		t.Errorf("a second pause: %v", err)
	}
	// Reading does not resume it: the neuron, its metrics, its health.
	if got, err := d.c.Get(ctx, "pz"); err != nil || got.Status != "paused" {
		t.Fatalf("Get of a paused neuron: %+v %v", got, err)
	}
	if m, err := n.Metrics(ctx); err != nil || m.Status != "paused" {
		t.Fatalf("metrics of a paused neuron: %+v %v", m, err)
	}
	if _, err := n.Health(ctx); !errors.As(err, &cortex.NotRunningError{}) || !strings.Contains(err.Error(), "paused") {
		t.Errorf("health of a paused neuron: %v", err)
	}
	if status, body := raw(t, d, "GET", "/metrics", ""); status != 200 || !strings.Contains(body, `cortex_neuron_paused{neuron="pz"} 1`) ||
		!strings.Contains(body, `cortex_neurons{mode="process",status="paused"} 1`) {
		t.Errorf("/metrics of a paused neuron: %d\n%s", status, grepLines(body, "cortex_neuron"))
	}
	if got, err := d.c.Get(ctx, "pz"); err != nil || got.Status != "paused" {
		t.Fatalf("after the reads: %+v %v", got, err)
	}
	// A request resumes it.
	res, err := n.Exec(ctx, &cortex.ExecRequest{Command: cortex.Command{Argv: []string{"echo", "awake"}}})
	if err != nil || res.Stdout != "awake\n" {
		t.Fatalf("exec in a paused neuron: %+v %v", res, err)
	}
	if got, err := d.c.Get(ctx, "pz"); err != nil || got.Status != "running" {
		t.Fatalf("after the exec: %+v %v", got, err)
	}
	if _, err := n.Pause(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := n.Resume(ctx); err != nil || got.Status != "running" || got.PausedAt != nil {
		t.Fatalf("Resume: %+v %v", got, err)
	}
	if _, err := n.Resume(ctx); !errors.As(err, &cortex.ExistsError{}) {
		t.Errorf("resume of a running neuron: %v", err)
	}
	if err := d.c.Destroy(ctx, "pz", false); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Pause(ctx, nil); !errors.As(err, &cortex.NotRunningError{}) {
		t.Errorf("pause of a stopped neuron: %v", err)
	}
	if m, err := n.Metrics(ctx); err != nil || m.Status != "stopped" || m.DiskBytes <= 0 {
		t.Errorf("metrics of a stopped neuron: %+v %v", m, err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// One series set per neuron on /metrics, gone once it is wiped.
func TestPerNeuronSeries(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "ser", Mode: process.Mode, TimeoutMs: 3_600_000}); err != nil {
		t.Fatal(err)
	}
	_, body := raw(t, d, "GET", "/metrics", "")
	for _, want := range []string{`cortex_neuron_cpu_seconds_total{neuron="ser"}`, `cortex_neuron_memory_bytes{neuron="ser"}`,
		`cortex_neuron_pids{neuron="ser"}`, `cortex_neuron_disk_bytes{neuron="ser"}`, `cortex_neuron_paused{neuron="ser"} 0`,
		`cortex_neuron_deadline_seconds{neuron="ser"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "cortex_neuron"))
		}
	}
	if err := d.c.Destroy(ctx, "ser", true); err != nil {
		t.Fatal(err)
	}
	if _, body := raw(t, d, "GET", "/metrics", ""); strings.Contains(body, `neuron="ser"`) {
		t.Errorf("a wiped neuron's series are still there:\n%s", grepLines(body, `neuron="ser"`))
	}
}

// collect reads the iterator's events in the background until ctx ends.
func collect(ctx context.Context, c *cortex.Client, o cortex.EventsOptions) (<-chan cortex.NeuronEvent, <-chan error) {
	evs, errs := make(chan cortex.NeuronEvent, 256), make(chan error, 1)
	go func() {
		defer close(evs)
		for ev, err := range c.Events(ctx, o) {
			if err != nil {
				errs <- err
				return
			}
			evs <- ev
		}
	}()
	return evs, errs
}

// next returns the next event of the kind, failing after a while.
func next(t *testing.T, evs <-chan cortex.NeuronEvent, typ, neuron string) cortex.NeuronEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("the stream ended before %s %s", typ, neuron)
			}
			if ev.Type == typ && ev.Neuron == neuron {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event of %s", typ, neuron)
		}
	}
}

func TestEvents(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Since the start: a stream that begins after the first event still
	// has it.
	start := time.Now()
	all, _ := collect(ctx, d.c, cortex.EventsOptions{Since: start})
	teamA, _ := collect(ctx, d.c, cortex.EventsOptions{Since: start, LabelSelector: "team=a"})
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "ev", Mode: process.Mode, Labels: map[string]string{"team": "a"}}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, all, "created", "ev")
	if ev.Principal != "api" || ev.Labels["team"] != "a" || ev.Mode != process.Mode || ev.Time.Before(start.Add(-time.Second)) {
		t.Errorf("the created event: %+v", ev)
	}
	next(t, all, "started", "ev")
	next(t, teamA, "started", "ev")
	if _, err := d.c.Neuron("ev").Pause(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, all, "paused", "ev"); ev.Reason != "requested" || ev.Principal != "api" {
		t.Errorf("the paused event: %+v", ev)
	}
	// Another process records an event (a CLI, the keeper): seen too.
	if err := events.Open(d.lay).Append(events.Event{Type: events.Stopped, Neuron: "elsewhere", Labels: map[string]string{"team": "a"},
		Principal: "operator"}); err != nil {
		t.Fatal(err)
	}
	next(t, all, "stopped", "elsewhere")
	next(t, teamA, "stopped", "elsewhere")
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "evb", Mode: process.Mode, Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	next(t, all, "started", "evb")
	// The recorded past, up to now: a stream that ends by itself.
	var past []string
	for ev, err := range d.c.Events(ctx, cortex.EventsOptions{Since: start.Add(-time.Second), Until: time.Now(), LabelSelector: "team=b"}) {
		if err != nil {
			t.Fatal(err)
		}
		past = append(past, ev.Type+" "+ev.Neuron)
	}
	if strings.Join(past, ",") != "created evb,started evb" {
		t.Errorf("the past of team b: %v", past)
	}
	select {
	case ev := <-teamA:
		if ev.Neuron == "evb" {
			t.Errorf("the team=a stream has an event of team b: %+v", ev)
		}
	default:
	}
}

// Streams that follow end with an UNAVAILABLE error when the daemon stops,
// and their handlers return, so Serve does.
func TestEventsEndWithTheDaemon(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{Set: d.set, Token: "ev-token"})
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln, 5*time.Second) }()
	c, _ := cortex.New("http://"+ln.Addr().String(), cortex.WithToken("ev-token"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, errs := collect(ctx, c, cortex.EventsOptions{})
	gone, goneErrs := collect(ctx, c, cortex.EventsOptions{})
	if _, err := c.Create(ctx, &cortex.CreateRequest{ID: "ew", Mode: process.Mode}); err != nil {
		t.Fatal(err)
	}
	next(t, evs, "started", "ew")
	next(t, gone, "started", "ew")
	stop()
	select {
	case err := <-errs:
		if !errors.As(err, &cortex.APIError{}) || !strings.Contains(err.Error(), "shutting down") {
			t.Errorf("the stream's end: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream did not end when the daemon stopped")
	}
	if err := <-goneErrs; err == nil {
		t.Error("the second stream ended without an error")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with event streams open")
	}
}

// POST .../fork makes running forks with the source's files and labels,
// named id-1 ... with a count; an id with data is refused, nothing made.
func TestFork(t *testing.T) {
	d := newDaemon(t, api.Options{})
	ctx := context.Background()
	if _, err := d.c.Create(ctx, &cortex.CreateRequest{ID: "fsrc", Mode: process.Mode, Labels: map[string]string{"team": "a"}}); err != nil {
		t.Fatal(err)
	}
	src := d.c.Neuron("fsrc")
	if _, err := src.WriteFile(ctx, "note.txt", strings.NewReader("forked"), nil); err != nil {
		t.Fatal(err)
	}
	forks, err := src.Fork(ctx, &cortex.NeuronForkRequest{ID: "fk", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 || forks[0].ID != "fk-1" || forks[1].ID != "fk-2" {
		t.Fatalf("forks: %+v", forks)
	}
	for _, f := range forks {
		if f.Status != "running" || f.ForkedFrom != "fsrc" || f.ForkedAt == nil || f.Labels["team"] != "a" {
			t.Fatalf("fork %+v", f)
		}
		b, err := d.c.Neuron(f.ID).ReadFile(ctx, "note.txt")
		if err != nil || string(b) != "forked" {
			t.Fatalf("%s's note.txt: %q %v", f.ID, b, err)
		}
	}
	one, err := src.Fork(ctx, &cortex.NeuronForkRequest{ID: "relabelled", Labels: map[string]string{"team": "b"}})
	if err != nil || len(one) != 1 || one[0].Labels["team"] != "b" {
		t.Fatalf("a fork with labels: %+v %v", one, err)
	}
	if _, err := src.Fork(ctx, &cortex.NeuronForkRequest{ID: "fk-1"}); !errors.As(err, &cortex.ExistsError{}) {
		t.Errorf("a fork onto a neuron: %v, want EXISTS", err)
	}
	for _, bad := range []cortex.NeuronForkRequest{{}, {ID: "../x"}, {ID: "x", Count: -1}, {ID: "x", Count: 101}, {ID: "x", Labels: map[string]string{"-": "a"}}} {
		if _, err := src.Fork(ctx, &bad); !errors.As(err, &cortex.BadRequestError{}) {
			t.Errorf("fork %+v: %v, want BAD_REQUEST", bad, err)
		}
	}
	if _, err := d.c.Neuron("nosuch").Fork(ctx, &cortex.NeuronForkRequest{ID: "y"}); !errors.As(err, &cortex.NotFoundError{}) {
		t.Errorf("a fork of no neuron: %v", err)
	}
	if _, err := d.c.Get(ctx, "x"); !errors.As(err, &cortex.NotFoundError{}) {
		t.Errorf("a refused fork left a neuron: %v", err)
	}
}
