package nsbox_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A claim whose PID 1 never answers (stopped here; a host under load, a
// claim the agent refuses) fails, and removes the warm neuron whole — its
// disk of its own unmounted first — so that the cold create that follows
// finds no data under the id. (An adversarial review wedged an id this
// way: the mounted disk kept the overlay directory from being removed.)
func TestClaimCutShort(t *testing.T) {
	requireNsbox(t)
	defer nsbox.SetClaimWait(300 * time.Millisecond)()
	e := envInNewHome(t)
	lay := e.Layout
	withDisk := os.Geteuid() == 0 // a disk of its own where one can be had, as serve gives by default
	if withDisk {
		e.DefaultDisk = 96 << 20
	}
	m := nsbox.New(e)
	t.Cleanup(func() { sandboxtest.DestroyAll(m); m.Close() })
	ctx := context.Background()
	name, err := m.Warm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid1 := sandboxtest.Processes(func(a []string) bool {
		return len(a) > 3 && a[1] == "init" && a[2] == "--id" && a[3] == name
	})
	if len(pid1) != 1 {
		t.Fatalf("PID 1 of %s: %v", name, pid1)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); withDisk && !strings.Contains(string(b), lay.OverlayDir(name)) {
		t.Fatalf("the warm neuron has no disk of its own mounted")
	}
	if err := syscall.Kill(pid1[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid1[0], syscall.SIGCONT)
	// A stop is not there when kill returns: every thread of PID 1 stops
	// when it next enters the kernel (a CI run under load saw PID 1 answer
	// the claim first).
	waittest.For(t, 10*time.Second, "every thread of PID 1 to stop", func() bool { return allStopped(pid1[0]) })
	if _, err := m.Claim(ctx, name, "wedge", sandbox.CreateOptions{}); err == nil {
		t.Fatal("a claim PID 1 never answered went through")
	}
	for _, p := range []string{lay.OverlayDir("wedge"), lay.OverlayDir(name), lay.ChannelDir(nsbox.Mode, "wedge"), lay.ChannelDir(nsbox.Mode, name)} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("the failed claim left %s", p)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), lay.Overlays) {
		t.Fatalf("the failed claim left a mount under %s", lay.Overlays)
	}
	waittest.For(t, 10*time.Second, "PID 1 of the failed claim to end", func() bool { return syscall.Kill(pid1[0], 0) != nil })
	st, err := m.Create(ctx, "wedge", sandbox.CreateOptions{})
	if err != nil {
		t.Fatalf("the cold create after the failed claim: %v", err)
	}
	if st.ID != "wedge" || st.Status != sandbox.StatusRunning {
		t.Fatalf("%+v", st)
	}
}

// cleanup-orphans in another process never kills a neuron whose create is
// under way: its state is pending and its process not recorded yet (the
// moment between the agent's start and the state that names it), while
// its creator holds its lock. A review of the warm pools saw it kill such
// creates.
func TestCleanupSparesCreates(t *testing.T) {
	requireNsbox(t)
	e := envInNewHome(t)
	creator := nsbox.New(e)
	t.Cleanup(func() { sandboxtest.DestroyAll(creator); creator.Close() })
	ctx := context.Background()
	st, err := creator.Create(ctx, "midway", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As the state is between the creator's two writes of it.
	path := filepath.Join(st.OverlayPath, ".neuron.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["pending"], rec["status"] = true, "pending"
	delete(rec, "pid")
	delete(rec, "pidStart")
	mid, _ := json.Marshal(rec)
	if err := os.WriteFile(path, mid, 0o600); err != nil {
		t.Fatal(err)
	}
	other := nsbox.New(e)
	defer other.Close()
	if killed, err := other.CleanupOrphans(ctx); err != nil || len(killed) != 0 {
		t.Fatalf("cleanup-orphans killed %v (%v) while its create was under way", killed, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := creator.Connect(ctx, "midway")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("the neuron after cleanup-orphans: %v", err)
	}
}

// allStopped reports whether every thread of process pid is stopped.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "stat"))
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
