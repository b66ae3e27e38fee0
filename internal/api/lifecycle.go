package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/events"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The lifecycle routes (docs/lifecycle.md): labels, deadlines, pause and
// resume, metrics, and the event log as a stream. Each acts through the
// manager's optional capability (sandbox.Labeler, Deadliner, Pauser,
// MetricsReader); a mode without it answers UNSUPPORTED, nothing done.

// capability returns the manager of neuron id as the capability T.
func capability[T any](r *http.Request, s *Server, op string) (T, *sandbox.State, error) {
	var zero T
	m, st, err := s.opts.Set.FindExact(r.Context(), r.PathValue("id"))
	if err != nil {
		return zero, nil, err
	}
	c, ok := m.(T)
	if !ok {
		return zero, nil, &sandbox.UnsupportedError{Mode: m.Mode(), Op: op}
	}
	return c, st, nil
}

// lifecycleOptions reads the lifecycle fields of a create into opts.
func lifecycleOptions(req *cortex.CreateRequest, opts *sandbox.CreateOptions) error {
	if req.Labels != nil {
		opts.Labels = labels.Set(req.Labels)
		if err := opts.Labels.Validate(); err != nil {
			return badRequest("labels: %v", err)
		}
		opts.Labels = opts.Labels.Clone()
		if opts.Labels == nil {
			opts.Labels = labels.Set{} // {} clears them: nil would keep them
		}
	}
	switch {
	case req.TimeoutMs < 0:
		return badRequest("timeoutMs: %d is negative; give milliseconds, or leave it out for no deadline", req.TimeoutMs)
	case req.AutoPauseMs < 0:
		return badRequest("autoPauseMs: %d is negative; give milliseconds, or leave it out for no idle rule", req.AutoPauseMs)
	}
	opts.Timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	opts.AutoPause = time.Duration(req.AutoPauseMs) * time.Millisecond
	opts.OnTimeout = sandbox.TimeoutAction(req.OnTimeout)
	if err := opts.CheckLifecycle(); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// selectorParam reads the labelSelector query parameter.
func selectorParam(r *http.Request) (labels.Selector, error) {
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		return labels.Selector{}, badRequest("labelSelector: %v", err)
	}
	return sel, nil
}

