package api

import (
	"fmt"
	"net/http"
	"strconv"

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
	st, err := s.opts.Set.Import(r.Context(), r.Body, id)
	if err != nil {
		writeError(w, err)
		return
	}
	s.forget(st.ID)
	s.log.Info("neuron imported", "id", st.ID, "mode", st.Mode)
	writeJSON(w, http.StatusCreated, NeuronOf(st))
}
