package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
)

// Pause and usage (docs/lifecycle.md). A pause is the daemon's own
// `docker pause`: the container's cgroup freezer stops every process of
// it, the agent (its PID 1) too, and the daemon answers once they are.
// Usage is read from the container's cgroup on this host (v1 cpuacct,
// memory, pids; v2 cpu.stat, memory.*, pids.current), found from `docker
// inspect`; where the daemon runs in a VM and its cgroups are out of
// sight, from `docker stats`, which knows no CPU time.

var (
	_ lifecycle.Freezer     = (*runtime)(nil)
	_ lifecycle.Meter       = (*runtime)(nil)
	_ lifecycle.OOMReporter = (*runtime)(nil)
)

// Freeze pauses neuron id's container. runc gives up on a cgroup v1
// freezer that stays FREEZING through its tries (about 200 ms) and thaws
// the container back ("unable to freeze"): on a loaded host, a neuron
// whose processes are busy can outlast them (CI saw it). That one answer
// is tried again, up to freezeTries in all, each a little later.
func (r *runtime) Freeze(ctx context.Context, lay layout.Layout, id string, _ *sandbox.State) error {
	var err error
	for try := range freezeTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(try) * freezeBackoff):
			}
		}
		if _, err = docker(ctx, "pause", ContainerName(lay, id)); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
	}
	return err
}

// freezeTries and freezeBackoff: how often and how far apart Freeze asks
// again after runc could not freeze a container.
var (
	freezeTries   = 4
	freezeBackoff = 250 * time.Millisecond
)

// Thaw unpauses neuron id's container.
func (r *runtime) Thaw(ctx context.Context, lay layout.Layout, id string, _ *sandbox.State) error {
	_, err := docker(ctx, "unpause", ContainerName(lay, id))
	return err
}

// cgroupCache remembers where each container's cgroups are, by container
// name, so a reading costs no daemon call while the directory is there (a
// new container of the name has new ones: its id is in their path).
type cgroupCache struct {
	mu sync.Mutex
	m  map[string]*containerCgroups
}

// cgroups returns where neuron id's container's cgroups are on this host,
// or nil when they are not here (with why).
func (r *runtime) cgroups(ctx context.Context, lay layout.Layout, id string) (*containerCgroups, error) {
	name := ContainerName(lay, id)
	r.cgs.mu.Lock()
	c, ok := r.cgs.m[name]
	r.cgs.mu.Unlock()
	if ok && (exists(c.v2) || exists(c.v1["memory"])) {
		return c, nil
	}
	out, err := docker(ctx, "container", "inspect", "--format", "{{.Id}} {{.State.Pid}} {{json .HostConfig.CgroupParent}}", name)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(out)
	if len(f) < 3 {
		return nil, fmt.Errorf("docker inspect of %s printed %q", name, out)
	}
	parent, _ := strconv.Unquote(f[2])
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts := cgroupMounts(string(mi))
	var cg *containerCgroups
	if pid, _ := strconv.Atoi(f[1]); pid > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil {
			cg = cgroupsOf(string(b), mounts)
		}
	}
	if cg == nil || !cg.found() {
		cg = cgroupsByID(f[0], parent, mounts)
	}
	if !cg.found() {
		return nil, fmt.Errorf("container %s's cgroups are not on this host", name)
	}
	r.cgs.mu.Lock()
	if r.cgs.m == nil {
		r.cgs.m = map[string]*containerCgroups{}
	}
	r.cgs.m[name] = cg
	r.cgs.mu.Unlock()
	return cg, nil
}

// Usage reads what neuron id's container uses from its cgroup, or from
// docker stats where its cgroup is not on this host.
func (r *runtime) Usage(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) (sandbox.Metrics, error) {
	cg, err := r.cgroups(ctx, lay, id)
	if err != nil {
		return r.stats(ctx, lay, id, err)
	}
	return cgroupUsage(cg), nil
}

// cgroupUsage reads a container's use from its cgroups.
func cgroupUsage(cg *containerCgroups) sandbox.Metrics {
	u := sandbox.Metrics{EgressBytes: -1, EgressConnections: -1}
	if d := cg.v2; d != "" {
		u.Source = "cgroup v2"
		if us, ok := lifecycle.CgroupKeyed(filepath.Join(d, "cpu.stat"), "usage_usec"); ok {
			u.CPUSeconds = float64(us) / 1e6
		}
		u.MemoryBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.current"))
		u.MemoryPeakBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.peak"))
		u.MemoryLimitBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.max"))
		pids, _ := lifecycle.CgroupNumber(filepath.Join(d, "pids.current"))
		u.Pids = int(pids)
		u.OOMKills, _ = lifecycle.CgroupKeyed(filepath.Join(d, "memory.events"), "oom_kill")
		return u
	}
	u.Source = "cgroup v1"
	if d := cg.v1["cpuacct"]; d != "" {
		ns, _ := lifecycle.CgroupNumber(filepath.Join(d, "cpuacct.usage"))
		u.CPUSeconds = float64(ns) / 1e9
	}
	mem := cg.v1["memory"]
	u.MemoryBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.usage_in_bytes"))
	u.MemoryPeakBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.max_usage_in_bytes"))
	u.MemoryLimitBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.limit_in_bytes"))
	if d := cg.v1["pids"]; d != "" {
		pids, _ := lifecycle.CgroupNumber(filepath.Join(d, "pids.current"))
		u.Pids = int(pids)
	}
	u.OOMKills, _ = lifecycle.CgroupKeyed(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	return u
}

// stats reads what docker stats says of neuron id's container: memory and
// processes, but no CPU time (it prints a percentage).
func (r *runtime) stats(ctx context.Context, lay layout.Layout, id string, why error) (sandbox.Metrics, error) {
	out, err := docker(ctx, "stats", "--no-stream", "--format", "{{.MemUsage}}|{{.PIDs}}", ContainerName(lay, id))
	if err != nil {
		return sandbox.Metrics{}, fmt.Errorf("usage of %s: %v; and %w", id, why, err)
	}
	return parseStats(out)
}

// parseStats reads docker stats' "used / limit|pids" line.
func parseStats(line string) (sandbox.Metrics, error) {
	u := sandbox.Metrics{Source: "docker stats (no CPU time: the container's cgroup is not on this host)", EgressBytes: -1, EgressConnections: -1}
	mem, pids, ok := strings.Cut(strings.TrimSpace(line), "|")
	used, limit, ok2 := strings.Cut(mem, "/")
	if !ok || !ok2 {
		return u, fmt.Errorf("docker stats printed %q", line)
	}
	var err error
	if u.MemoryBytes, err = parseSize(used); err != nil {
		return u, err
	}
	if u.MemoryLimitBytes, err = parseSize(limit); err != nil {
		return u, err
	}
	if u.Pids, err = strconv.Atoi(strings.TrimSpace(pids)); err != nil {
		return u, fmt.Errorf("docker stats printed pids %q", pids)
	}
	return u, nil
}

// OOMKills counts the processes of neuron id the kernel killed for memory:
// its cgroup's count while it is there, at least one when the daemon says
// its container was killed for memory.
func (r *runtime) OOMKills(lay layout.Layout, id string) int64 {
	var n int64
	ctx := context.Background()
	if cg, err := r.cgroups(ctx, lay, id); err == nil {
		n = cgroupUsage(cg).OOMKills
	}
	out, err := docker(ctx, "container", "inspect", "--format", "{{.State.OOMKilled}}", ContainerName(lay, id))
	if err == nil && strings.TrimSpace(out) == "true" {
		n = max(n, 1)
	}
	return n
}
