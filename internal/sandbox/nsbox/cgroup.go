package nsbox

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// Default ceilings of a neuron that asks for none.
const (
	DefaultMemory = 2 << 30
	DefaultPids   = 1024
)

// ceilings is how a neuron's limits are enforced: a cgroup where one can be
// had, rlimits where not.
type ceilings struct {
	cgroup  *cgroupPlan
	rlimits []boot.Rlimit
}

// ceilings works out how to enforce lim here, refusing what cannot be.
func (r *runtime) ceilings(lim sandbox.Limits) (*ceilings, error) {
	if lim.MemoryBytes < 0 || lim.Pids < 0 || lim.CPUs < 0 {
		return nil, &sandbox.InvalidError{Reason: "resource limits must not be negative"}
	}
	want := lim
	if want.MemoryBytes == 0 {
		want.MemoryBytes = DefaultMemory
	}
	if want.Pids == 0 {
		want.Pids = DefaultPids
	}
	c := &ceilings{}
	if cg := detectCgroups(); cg != nil {
		c.cgroup = &cgroupPlan{support: cg, limits: want}
		return c, nil
	}
	// No cgroup: rlimits. Processes are counted per user namespace, so
	// RLIMIT_NPROC caps this neuron alone. No rlimit caps resident memory
	// (RLIMIT_AS counts reserved address space: the agent itself would not
	// start under a realistic one) or a CPU rate: asked for, they are refused.
	const noCgroup = "no usable cgroup here (v2 with the controller delegated to this user, or v1 as root)"
	if lim.CPUs > 0 {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "a CPU limit", Reason: noCgroup}
	}
	if lim.MemoryBytes > 0 {
		return nil, &sandbox.UnenforceableError{Mode: Mode, Policy: "a memory limit", Reason: noCgroup}
	}
	c.rlimits = append(c.rlimits, boot.Rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(want.Pids)})
	return c, nil
}

// cgroupSupport is a usable cgroup setup: version 2 (one directory with
// the controllers delegated) or version 1 (one directory per controller).
type cgroupSupport struct {
	version int
	// dirs maps a controller to the directory (this process's own cgroup
	// in that hierarchy) under which neurons' cgroups are made.
	dirs map[string]string
}

// detectCgroups finds cgroups this process may create children in, with at
// least the memory and pids controllers. Cached per process.
var detectCgroups = sync.OnceValue(func() *cgroupSupport {
	own := ownCgroups()
	if v2 := detectV2(own); v2 != nil {
		return v2
	}
	return detectV1(own)
})

// ownCgroups reads /proc/self/cgroup: controller (or "" for v2) -> path.
func ownCgroups() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			out[ctrl] = parts[2]
		}
	}
	return out
}

// cgroupMounts maps each mounted cgroup hierarchy to its mount point: v1
// controllers by name, v2 as "".
func cgroupMounts() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fld := range fields {
			if fld == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+4 || len(fields) < 5 {
			continue
		}
		fstype, mnt := fields[sep+1], fields[4]
		switch fstype {
		case "cgroup2":
			out[""] = mnt
		case "cgroup":
			for _, opt := range strings.Split(fields[sep+3], ",") {
				out[opt] = mnt
			}
		}
	}
	return out
}

func detectV2(own map[string]string) *cgroupSupport {
	mnt, ok := cgroupMounts()[""]
	path, ok2 := own[""]
	if !ok || !ok2 {
		return nil
	}
	dir := filepath.Join(mnt, path)
	// Only a delegated cgroup whose subtree already has memory and pids
	// enabled can hold neurons (the no-internal-processes rule forbids
	// enabling them where this process itself lives).
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return nil
	}
	ctrls := strings.Fields(string(b))
	if !contains(ctrls, "memory") || !contains(ctrls, "pids") || !writableDir(dir) {
		return nil
	}
	return &cgroupSupport{version: 2, dirs: map[string]string{"": dir}}
}

