package lifecycle

import (
	"os"
	"strconv"
	"strings"
)

// The cgroup files the modes read for a neuron's usage (nsbox's own
// cgroups, docker's container's).

// CgroupNumber reads a file that holds one number; "max" and a missing
// file read as not ok.
func CgroupNumber(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// CgroupKeyed reads the value of key from a file of "key value" lines
// (memory.stat, cpu.stat, io.stat's fields).
func CgroupKeyed(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
