package docker

import (
	"os"
	"path/filepath"
	"testing"
)

// A container's cgroups are found from its PID 1's /proc/<pid>/cgroup
// through this host's mounts, on a hybrid host (v1 controllers, an empty
// unified hierarchy), a v2 host, and by id where no PID 1 can be asked;
// and read as the accounting files say.
func TestContainerCgroups(t *testing.T) {
	root := t.TempDir()
	id := "24ad94d5126a"
	mk := func(dir string, files map[string]string) string {
		t.Helper()
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	mem := mk("memory/docker/"+id, map[string]string{"memory.usage_in_bytes": "1048576\n", "memory.max_usage_in_bytes": "2097152\n",
		"memory.limit_in_bytes": "2147483648\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"})
	acct := mk("cpu,cpuacct/docker/"+id, map[string]string{"cpuacct.usage": "1500000000\n"})
	pids := mk("pids/docker/"+id, map[string]string{"pids.current": "7\n"})
	mk("unified/docker/"+id, map[string]string{"cgroup.freeze": "0\n"}) // no controllers there
	v2 := mk("v2/system.slice/docker-"+id+".scope", map[string]string{"memory.current": "4096\n", "memory.peak": "8192\n",
		"memory.max": "max\n", "cpu.stat": "usage_usec 250000\nuser_usec 1\n", "pids.current": "3\n", "memory.events": "low 0\noom_kill 1\n"})

	hybrid := cgroupMounts(`31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / ` + root + `/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / ` + root + `/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / ` + root + `/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / ` + root + `/unified rw,relatime - cgroup2 cgroup2 rw`)
	proc := "9:name=systemd:/docker/" + id + "\n8:pids:/docker/" + id + "\n4:memory:/docker/" + id + "\n1:cpu,cpuacct:/docker/" + id + "\n0::/docker/" + id + "\n"
	cg := cgroupsOf(proc, hybrid)
	if cg.v2 != "" || cg.v1["memory"] != mem || cg.v1["cpuacct"] != acct || cg.v1["pids"] != pids {
		t.Fatalf("hybrid: %+v", cg)
	}
	u := cgroupUsage(cg)
	if u.Source != "cgroup v1" || u.CPUSeconds != 1.5 || u.MemoryBytes != 1<<20 || u.MemoryPeakBytes != 2<<20 || u.MemoryLimitBytes != 2<<30 || u.Pids != 7 || u.OOMKills != 2 {
		t.Errorf("v1 usage: %+v", u)
	}
	if byID := cgroupsByID(id, "", hybrid); byID.v1["memory"] != mem || byID.v1["pids"] != pids {
		t.Errorf("hybrid, by id: %+v", byID)
	}

	unified := cgroupMounts(`30 23 0:26 / ` + root + `/v2 rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate`)
	cg = cgroupsOf("0::/system.slice/docker-"+id+".scope\n", unified)
	if cg.v2 != v2 {
		t.Fatalf("v2: %+v", cg)
	}
	u = cgroupUsage(cg)
	if u.Source != "cgroup v2" || u.CPUSeconds != 0.25 || u.MemoryBytes != 4096 || u.MemoryPeakBytes != 8192 || u.MemoryLimitBytes != 0 || u.Pids != 3 || u.OOMKills != 1 {
		t.Errorf("v2 usage: %+v", u)
	}
	if byID := cgroupsByID(id, "", unified); byID.v2 != v2 {
		t.Errorf("v2, by id: %+v", byID)
	}
	if none := cgroupsByID("other", "", unified); none.found() {
		t.Errorf("another container's cgroups were found: %+v", none)
	}
}

func TestParseStats(t *testing.T) {
	u, err := parseStats("1.5MiB / 2GiB|12\n")
	if err != nil || u.MemoryBytes != 3<<19 || u.MemoryLimitBytes != 2<<30 || u.Pids != 12 || u.CPUSeconds != 0 {
		t.Fatalf("%+v %v", u, err)
	}
	for _, bad := range []string{"", "1MiB|3", "1 / 2GiB|3", "1MiB / 2GiB|x"} {
		if _, err := parseStats(bad); err == nil {
			t.Errorf("parseStats(%q) took it", bad)
		}
	}
}