func detectV1(own map[string]string) *cgroupSupport {
	mounts := cgroupMounts()
	s := &cgroupSupport{version: 1, dirs: map[string]string{}}
	// memory and pids are needed; cpu (a CPU limit), cpuacct (usage) and
	// freezer (pause) are used where they are.
	for _, ctrl := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		mnt, ok := mounts[ctrl]
		path, ok2 := own[ctrl]
		if !ok || !ok2 {
			continue
		}
		dir := filepath.Join(mnt, path)
		if writableDir(dir) {
			s.dirs[ctrl] = dir
		}
	}
	if s.dirs["memory"] == "" || s.dirs["pids"] == "" {
		return nil
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writableDir reports whether a child directory can be made in dir.
func writableDir(dir string) bool {
	probe := filepath.Join(dir, fmt.Sprintf("nsys-cortex-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return false
	}
	os.Remove(probe)
	return true
}

func (s *cgroupSupport) describe() string {
	if s.version == 2 {
		return "cgroup v2 at " + s.dirs[""]
	}
	var parts []string
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if d := s.dirs[c]; d != "" {
			parts = append(parts, c)
		}
	}
	return "cgroup v1 (" + strings.Join(parts, ", ") + ")"
}

// cgroupPlan is the cgroup a neuron gets.
type cgroupPlan struct {
	support *cgroupSupport
	limits  sandbox.Limits
}

// create makes the neuron's cgroups with their limits, moves pid in, and
// records where they are (any host process may later remove them).
func (p *cgroupPlan) create(lay layout.Layout, id string, pid int) error {
	var made []string
	fail := func(err error) error {
		for _, d := range made {
			os.Remove(d)
		}
		return fmt.Errorf("resource limits: %w", err)
	}
	type setting struct{ file, value string }
	perCtrl := map[string][]setting{}
	memLimit := strconv.FormatInt(p.limits.MemoryBytes, 10)
	pids := strconv.Itoa(p.limits.Pids)
	if p.support.version == 2 {
		s := []setting{{"memory.max", memLimit}, {"memory.swap.max", "0"}, {"pids.max", pids}}
		if p.limits.CPUs > 0 {
			s = append(s, setting{"cpu.max", fmt.Sprintf("%d 100000", int(p.limits.CPUs*100000))})
		}
		perCtrl[""] = s
	} else {
		perCtrl["memory"] = []setting{{"memory.limit_in_bytes", memLimit}, {"memory.memsw.limit_in_bytes", memLimit}}
		perCtrl["pids"] = []setting{{"pids.max", pids}}
		// No settings: their accounting and freezing, in hierarchies of
		// their own (or mounted with one above, which makes the directory).
		for _, ctrl := range []string{"cpuacct", "freezer"} {
			if d := p.support.dirs[ctrl]; d != "" && !slices.ContainsFunc(slices.Collect(maps.Keys(perCtrl)), func(c string) bool { return p.support.dirs[c] == d }) {
				perCtrl[ctrl] = nil
			}
		}
		if p.limits.CPUs > 0 {
			if p.support.dirs["cpu"] == "" {
				return fail(errors.New("a CPU limit needs the cpu controller, which is not available here"))
			}
			perCtrl["cpu"] = []setting{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", strconv.Itoa(int(p.limits.CPUs * 100000))}}
		}
	}
	for ctrl, settings := range perCtrl {
		dir := filepath.Join(p.support.dirs[ctrl], "nsys-cortex", cgroupName(lay, id))
		os.Remove(dir) // a leftover of a neuron that died uncleanly
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
		made = append(made, dir)
		for _, st := range settings {
			err := os.WriteFile(filepath.Join(dir, st.file), []byte(st.value), 0o644)
			if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.Contains(st.file, "swap")) {
				return fail(fmt.Errorf("%s = %s: %w", st.file, st.value, err))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fail(fmt.Errorf("moving the sandbox into %s: %w", dir, err))
		}
	}
	return store.WriteJSON(filepath.Join(lay.OverlayDir(id), ".cgroups"), made, 0o600)
}

// prime takes the kernel's cgroup migration lock once, by moving this
// process into the cgroup it is already in. Moving a process between
// cgroups takes a lock whose writer waits for an RCU grace period, 5-8 ms
// here and most of a neuron's create; for a while after, further moves
// skip that wait. Priming while the host prepares the neuron (its overlay,
// state, channel and clone) makes the neuron's own move cost ~0.2 ms. The
// move changes nothing, and a failure (a v2 cgroup that holds children
// refuses processes) only loses the head start.
func (s *cgroupSupport) prime() {
	dir := s.dirs["memory"]
	if s.version == 2 {
		dir = s.dirs[""]
	}
	if dir != "" {
		os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
}

// cgroupName names a neuron's cgroup: its id, and its home's tag
// (layout.Tag), so that neurons of the same id under two homes (two users,
// two test runs) never share ceilings.
func cgroupName(lay layout.Layout, id string) string {
	return id + "@" + lay.Tag()
}

// removeCgroups removes a neuron's cgroups once nothing runs in them.
func removeCgroups(lay layout.Layout, id string) {
	f := filepath.Join(lay.OverlayDir(id), ".cgroups")
	var dirs []string
	if store.ReadJSON(f, &dirs) != nil {
		return
	}
	left := false
	for _, d := range dirs {
		// Whatever is still in the neuron's cgroup is the neuron's (a
		// process caught in a request to the host, say, as a stop through
		// /ctx is): it is killed, and the kernel tears the pid namespace
		// down asynchronously, so the cgroup is waited for until it empties
		// (a busy one cannot be removed).
		killCgroup(d)
		removed := false
		for pause := time.Millisecond; pause < 4*time.Second; pause *= 2 {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				removed = true
				break
			}
			killCgroup(d)
			time.Sleep(pause)
		}
		left = left || !removed
	}
	if !left {
		os.Remove(f) // kept otherwise: the next create or wipe tries again
	}
}

// killCgroup kills every process in cgroup directory d: with cgroup.kill
// where the hierarchy has it (v2), else each pid of cgroup.procs.
func killCgroup(d string) {
	if err := os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func waitTick() { time.Sleep(10 * time.Millisecond) }
