package api

import (
	"fmt"
	"net/http"
	"strconv"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// exportNeuron streams the neuron as one archive (GET .../export,
// ?snapshots=true for its snapshots too; docs/export.md). A failure
// after the first byte cuts the answer, so a client never takes a part
// for the whole (and the archive's manifest would tell anyway).
func (s *Server) exportNeuron(w http.ResponseWriter, r *http.Request) {
	snaps := false
	if v := r.URL.Query().Get("snapshots"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badRequest("snapshots=%q: give true or false", v))
			return
		}
		snaps = b
	}
	ex, st, err := capability[sandbox.Exporter](r, s, "export")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, done := s.streamContext(r)
	defer done()
	cw := &committedWriter{w: w, commit: func() {
		w.Header().Set("Content-Type", "application/zstd")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", st.ID+".tar.zst"))
		w.WriteHeader(http.StatusOK)
	}}
	stats, err := ex.Export(ctx, st.ID, cw, sandbox.ExportOptions{Snapshots: snaps})
	if err != nil {
		if !cw.committed {
			writeError(w, err)
			return
		}
		s.log.Warn("export cut", "id", st.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	s.log.Info("neuron exported", "id", st.ID, "files", stats.Files, "bytes", stats.Bytes)
}

// committedWriter sends the status on its first write.
type committedWriter struct {
	w         http.ResponseWriter
	commit    func()
	committed bool
}

func (c *committedWriter) Write(p []byte) (int, error) {
	if !c.committed {
		c.committed = true
		c.commit()
	}
	return c.w.Write(p)
}

// importNeuron makes a neuron, stopped, from the archive in the body
// (POST /v1/neurons/import?id=NEW): 201 with it. The archive is verified
// whole before anything of it is used.
func (s *Server) importNeuron(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	release, ok := s.importSlot(w, r)
	if !ok {
		return
	}
	defer release()
	// An import makes a stopped neuron: nothing counts against a key's
	// neuron limit until it is started. A key's import gets its labels.
	st, err := s.opts.Set.Import(r.Context(), r.Body, id, func(id string, l labels.Set) (labels.Set, error) {
		if s.othersHold(r, id) {
			return nil, idTaken(id) // never whose it is, nor its mode
		}
		return tenantImport(r, l), nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	s.forget(st.ID)
	s.log.Info("neuron imported", "id", st.ID, "mode", st.Mode)
	writeJSON(w, http.StatusCreated, NeuronOf(st))
}

// diffNeuron answers what changed from ?against= (a neuron, ID@SNAP,
// @SNAP; none: the fork parent) to the neuron (docs/diff.md).
func (s *Server) diffNeuron(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := sandbox.ParseDiffAgainst(q.Get("against"))
	if err != nil {
		writeError(w, err)
		return
	}
	if v := q.Get("patch"); v != "" {
		if o.Patch, err = strconv.ParseBool(v); err != nil {
			writeError(w, badRequest("patch=%q: give true or false", v))
			return
		}
	}
	d, st, err := capability[sandbox.Differ](r, s, "diff")
	if err != nil {
		writeError(w, err)
		return
	}
	// The other side is read too: a key sees it, or is told it is not
	// there (the fork parent, when no side is given).
	other := o.Against
	if other == "" && o.Snapshot == "" {
		other = st.ForkedFrom
	}
	if other != "" && other != st.ID && !s.tenantSees(r, other) {
		hiddenNeuron(w, other)
		return
	}
	res, err := d.Diff(r.Context(), st.ID, o)
	if err != nil {
		writeError(w, err)
		return
	}
	out := cortex.Diff{Neuron: res.Neuron, Against: res.Against, Changes: make([]cortex.DiffChange, len(res.Changes)), Truncated: res.Truncated}
	for i, c := range res.Changes {
		out.Changes[i] = cortex.DiffChange(c)
	}
	writeJSON(w, http.StatusOK, out)
}
