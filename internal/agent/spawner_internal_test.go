package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// pidsCgroupV1 makes a pids cgroup (version 1, as on this machine) with
// pids.max = max for one test, and returns its directory; it skips where
// there is none to make.
func pidsCgroupV1(t *testing.T, max int) string {
	t.Helper()
	dir, err := os.MkdirTemp("/sys/fs/cgroup/pids", "cortex-spawner-test-")
	if err != nil {
		t.Skipf("no pids cgroup to make here: %v", err)
	}
	t.Cleanup(func() {
		// The spawner's thread ends after stop, unless it was the main
		// thread, which the runtime keeps: that one is moved back.
		if !waittest.Until(10*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, "tasks"))
			for _, tid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(filepath.Dir(dir), "tasks"), []byte(tid), 0)
			}
			return os.Remove(dir) == nil
		}) {
			t.Errorf("the test's cgroup %s is still busy", dir)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(fmt.Sprint(max)), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

func pidsCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if _, rest, ok := strings.Cut(line, ":pids:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// Children start in the spawner's cgroup, up to its ceiling, which this
// process's other threads are not counted in: past it a start fails, and
// the process goes on.
func TestSpawnerStartsIntoTheCeiling(t *testing.T) {
	dir := pidsCgroupV1(t, 3) // the spawner's thread and two children
	tasks, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSpawner(tasks)
	tasks.Close()
	if err != nil {
		t.Fatal(err)
	}
	var started []*exec.Cmd
	t.Cleanup(func() {
		s.stop()
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
	})
	want := "/" + filepath.Base(dir)
	// One thread of this process is there, the spawner's.
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	if tids := strings.Fields(string(b)); len(tids) != 1 {
		t.Fatalf("threads in the spawner's cgroup: %v, want its one", tids)
	} else if _, err := os.Stat("/proc/self/task/" + tids[0]); err != nil {
		t.Fatalf("the thread in the spawner's cgroup is not this process's: %v", err)
	} else if tids[0] == fmt.Sprint(os.Getpid()) {
		t.Fatal("the spawner took the main thread, which the runtime never ends")
	}
	var refused error
	for range 4 {
		cmd := exec.Command("sleep", "60")
		if err := s.run(cmd.Start); err != nil {
			refused = err
			break
		}
		started = append(started, cmd)
		if got := pidsCgroupOf(t, cmd.Process.Pid); got != want {
			t.Fatalf("a child started in pids cgroup %q, want %q", got, want)
		}
	}
	if len(started) != 2 || !errors.Is(refused, syscall.EAGAIN) {
		t.Fatalf("%d children started under pids.max 3 (one is the spawner's thread), then %v; want 2, then EAGAIN", len(started), refused)
	}
	// This process's own threads are not counted there: it starts more.
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("a start outside the spawner: %v", err)
	}
	s.stop()
	if err := s.run(func() error { return nil }); err == nil {
		t.Fatal("a stopped spawner ran a start")
	}
}

// A cgroup the spawner cannot move its thread into is an error, not a
// spawner that starts children outside the ceiling.
func TestSpawnerRefused(t *testing.T) {
	// Not a cgroup's file; a cgroup's, open read-only (the write fails).
	for _, path := range []string{os.DevNull, "/sys/fs/cgroup/pids/tasks"} {
		f, err := os.Open(path)
		if err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		s, err := newSpawner(f)
		f.Close()
		if err == nil {
			s.stop()
			t.Fatalf("%s: a spawner whose thread could not be moved started", path)
		} else {
			t.Logf("%s: %v", path, err)
		}
	}
}
