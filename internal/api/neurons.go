package api

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, cortex.Health{Status: "ok", Version: s.opts.Version,
		Modes: s.opts.Set.Modes(), UptimeMs: time.Since(s.started).Milliseconds()})
}

// NeuronOf is the API's JSON shape of a neuron (GET /v1/neurons/{id});
// /ctx serves the same as a neuron's state.json (ctxsource.Render).
func NeuronOf(st *sandbox.State) cortex.Neuron {
	n := cortex.Neuron{ID: st.ID, Mode: st.Mode, Status: string(st.Status), PID: st.PID, Workdir: st.Workdir,
		CreatedAt: st.CreatedAt, AgentVersion: st.AgentVersion}
	if st.Owner != nil {
		n.Owner = &cortex.Owner{PID: st.Owner.PID, Command: st.Owner.Command, Since: st.Owner.Since}
	}
	if p := st.Policy; p != nil {
		n.Policy = &cortex.Policy{Network: cortex.Network{Mode: string(p.Network.Mode), Allow: p.Network.Allow},
			Limits: cortex.Limits(p.Limits), Image: p.Image, NestedUserns: p.NestedUserns, Ctx: p.Ctx, CtxWritable: p.CtxWritable}
		for _, s := range p.Secrets {
			n.Policy.Secrets = append(n.Policy.Secrets, cortex.SecretPolicy{Name: s.Name, Hosts: s.Hosts})
		}
	}
	n.Labels, n.Deadline, n.PausedAt = st.Labels.Clone(), st.Deadline, st.PausedAt
	n.ForkedFrom, n.ForkedAt = st.ForkedFrom, st.ForkedAt
	n.TimeoutMs, n.OnTimeout, n.AutoPauseMs = st.Timeout.Milliseconds(), string(st.OnTimeout), st.AutoPause.Milliseconds()
	if st.Deadline == nil {
		n.TimeoutMs, n.OnTimeout = 0, "" // what the last deadline was set from: nothing to show without one
	}
	return n
}

