package vmguest

import (
	"os"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// VMMUsage is what the host sees of a VM neuron: the CPU time and
// resident memory of its VMM's process tree (every vCPU's work is the
// VMM's; a VMM starts nothing, but what it might start is the neuron's
// too), and the VMM's peak; the ceiling is the guest's memory. What runs
// inside is the guest's to say (FoldGuest).
func VMMUsage(st *sandbox.State) sandbox.Metrics {
	u := sandbox.Metrics{Source: "vmm", EgressBytes: -1, EgressConnections: -1}
	if st.Policy != nil {
		u.MemoryLimitBytes = st.Policy.Limits.MemoryBytes
	}
	if st.PID <= 0 || !store.Alive(st.PID, st.PIDStart) {
		return u
	}
	for _, p := range store.Descendants(st.PID) {
		if cpu, rss, ok := store.ProcUsage(p); ok {
			u.CPUSeconds += cpu
			u.MemoryBytes += rss
		}
	}
	u.MemoryPeakBytes = max(peakRSS(st.PID), u.MemoryBytes)
	return u
}

// FoldGuest adds what the guest's agent says of its system to a VMM's
// figures: its processes, and the memory it uses of its own.
func FoldGuest(u *sandbox.Metrics, g *protocol.SystemUsage) {
	u.Pids, u.GuestMemoryBytes = g.Tasks, g.MemUsedBytes
	u.Source = "vmm+agent"
}

// peakRSS is process pid's peak resident memory (VmHWM), or 0.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