func (s *Server) setLabels(w http.ResponseWriter, r *http.Request) {
	var req cortex.LabelsUpdate
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	change, err := labelChange(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := tenantChange(r, change); err != nil {
		writeError(w, err)
		return
	}
	l, st, err := capability[sandbox.Labeler](r, s, "labels")
	if err != nil {
		writeError(w, err)
		return
	}
	now, err := l.SetLabels(r.Context(), st.ID, change)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("labels changed", "id", st.ID, "labels", now.Labels.String())
	writeJSON(w, http.StatusOK, NeuronOf(now))
}

// labelChange checks an update's keys and values, as `nsys-cortex label`
// does, before anything is changed.
func labelChange(u *cortex.LabelsUpdate) (labels.Change, error) {
	if len(u.Set) == 0 && len(u.Remove) == 0 {
		return labels.Change{}, badRequest(`give labels to set ({"set":{"team":"a"}}) or to remove ({"remove":["team"]})`)
	}
	c := labels.Change{Set: labels.Set{}}
	for k, v := range u.Set {
		if err := labels.ValidateKey(k); err != nil {
			return c, badRequest("set: %v", err)
		}
		if err := labels.ValidateValue(v); err != nil {
			return c, badRequest("set: label %s: %v", k, err)
		}
		c.Set[k] = v
	}
	for _, k := range u.Remove {
		if err := labels.ValidateKey(k); err != nil {
			return c, badRequest("remove: %v", err)
		}
		if _, both := c.Set[k]; both {
			return c, badRequest("label %s is both set and removed", k)
		}
		c.Remove = append(c.Remove, k)
	}
	return c, nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	// timeoutMs is required: a body without it must not clear a deadline.
	var req struct {
		TimeoutMs *int64 `json:"timeoutMs"`
		OnTimeout string `json:"onTimeout"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case req.TimeoutMs == nil:
		writeError(w, badRequest(`field "timeoutMs" is required: the new deadline in milliseconds from now, or 0 to clear it`))
		return
	case *req.TimeoutMs < 0:
		writeError(w, badRequest("timeoutMs: %d is negative; give milliseconds from now, or 0 to clear the deadline", *req.TimeoutMs))
		return
	case *req.TimeoutMs == 0 && req.OnTimeout != "":
		writeError(w, badRequest("onTimeout %q needs a deadline: timeoutMs 0 clears it", req.OnTimeout))
		return
	}
	action := sandbox.TimeoutAction(req.OnTimeout)
	if req.OnTimeout != "" {
		if _, err := sandbox.ParseTimeoutAction(req.OnTimeout); err != nil {
			writeError(w, badRequest("onTimeout: %v", err))
			return
		}
	}
	d, st, err := capability[sandbox.Deadliner](r, s, "timeouts")
	if err != nil {
		writeError(w, err)
		return
	}
	now, err := d.SetTimeout(r.Context(), st.ID, time.Duration(*req.TimeoutMs)*time.Millisecond, action)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("timeout set", "id", st.ID, "timeoutMs", *req.TimeoutMs, "onTimeout", now.OnTimeout)
	writeJSON(w, http.StatusOK, NeuronOf(now))
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var req cortex.PauseRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, st, err := capability[sandbox.Pauser](r, s, "pause")
	if err != nil {
		writeError(w, err)
		return
	}
	now, err := p.Pause(r.Context(), st.ID, sandbox.PauseOptions{ToDisk: req.ToDisk, Reason: "requested"})
	if errors.Is(err, sandbox.ErrAlreadyPaused) {
		err = cortex.APIError{Code: cortex.CodeExists, Message: fmt.Sprintf("neuron %s is already paused; nothing was done (POST .../resume continues it)", st.ID)}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("neuron paused", "id", st.ID, "toDisk", req.ToDisk)
	writeJSON(w, http.StatusOK, NeuronOf(now))
}

// fork makes forks of the neuron (POST .../fork): 201 with them, running.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req cortex.NeuronForkRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.ID == "" {
		writeError(w, badRequest("id: the new neuron's id is required"))
		return
	}
	dsts, err := sandbox.ForkIDs(req.ID, req.Count)
	if err != nil {
		writeError(w, err)
		return
	}
	var opts sandbox.ForkOptions
	if req.Labels != nil {
		opts.Labels = labels.Set(req.Labels).Clone()
		if err := opts.Labels.Validate(); err != nil {
			writeError(w, badRequest("labels: %v", err))
			return
		}
		if opts.Labels == nil {
			opts.Labels = labels.Set{} // {} clears them: nil would keep them
		}
		if opts.Labels, err = tenantLabels(r, opts.Labels); err != nil {
			writeError(w, err)
			return
		}
	}
	for _, id := range dsts {
		if s.othersHold(r, id) {
			writeError(w, idTaken(id))
			return
		}
	}
	release, ok := s.reserveNeurons(w, r, len(dsts))
	if !ok {
		return
	}
	defer release()
	f, st, err := capability[sandbox.Forker](r, s, "fork")
	if err != nil {
		writeError(w, err)
		return
	}
	for _, id := range dsts {
		s.forget(id) // a client of an earlier neuron of that id is not the fork's
	}
	made, err := f.Fork(r.Context(), st.ID, dsts, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	out := cortex.NeuronForks{Neurons: make([]cortex.Neuron, len(made))}
	for i, n := range made {
		out.Neurons[i] = NeuronOf(n)
	}
	s.log.Info("neuron forked", "id", st.ID, "forks", dsts)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	// The body is {}: JSON, which a web page cannot send cross-site.
	if err := decodeJSON(w, r, &struct{}{}); err != nil {
		writeError(w, err)
		return
	}
	p, st, err := capability[sandbox.Pauser](r, s, "resume")
	if err != nil {
		writeError(w, err)
		return
	}
	now, err := p.Resume(r.Context(), st.ID)
	if errors.Is(err, sandbox.ErrNotPaused) {
		err = cortex.APIError{Code: cortex.CodeExists, Message: fmt.Sprintf("neuron %s is not paused; nothing was done", st.ID)}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("neuron resumed", "id", st.ID)
	writeJSON(w, http.StatusOK, NeuronOf(now))
}

func (s *Server) neuronMetrics(w http.ResponseWriter, r *http.Request) {
	mr, st, err := capability[sandbox.MetricsReader](r, s, "metrics")
	if err != nil {
		writeError(w, err)
		return
	}
	m, err := mr.Metrics(r.Context(), st.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, MetricsOf(m))
}

// MetricsOf is the API's view of a neuron's metrics.
func MetricsOf(m *sandbox.Metrics) cortex.Metrics {
	return cortex.Metrics{ID: m.ID, At: m.At, Mode: m.Mode, Status: string(m.Status), CPUSeconds: m.CPUSeconds,
		MemoryBytes: m.MemoryBytes, MemoryPeakBytes: m.MemoryPeakBytes, MemoryLimitBytes: m.MemoryLimitBytes, Pids: m.Pids,
		DiskBytes: m.DiskBytes, EgressBytes: m.EgressBytes, EgressConnections: m.EgressConnections,
		UptimeSeconds: m.UptimeSeconds, OOMKills: m.OOMKills, Source: m.Source}
}

// EventOf is the API's view of a recorded event.
func EventOf(ev events.Event) cortex.NeuronEvent {
	return cortex.NeuronEvent{Time: ev.Time, Type: string(ev.Type), Neuron: ev.Neuron, Mode: ev.Mode,
		Labels: ev.Labels.Clone(), Reason: ev.Reason, Principal: ev.Principal}
}

// untilGrace is how long after until a stream waits for events stamped
// before it (an append stamps its time, then writes).
const untilGrace = 250 * time.Millisecond

// events streams the event log as SSE: "event" (NeuronEvent) for each
// event since ?since (default: from now), following the log until the
// client goes, or ?until passes ("end" then); "error" when the daemon
// stops.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	f := events.Filter{Since: now}
	q := r.URL.Query()
	var err error
	if v := q.Get("since"); v != "" {
		if f.Since, err = events.ParseTime(v, now); err != nil {
			writeError(w, badRequest("since: %v", err))
			return
		}
	}
	if v := q.Get("until"); v != "" {
		if f.Until, err = events.ParseTime(v, now); err != nil {
			writeError(w, badRequest("until: %v", err))
			return
		}
	}
	if f.Selector, err = selectorParam(r); err != nil {
		writeError(w, err)
		return
	}
	// A key sees the events of the neurons its selector matches (by the
	// labels each event carries).
	f.Selector = f.Selector.And(principalOf(r).Selector)
	sse, ok := newSSE(w)
	if !ok {
		return
	}
	ctx, done := s.streamContext(r)
	defer done()
	log := events.Open(s.opts.Set.Layout())
	send := func(ev events.Event) error { return sse.event("event", EventOf(ev)) }
	if !f.Until.IsZero() && !f.Until.After(now) {
		var evs []events.Event
		evs, err = log.Read(f)
		for _, ev := range evs {
			if err = send(ev); err != nil {
				break
			}
		}
	} else {
		fctx := ctx
		if !f.Until.IsZero() {
			var cancel context.CancelFunc
			fctx, cancel = context.WithDeadline(ctx, f.Until.Add(untilGrace))
			defer cancel()
		}
		err = log.Follow(fctx, f, send)
	}
	switch {
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); errors.Is(cause, errStopping) {
			sse.fail(cause)
		} // else the client went: nobody to tell
	case err != nil:
		sse.fail(err)
	default:
		sse.event("end", struct{}{})
	}
}