func (s *Server) listNeurons(w http.ResponseWriter, r *http.Request) {
	sel, err := selectorParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := s.opts.Set.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		Neurons []cortex.Neuron `json:"neurons"`
	}{Neurons: make([]cortex.Neuron, 0, len(all))}
	who := principalOf(r)
	for _, st := range all {
		if sel.Matches(st.Labels) && who.Sees(st.Labels) {
			out.Neurons = append(out.Neurons, NeuronOf(st))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createNeuron(w http.ResponseWriter, r *http.Request) {
	var req cortex.CreateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := req.ID
	if id == "" {
		id = ids.New()
	} else if err := ids.Validate(id); err != nil {
		writeError(w, badRequest("id: %v", err))
		return
	}
	opts := sandbox.CreateOptions{Env: req.Env, Image: req.Image, Limits: sandbox.Limits(req.Limits), NestedUserns: req.NestedUserns,
		Network: sandbox.Network{Allow: req.Network.Allow}}
	var err error
	if opts.Network.Mode, err = sandbox.ParseNetworkMode(req.Network.Mode); err != nil {
		writeError(w, badRequest("network.mode: %v", err))
		return
	}
	if len(req.Network.Allow) > 0 && opts.Network.Mode == sandbox.NetworkDefault {
		opts.Network.Mode = sandbox.NetworkEgress
	}
	for _, sec := range req.Secrets {
		opts.Secrets = append(opts.Secrets, sandbox.Secret{Name: sec.Name, Value: sec.Value, Hosts: sec.Hosts})
	}
	if err := sandbox.AllowSecretHosts(&opts); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case req.BootTimeoutMs < 0:
		writeError(w, badRequest("bootTimeoutMs: %d is negative", req.BootTimeoutMs))
		return
	case req.Limits.MemoryBytes < 0 || req.Limits.Pids < 0 || req.Limits.CPUs < 0 || req.Limits.DiskBytes < 0:
		writeError(w, badRequest("limits: a ceiling cannot be negative"))
		return
	}
	opts.BootTimeout = time.Duration(req.BootTimeoutMs) * time.Millisecond
	if err := lifecycleOptions(&req, &opts); err != nil {
		writeError(w, err)
		return
	}
	if err := s.checkImage(req.Image); err != nil {
		writeError(w, err)
		return
	}
	if err := s.tenantCreate(r, id, &opts); err != nil {
		writeError(w, err)
		return
	}
	release, ok := s.reserveNeurons(w, r, 1)
	if !ok {
		return
	}
	defer release()
	m, why, err := s.opts.Set.Resolve(r.Context(), req.Mode)
	if err != nil {
		writeError(w, err)
		return
	}
	s.forget(id)
	var st *sandbox.State
	if p := s.opts.Pools[m.Mode()]; p != nil {
		var from string
		st, from, err = p.Create(r.Context(), id, opts)
		why = joinReasons(why, from)
	} else {
		st, err = m.Create(r.Context(), id, opts)
	}
	var ar *sandbox.AlreadyRunningError
	if errors.As(err, &ar) && !principalOf(r).Sees(ar.State.Labels) {
		writeError(w, idTaken(id)) // another tenant's, made meanwhile
		return
	}
	if errors.As(err, &ar) {
		writeJSON(w, http.StatusOK, cortex.Created{Neuron: NeuronOf(ar.State), Started: false, ModeReason: why})
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("neuron created", "id", st.ID, "mode", st.Mode, "why", why)
	writeJSON(w, http.StatusCreated, cortex.Created{Neuron: NeuronOf(st), Started: true, ModeReason: why})
}

func (s *Server) getNeuron(w http.ResponseWriter, r *http.Request) {
	_, st, err := s.opts.Set.FindExact(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, NeuronOf(st))
}

func (s *Server) destroyNeuron(w http.ResponseWriter, r *http.Request) {
	wipe, err := boolParam(r, "wipe")
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	m, st, err := s.opts.Set.FindExact(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	s.forget(id)
	if err := m.Destroy(r.Context(), st.ID, sandbox.DestroyOptions{Wipe: wipe}); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("neuron destroyed", "id", st.ID, "wipe", wipe)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) neuronHealth(w http.ResponseWriter, r *http.Request) (neuronCall, error) {
	return func(c *link.Client) (int, any, error) {
		h, err := c.Health(r.Context())
		return http.StatusOK, h, err
	}, nil
}

// boolParam reads an optional boolean query parameter.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("query parameter %s=%q: give true or false", name, v)
	}
	return b, nil
}

// intParam reads an optional integer query parameter (def when absent).
func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("query parameter %s=%q: give a non-negative integer", name, v)
	}
	return n, nil
}

// checkImage allows an image a create names over the API: one Cortex
// built (a directory beneath the home's images/, resolved; a docker tag of
// nsys-cortex-neuron), or one the operator listed (api.images).
func (s *Server) checkImage(image string) error {
	if image == "" || slices.Contains(s.opts.Images, image) {
		return nil
	}
	if strings.HasPrefix(image, "nsys-cortex-neuron:") && !strings.ContainsAny(image, "/ ") {
		return nil
	}
	if filepath.IsAbs(image) {
		images := s.opts.Set.Layout().ImagesDir()
		real, err := filepath.EvalSymlinks(image)
		root, rerr := filepath.EvalSymlinks(images)
		if err == nil && rerr == nil && strings.HasPrefix(real, root+string(filepath.Separator)) {
			return nil
		}
	}
	return cortex.APIError{Code: cortex.CodePolicyDenied, Message: fmt.Sprintf("image %q is neither one Cortex built (under %s, or an nsys-cortex-neuron tag) "+
		"nor one the operator listed (api.images): an API client cannot base a neuron on any directory or image it names", image, s.opts.Set.Layout().ImagesDir())}
}

// joinReasons joins the reasons of a create's mode and of its pool.
func joinReasons(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}
