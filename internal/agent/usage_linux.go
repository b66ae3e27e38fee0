package agent

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// systemUsage reads the system's processes and memory from /proc: in a VM,
// the guest's, which only the agent can tell the host.
func systemUsage() *protocol.SystemUsage {
	u := &protocol.SystemUsage{}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var avail int64
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "MemTotal":
				u.MemTotalBytes = kb << 10
			case "MemAvailable":
				avail = kb << 10
			}
		}
		u.MemUsedBytes = max(u.MemTotalBytes-avail, 0)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if !kernelThread(e.Name()) {
			u.Tasks++
		}
	}
	return u
}

// kernelThread reports whether process pid is a kernel thread: kthreadd
// (pid 2) or one of its children. A process gone meanwhile counts as one,
// so it is not counted.
func kernelThread(pid string) bool {
	if pid == "2" {
		return true
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) < 2 || f[1] == "2"
}
