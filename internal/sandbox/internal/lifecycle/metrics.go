package lifecycle

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/disk"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Meter is implemented by runtimes that measure their running neurons
// themselves (a cgroup, a VMM and its guest): CPU, memory, processes, and
// what else they know (OOM kills; egress, -1 where the neuron has none). Without it the lifecycle sums
// /proc over the agent's session. Usage must not wait on the neuron's
// agent when the neuron is paused.
type Meter interface {
	Usage(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) (sandbox.Metrics, error)
}

var _ sandbox.MetricsReader = (*Manager)(nil)

// diskEvery is how long a walk of a neuron's data for its size is reused.
const diskEvery = 10 * time.Second

type diskReading struct {
	at    time.Time
	bytes int64
}

// Metrics measures neuron id now. It reads the host's records only (a
// VM's guest is asked through a quiet request): it never resumes a paused
// neuron and never counts as a request.
func (m *Manager) Metrics(ctx context.Context, id string) (*sandbox.Metrics, error) {
	st, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	met := &sandbox.Metrics{ID: id, At: now.UTC(), Mode: m.rt.Mode(), Status: st.Status, EgressBytes: -1, EgressConnections: -1}
	_, onDisk := m.pausedToDisk(id)
	if onDisk && st.Status == sandbox.StatusPaused {
		met.Source = "paused to disk: nothing runs"
		if !st.CreatedAt.IsZero() {
			met.UptimeSeconds = now.Sub(st.CreatedAt).Seconds()
		}
	} else if st.Status == sandbox.StatusRunning || st.Status == sandbox.StatusPaused {
		var u sandbox.Metrics
		if mt, ok := m.rt.(Meter); ok {
			u, err = mt.Usage(ctx, m.lay, id, st)
		} else {
			u, err = procUsage(id, st), nil
		}
		if err != nil {
			return nil, err
		}
		met.CPUSeconds, met.MemoryBytes, met.MemoryPeakBytes, met.MemoryLimitBytes = u.CPUSeconds, u.MemoryBytes, u.MemoryPeakBytes, u.MemoryLimitBytes
		met.Pids, met.OOMKills, met.Source = u.Pids, u.OOMKills, u.Source
		met.EgressBytes, met.EgressConnections = u.EgressBytes, u.EgressConnections
		if b, c := egressStats(m.lay, st); b >= 0 {
			met.EgressBytes, met.EgressConnections = b, c
		}
		met.GuestMemoryBytes = u.GuestMemoryBytes
		if gm, ok := m.rt.(GuestMeter); ok && st.Status == sandbox.StatusRunning {
			// Not asked while paused: the host never waits on a frozen agent.
			if g, err := m.guestUsage(ctx, st); err == nil {
				gm.GuestUsage(met, g)
			}
		}
		if !st.CreatedAt.IsZero() {
			met.UptimeSeconds = now.Sub(st.CreatedAt).Seconds()
		}
	}
	met.DiskBytes = m.diskBytes(ctx, id)
	return met, nil
}

// diskBytes is what neuron id's data takes on the host's disk: the used
// blocks of its disk of its own, or the allocated blocks of its overlay
// directory's files (host records aside), walked at most every diskEvery.
func (m *Manager) diskBytes(ctx context.Context, id string) int64 {
	if _, ok := disk.Size(m.lay, id); ok {
		if root, err := m.DataRoot(ctx, id); err == nil {
			var sfs syscall.Statfs_t
			if syscall.Statfs(root, &sfs) == nil {
				return int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize
			}
		}
	}
	m.mu.Lock()
	r, ok := m.disks[id]
	m.mu.Unlock()
	if ok && time.Since(r.at) < diskEvery {
		return r.bytes
	}
	var total int64
	root := m.overlay(id)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file gone meanwhile: not counted
		}
		if filepath.Dir(p) == root && store.HostRecord(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += sys.Blocks * 512
			}
		}
		return nil
	})
	m.mu.Lock()
	m.disks[id] = diskReading{at: time.Now(), bytes: total}
	m.mu.Unlock()
	return total
}

// procUsage sums /proc over the agent and the processes of its session
// that carry the neuron's mark: process mode's measure (and any mode's
// without a Meter).
func procUsage(id string, st *sandbox.State) sandbox.Metrics {
	u := sandbox.Metrics{Source: "/proc", EgressBytes: -1, EgressConnections: -1}
	if !store.Alive(st.PID, st.PIDStart) {
		return u
	}
	mark := "NSYS_CORTEX_NEURON=" + id
	for _, p := range store.SessionMembers(st.PID) {
		if p != st.PID && !store.HasEnv(p, mark) {
			continue
		}
		if cpu, rss, ok := store.ProcUsage(p); ok {
			u.Pids++
			u.CPUSeconds += cpu
			u.MemoryBytes += rss
		}
	}
	return u
}
