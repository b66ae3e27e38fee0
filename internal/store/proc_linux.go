package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcStart returns the start time of process pid (clock ticks since boot)
// and whether it is alive; a zombie counts as dead.
func ProcStart(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces and parens: parse after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3); the start time is field 22.
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return 0, false
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return start, true
}

// Alive reports whether pid is alive and is the process that started at start
// (so a pid reused by another process does not count).
func Alive(pid int, start uint64) bool {
	s, ok := ProcStart(pid)
	return ok && (start == 0 || s == start)
}

// Cmdline returns the argv of process pid.
func Cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// ProcUID returns the real uid of process pid, or -1.
func ProcUID(pid int) int {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if fs := strings.Fields(rest); len(fs) > 0 {
				if u, err := strconv.Atoi(fs[0]); err == nil {
					return u
				}
			}
			return -1
		}
	}
	return -1
}

// FirstChild returns the lowest-numbered child of pid, or 0. Children are
// listed per thread of the parent (the thread that forked them), and a Go
// parent forks from any of its threads: every thread's list is read.
func FirstChild(pid int) int {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0
	}
	lowest := 0
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && (lowest == 0 || c < lowest) {
				lowest = c
			}
		}
	}
	return lowest
}

// AgentProcess is a cortex-agent process found in /proc.
type AgentProcess struct {
	PID        int
	ID         string
	ChannelDir string
}

// FoundProcess is a live process FindProcesses found, with what its
// match made of its argv.
type FoundProcess[T any] struct {
	PID int
	Of  T
}

// FindProcesses reads the argv of every process of this host and returns
// the live ones (zombies are not) that match accepts, with what it made of
// each.
func FindProcesses[T any](match func(argv []string) (T, bool)) []FoundProcess[T] {
	entries, _ := os.ReadDir("/proc")
	var out []FoundProcess[T]
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		argv := Cmdline(pid)
		if len(argv) == 0 {
			continue
		}
		if v, ok := match(argv); ok {
			if _, alive := ProcStart(pid); alive {
				out = append(out, FoundProcess[T]{PID: pid, Of: v})
			}
		}
	}
	return out
}

// FindAgents lists running cortex-agent processes whose channel directory
// lies under socketsDir: the last resort when a state file is lost.
func FindAgents(socketsDir string) []AgentProcess {
	found := FindProcesses(func(argv []string) (AgentProcess, bool) {
		if !strings.HasPrefix(filepath.Base(argv[0]), "cortex-agent") {
			return AgentProcess{}, false
		}
		ap := AgentProcess{ID: flagValue(argv, "id"), ChannelDir: flagValue(argv, "channel-dir")}
		return ap, ap.ID != "" && ap.ChannelDir != "" && strings.HasPrefix(ap.ChannelDir, socketsDir+string(filepath.Separator))
	})
	out := make([]AgentProcess, 0, len(found))
	for _, f := range found {
		f.Of.PID = f.PID
		out = append(out, f.Of)
	}
	return out
}

// flagValue finds -name VALUE, --name VALUE or --name=VALUE in argv.
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		for _, p := range []string{"-" + name, "--" + name} {
			if a == p && i+1 < len(argv) {
				return argv[i+1]
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
		}
	}
	return ""
}

// SessionMembers lists the live processes of session sid.
func SessionMembers(sid int) []int {
	var out []int
	sids := strconv.Itoa(sid)
	scanStats(func(pid int, f []string) {
		// After the command name: state, ppid, pgrp, session, ...
		if len(f) > 3 && f[0] != "Z" && f[3] == sids {
			out = append(out, pid)
		}
	})
	return out
}

// scanStats calls fn with each process's pid and the fields of its
// /proc/<pid>/stat after the command name (state, ppid, pgrp, ...).
func scanStats(fn func(pid int, fields []string)) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			fn(pid, strings.Fields(string(b[i+1:])))
		}
	}
}

// HasEnv reports whether process pid has the KEY=VALUE entry kv in its
// environment (as it was when the process started).
func HasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range bytes.Split(b, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

// ProcUsage reads a process's CPU time in seconds — its own and that of
// the children it reaped, so a sum over the live processes of a tree
// counts the work of those gone too — and its resident bytes.
func ProcUsage(pid int) (cpu float64, rss int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	// From the state (field 3): utime 14, stime 15, cutime 16, cstime 17,
	// rss 24; CPU times in USER_HZ, 100 on every Linux Cortex runs on.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return 0, 0, false
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks += v
	}
	pages, err := strconv.ParseInt(f[21], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return float64(ticks) / 100, pages * int64(os.Getpagesize()), true
}

// Descendants returns pid and every process below it, from the kernel's
// lists of each thread's children (/proc/<pid>/task/<tid>/children), or
// from a scan of /proc where the kernel keeps none.
func Descendants(pid int) []int {
	out := []int{pid}
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err != nil {
		return descendantsByScan(pid)
	}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(out[i]) + "/task")
		for _, t := range tasks {
			raw, _ := os.ReadFile("/proc/" + strconv.Itoa(out[i]) + "/task/" + t.Name() + "/children")
			for _, c := range strings.Fields(string(raw)) {
				if n, err := strconv.Atoi(c); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// descendantsByScan is Descendants from every process's parent.
func descendantsByScan(pid int) []int {
	children := map[int][]int{}
	scanStats(func(p int, f []string) {
		if len(f) < 2 {
			return
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	})
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}
