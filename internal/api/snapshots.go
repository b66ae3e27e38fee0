package api

import (
	"context"
	"errors"
	"net/http"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/tools"
)

// The snapshot routes go through tools.SetNeuron, as the CLI, the tool kit
// and /ctx do: it saves a copy of the overlay's files, or, where the mode
// saves whole neurons (sandbox.Snapshotter: a microVM), the whole VM.

// SnapshotOf is the API's view of a snapshot's record.
func SnapshotOf(s *store.Snapshot) cortex.Snapshot {
	return cortex.Snapshot{Name: s.Name, Neuron: s.Neuron, Created: s.Created, Files: s.Files, Bytes: s.Bytes,
		Mode: s.Mode, Kind: s.Kind()}
}

// snapshotName reads and checks the {name} of a snapshot route.
func snapshotName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := store.CheckSnapshotName(name); err != nil {
		return "", badRequest("%v", err)
	}
	return name, nil
}

// snapshotsOf returns the neuron of the request's id for listing and
// deleting its snapshots: also one that is gone (destroyed with its
// data), whose snapshots outlive it.
func (s *Server) snapshotsOf(r *http.Request) (*tools.SetNeuron, error) {
	id := r.PathValue("id")
	_, st, err := s.opts.Set.FindExact(r.Context(), id)
	if err == nil {
		return tools.NewSetNeuron(s.opts.Set, s.opts.Set.Layout(), st.ID), nil
	}
	if n := tools.LeftSnapshots(s.opts.Set, s.opts.Set.Layout(), id); n != nil && errdefs.IsNotFound(err) {
		return n, nil
	}
	return nil, err
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	n, err := s.snapshotsOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := n.Snapshots(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		Snapshots []cortex.Snapshot `json:"snapshots"`
	}{Snapshots: make([]cortex.Snapshot, 0, len(all))}
	for i := range all {
		out.Snapshots = append(out.Snapshots, SnapshotOf(&all[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req cortex.SnapshotCreate
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Name == "" {
		writeError(w, badRequest(`field "name" is required: the snapshot's name, 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit`))
		return
	}
	if err := store.CheckSnapshotName(req.Name); err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	_, st, err := s.opts.Set.FindExact(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	snap, err := tools.NewSetNeuron(s.opts.Set, s.opts.Set.Layout(), st.ID).CreateSnapshot(r.Context(), req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("snapshot created", "id", st.ID, "name", snap.Name, "kind", snap.Kind(), "bytes", snap.Bytes)
	writeJSON(w, http.StatusCreated, SnapshotOf(snap))
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	// The body is {}: a JSON body, which a web page cannot send cross-site,
	// so a page the operator visits cannot roll a neuron back.
	if err := decodeJSON(w, r, &struct{}{}); err != nil {
		writeError(w, err)
		return
	}
	name, err := snapshotName(r)
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
	if st.Status == sandbox.StatusStopped {
		// The restore starts it: a key's neuron limit counts it.
		release, ok := s.reserveNeurons(w, r, 1)
		if !ok {
			return
		}
		defer release()
	}
	// The restore stops the neuron (or replaces its VM): the cached channel
	// dies with it. Forgotten after too, for a request that cached it
	// meanwhile.
	s.forget(id)
	snap, err := tools.NewSetNeuron(s.opts.Set, s.opts.Set.Layout(), st.ID).RestoreSnapshot(r.Context(), name)
	s.forget(id)
	if errors.Is(err, store.ErrSnapshotMismatch) {
		err = s.mismatch(m, st.ID, name, err)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("snapshot restored", "id", st.ID, "name", snap.Name, "kind", snap.Kind())
	out := cortex.Restored{Snapshot: SnapshotOf(snap), Neuron: cortex.Neuron{ID: st.ID, Mode: st.Mode, Status: string(sandbox.StatusUnknown)}}
	// The state after is read without the request's context: the restore
	// is done, and its answer should say so even to a client about to go.
	if _, now, err := s.opts.Set.FindExact(context.WithoutCancel(r.Context()), st.ID); err == nil {
		out.Neuron = NeuronOf(now)
	}
	writeJSON(w, http.StatusOK, out)
}

// mismatch rewrites a refused restore to name both kinds: the snapshot's,
// and the one neuron id (run by m) restores.
func (s *Server) mismatch(m sandbox.Manager, id, name string, err error) error {
	want := "files"
	if _, whole := m.(sandbox.Snapshotter); whole {
		want = "vm taken by mode " + m.Mode()
	}
	have := "of another kind"
	if snap, rerr := store.ReadSnapshot(s.opts.Set.Layout().SnapshotsDir(id), name); rerr == nil {
		have = "of kind " + snap.Kind()
		if snap.Mode != "" {
			have += " taken by mode " + snap.Mode
		}
	}
	return badRequest("snapshot %q is %s; neuron %s (mode %s) restores only snapshots of kind %s; nothing was changed: %v",
		name, have, id, m.Mode(), want, err)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	name, err := snapshotName(r)
	if err != nil {
		writeError(w, err)
		return
	}
	n, err := s.snapshotsOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := n.RemoveSnapshot(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("snapshot deleted", "id", n.ID(), "name", name)
	w.WriteHeader(http.StatusNoContent)
}
