package docker

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A container's cgroups, found on this host as the kernel lists them for
// its PID 1 (/proc/<pid>/cgroup, mapped through this process's mounts),
// or, without a PID 1 to ask, where the daemon's cgroupfs and systemd
// drivers put them. A daemon in a VM (Docker Desktop) has them in its own
// kernel: none are found here.

// containerCgroups is where one container's accounting is.
type containerCgroups struct {
	// v2 is its directory in the unified hierarchy, when the memory
	// controller is enabled there ("" otherwise: a hybrid host whose
	// controllers are all v1).
	v2 string
	// v1 maps a v1 controller (cpuacct, memory, pids) to its directory.
	v1 map[string]string
}

func (c *containerCgroups) found() bool { return c.v2 != "" || c.v1["memory"] != "" }

// cgroupMount is one cgroup file system this process sees.
type cgroupMount struct {
	root, point string
	v2          bool
	controllers []string // v1: the controllers of its hierarchy
}

// cgroupMounts reads this process's cgroup mounts from mountinfo.
func cgroupMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, l := range strings.Split(mountinfo, "\n") {
		// id parent major:minor root point options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			out = append(out, cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), v2: true})
		case "cgroup":
			m := cgroupMount{root: unescapeMount(f[3]), point: unescapeMount(f[4])}
			for _, o := range strings.Split(g[2], ",") {
				if o != "rw" && o != "ro" && !strings.Contains(o, "=") {
					m.controllers = append(m.controllers, o)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// under is path p of a hierarchy, on this host, through mount m (or ""
// when m does not show it).
func (m cgroupMount) under(p string) string {
	rel, ok := strings.CutPrefix(p, m.root)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && m.root != "/") {
		return ""
	}
	return filepath.Join(m.point, rel)
}

// cgroupsOf maps the lines of a /proc/<pid>/cgroup to directories.
func cgroupsOf(procCgroup string, mounts []cgroupMount) *containerCgroups {
	c := &containerCgroups{v1: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(procCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, p := parts[1], parts[2]
		for _, m := range mounts {
			switch {
			case parts[0] == "0" && ctrls == "" && m.v2:
				if d := m.under(p); d != "" && exists(filepath.Join(d, "memory.current")) {
					c.v2 = d
				}
			case !m.v2 && ctrls != "":
				for _, want := range strings.Split(ctrls, ",") {
					for _, have := range m.controllers {
						if want == have {
							if d := m.under(p); d != "" {
								c.v1[want] = d
							}
						}
					}
				}
			}
		}
	}
	return c
}

// cgroupsByID looks for container id's cgroups where the daemon's cgroup
// drivers make them (parent "" is the daemon's default).
func cgroupsByID(id, parent string, mounts []cgroupMount) *containerCgroups {
	c := &containerCgroups{v1: map[string]string{}}
	v1Parent, v2Dirs := parent, []string{parent + "/" + id}
	switch {
	case parent == "":
		v1Parent = "docker"
		v2Dirs = []string{"system.slice/docker-" + id + ".scope", "docker/" + id}
	case strings.HasSuffix(parent, ".slice"):
		v2Dirs = []string{parent + "/docker-" + id + ".scope"}
	}
	for _, m := range mounts {
		if m.v2 {
			for _, d := range v2Dirs {
				if p := filepath.Join(m.point, d); exists(filepath.Join(p, "memory.current")) {
					c.v2 = p
				}
			}
			continue
		}
		for _, ctrl := range m.controllers {
			if p := filepath.Join(m.point, v1Parent, id); exists(p) {
				c.v1[ctrl] = p
			}
		}
	}
	return c
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// parseSize reads a size as docker stats prints it ("1.5MiB", "2GiB",
// "512kB", "0B").
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil {
				return 0, fmt.Errorf("size %q: %w", s, err)
			}
			return int64(f * u.mult), nil
		}
	}
	return 0, fmt.Errorf("size %q: no unit", s)
}
