package nsbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Pause and usage (docs/lifecycle.md): from the neuron's cgroups where it
// has them — the freezer (v1 freezer.state, v2 cgroup.freeze) stops every
// process of it, PID 1 and the agent too; the accounting files say what it
// uses. Without cgroups (rootless), its processes are found as PID 1's
// descendants and stopped with SIGSTOP — weaker: one forked while the
// sweep runs may escape it and send the others SIGCONT.

var (
	_ lifecycle.Freezer     = (*runtime)(nil)
	_ lifecycle.Meter       = (*runtime)(nil)
	_ lifecycle.OOMReporter = (*runtime)(nil)
)

// neuronCgroup returns the directory of neuron id's cgroup in ctrl's
// hierarchy ("" for v2), or "" when it has none there.
func neuronCgroup(lay layout.Layout, id, ctrl string) string {
	cg := detectCgroups()
	if cg == nil || cg.dirs[ctrl] == "" {
		return ""
	}
	want := filepath.Join(cg.dirs[ctrl], "nsys-cortex", cgroupName(lay, id))
	var dirs []string
	if store.ReadJSON(filepath.Join(lay.OverlayDir(id), ".cgroups"), &dirs) != nil || !slices.Contains(dirs, want) {
		return ""
	}
	return want
}

// freezer returns how neuron id's cgroup freezes: the file to write, the
// values that freeze and thaw, and the file and value that say it froze.
func freezer(lay layout.Layout, id string) (file, freeze, thaw, doneFile, done string, ok bool) {
	if cg := detectCgroups(); cg != nil && cg.version == 2 {
		if d := neuronCgroup(lay, id, ""); d != "" {
			return filepath.Join(d, "cgroup.freeze"), "1", "0", filepath.Join(d, "cgroup.events"), "frozen 1", true
		}
		return
	}
	if d := neuronCgroup(lay, id, "freezer"); d != "" {
		f := filepath.Join(d, "freezer.state")
		return f, "FROZEN", "THAWED", f, "FROZEN", true
	}
	return
}

// freezeWait bounds the wait for a cgroup to report frozen.
const freezeWait = 10 * time.Second

// Freeze stops every process of neuron id.
func (r *runtime) Freeze(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error {
	file, freeze, _, doneFile, done, ok := freezer(lay, id)
	if !ok {
		return signalTree(st, syscall.SIGSTOP)
	}
	if err := os.WriteFile(file, []byte(freeze), 0); err != nil {
		return fmt.Errorf("freezing its cgroup: %w", err)
	}
	// The kernel freezes the tasks one by one: wait until it says all are.
	deadline := time.Now().Add(freezeWait)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 10*time.Millisecond) {
		b, err := os.ReadFile(doneFile)
		if err == nil && hasLine(string(b), done) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("its cgroup did not freeze within %s (%s: %q)", freezeWait, filepath.Base(doneFile), strings.TrimSpace(string(b)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// Thaw continues what Freeze stopped.
func (r *runtime) Thaw(ctx context.Context, lay layout.Layout, id string, st *sandbox.State) error {
	file, _, thaw, _, _, ok := freezer(lay, id)
	if !ok {
		return signalTree(st, syscall.SIGCONT)
	}
	if err := os.WriteFile(file, []byte(thaw), 0); err != nil {
		return fmt.Errorf("thawing its cgroup: %w", err)
	}
	return nil
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// signalTree sends sig to PID 1 of the neuron st describes and to all its
// descendants, twice (for what forked meanwhile).
func signalTree(st *sandbox.State, sig syscall.Signal) error {
	if !store.Alive(st.PID, st.PIDStart) {
		return &sandbox.NotRunningError{ID: st.ID, Reason: "its PID 1 is gone"}
	}
	for range 2 {
		for _, p := range store.Descendants(st.PID) {
			syscall.Kill(p, sig)
		}
	}
	return nil
}

// Usage reads what neuron id uses from its cgroups, or from /proc over
// PID 1's descendants where it has none.
func (r *runtime) Usage(_ context.Context, lay layout.Layout, id string, st *sandbox.State) (sandbox.Metrics, error) {
	u := sandbox.Metrics{EgressBytes: -1, EgressConnections: -1}
	cg := detectCgroups()
	switch {
	case cg != nil && cg.version == 2 && neuronCgroup(lay, id, "") != "":
		d := neuronCgroup(lay, id, "")
		u.Source = "cgroup v2"
		if us, ok := lifecycle.CgroupKeyed(filepath.Join(d, "cpu.stat"), "usage_usec"); ok {
			u.CPUSeconds = float64(us) / 1e6
		}
		u.MemoryBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.current"))
		u.MemoryPeakBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.peak"))
		u.MemoryLimitBytes, _ = lifecycle.CgroupNumber(filepath.Join(d, "memory.max")) // "max": 0, none
		pids, _ := lifecycle.CgroupNumber(filepath.Join(d, "pids.current"))
		u.Pids = int(pids)
		u.OOMKills, _ = lifecycle.CgroupKeyed(filepath.Join(d, "memory.events"), "oom_kill")
	case cg != nil && neuronCgroup(lay, id, "memory") != "":
		u.Source = "cgroup v1"
		mem := neuronCgroup(lay, id, "memory")
		if d := neuronCgroup(lay, id, "cpuacct"); d != "" {
			ns, _ := lifecycle.CgroupNumber(filepath.Join(d, "cpuacct.usage"))
			u.CPUSeconds = float64(ns) / 1e9
		} else {
			for _, p := range store.Descendants(st.PID) {
				if cpu, _, ok := store.ProcUsage(p); ok {
					u.CPUSeconds += cpu
				}
			}
		}
		u.MemoryBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.usage_in_bytes"))
		u.MemoryPeakBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.max_usage_in_bytes"))
		u.MemoryLimitBytes, _ = lifecycle.CgroupNumber(filepath.Join(mem, "memory.limit_in_bytes"))
		if d := neuronCgroup(lay, id, "pids"); d != "" {
			pids, _ := lifecycle.CgroupNumber(filepath.Join(d, "pids.current"))
			u.Pids = int(pids)
		}
		u.OOMKills, _ = lifecycle.CgroupKeyed(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	default:
		u.Source = "/proc"
		for _, p := range store.Descendants(st.PID) {
			cpu, rss, ok := store.ProcUsage(p)
			if ok {
				u.Pids++
				u.CPUSeconds += cpu
				u.MemoryBytes += rss
			}
		}
	}
	return u, nil
}

// OOMKills counts the processes of neuron id the kernel killed for memory.
func (r *runtime) OOMKills(lay layout.Layout, id string) int64 {
	if d := neuronCgroup(lay, id, ""); d != "" {
		n, _ := lifecycle.CgroupKeyed(filepath.Join(d, "memory.events"), "oom_kill")
		return n
	}
	if d := neuronCgroup(lay, id, "memory"); d != "" {
		n, _ := lifecycle.CgroupKeyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
		return n
	}
	return 0
}
