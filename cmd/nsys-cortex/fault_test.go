package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/faultpoint"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// killedAt runs the CLI with NSYS_CORTEX_FAULT=point and fails unless it
// died of SIGKILL there: the fault-injection harness (docs/faults.md).
func (c *cli) killedAt(point string, args ...string) {
	c.t.Helper()
	cmd := c.command(args...)
	cmd.Env = append(cmd.Env, faultpoint.Env+"="+point)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		c.t.Fatalf("nsys-cortex %s with the fault %s: not killed there (%v)\n%s", strings.Join(args, " "), point, err, out)
	}
}

// noneLeft fails unless, within a while, no host process serves neuron id
// and nothing is mounted for it: what a destroy must leave.
func (c *cli) noneLeft(id string) {
	c.t.Helper()
	agents := func() []int {
		return hostProcessesWhere(func(cmdline string) bool {
			return strings.Contains(cmdline, "\x00--id\x00"+id+"\x00") && strings.Contains(cmdline, c.home)
		})
	}
	if !waittest.Until(30*time.Second, func() bool { return len(agents()) == 0 }) {
		c.t.Errorf("processes of %s left: %v", id, agents())
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, c.home) && strings.Contains(line, id) {
			c.t.Errorf("a mount of %s left: %s", id, line)
		}
	}
}

// TestFaults: the CLI killed (kill -9) at each phase of create, destroy,
// cp out, snapshot and restore. Afterwards list answers, the next command
// on that neuron works, what was acknowledged before is there, a file is
// the old or the new version and never a mix, and a destroy leaves no
// process or mount. (An upload killed midway: TestInterruptedUploadLeavesNothing.)
func TestFaults(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		if c.mode == "docker" {
			t.Skip("the same lifecycle code as process and nsbox; kept out for CI's time")
		}
		for _, point := range []string{"create.pending", "create.spawned", "create.booted"} {
			id := "f-" + strings.ReplaceAll(point, ".", "-")
			c.ok("create", id)
			c.ok("exec", id, "sh", "-c", "echo kept > ack")
			c.ok("destroy", id)
			c.killedAt(point, "create", id)
			c.ok("list")
			c.ok("create", id)
			if out := c.ok("exec", id, "cat", "ack"); out != "kept\n" {
				t.Errorf("after a create killed at %s: ack holds %q", point, out)
			}
			c.ok("destroy", "--wipe", id)
			c.noneLeft(id)
			if strings.Contains(c.ok("list", "-o", "name"), id) {
				t.Errorf("after a create killed at %s and a wipe: %s is still listed", point, id)
			}
		}

		c.ok("create", "fd")
		c.ok("exec", "fd", "sh", "-c", "echo kept > ack")
		c.killedAt("destroy.stopped", "destroy", "fd")
		c.ok("list")
		c.ok("create", "fd")
		if out := c.ok("exec", "fd", "cat", "ack"); out != "kept\n" {
			t.Errorf("after a destroy killed midway: ack holds %q", out)
		}
		c.killedAt("destroy.wiping", "destroy", "--wipe", "fd")
		c.ok("list")
		c.ok("destroy", "--wipe", "fd")
		c.noneLeft("fd")
		if strings.Contains(c.ok("list", "-o", "name"), "fd") {
			t.Error("after a wipe killed midway and another: fd is still listed")
		}

		// cp out of a neuron, killed after the file came but before it
		// took its name: the host's file is still the old one.
		c.ok("create", "fc")
		c.ok("exec", "fc", "sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' n > big")
		dst := filepath.Join(t.TempDir(), "big")
		os.WriteFile(dst, []byte("old\n"), 0o644)
		c.killedAt("cp.received", "cp", "fc:big", dst)
		if b, _ := os.ReadFile(dst); string(b) != "old\n" {
			t.Errorf("after a cp out killed before its rename: the destination holds %d bytes", len(b))
		}
		c.ok("cp", "fc:big", dst)
		if st, _ := os.Stat(dst); st == nil || st.Size() != 3000000 {
			t.Errorf("the cp after: %v", st)
		}

		// A snapshot killed before it was whole is not one; its name is free.
		c.ok("exec", "fc", "sh", "-c", "echo before > state")
		c.killedAt("snapshot.copied", "snapshot", "create", "fc", "s1")
		if out := c.ok("snapshot", "list", "fc"); strings.Contains(out, "s1") {
			t.Errorf("a snapshot killed before it was whole is listed: %q", out)
		}
		c.ok("snapshot", "create", "fc", "s1")
		// A restore killed during its swap is finished before the neuron
		// runs again: the data is the snapshot's, whole.
		c.ok("exec", "fc", "sh", "-c", "echo after > state; echo new > extra; mkdir -p d; echo x > d/f")
		c.killedAt("restore.swapping", "snapshot", "restore", "fc", "s1")
		c.ok("list")
		c.ok("create", "fc")
		if out := c.ok("exec", "fc", "sh", "-c", "cat state; ls extra d 2>&1 | wc -l; test -s big && echo big"); out != "before\n2\nbig\n" {
			t.Errorf("after a restore killed during its swap: %q, want the snapshot's data (state before, no extra or d, big)", out)
		}
		c.ok("destroy", "--wipe", "fc")
		c.noneLeft("fc")
	})
}

// TestFullHome: the home's filesystem full during an upload and a
// snapshot. Each fails with a clear error naming the lack of space, and
// the neuron's data is as it was: no partial file or snapshot, and both
// work again once there is room. (Process mode: its data is in the home;
// a session write on a full disk is internal/session's
// TestSessionWriteOnAFullDisk.)
func TestFullHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a small home of its own needs root (tmpfs); CI runs as root")
	}
	c := newCLI(t, "process")
	if err := os.MkdirAll(c.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", c.home, "tmpfs", 0, "size=48m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(c.home, syscall.MNT_DETACH) })
	// Destroyed before the home is unmounted (cleanups run last first):
	// the CLI's own cleanup, registered earlier, would find no neuron in
	// the detached home, and the agent would outlive the test.
	t.Cleanup(func() { c.run("", "destroy", "full") })
	c.ok("create", "full")
	c.ok("exec", "full", "sh", "-c", "echo kept > keep; head -c 8000000 /dev/zero > eight")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := c.run("", "cp", big, "full:big")
	if code == 0 || !strings.Contains(strings.ToLower(errs), "no space") {
		t.Errorf("an upload past the home's space: exit %d, %q; want a failure that says no space", code, errs)
	}
	if out := c.ok("exec", "full", "sh", "-c", "cat keep; ls -a | grep -c -e cortex- -e '^big$' || true"); out != "kept\n0\n" {
		t.Errorf("after the failed upload: %q, want keep intact and no partial file", out)
	}
	// A snapshot that does not fit: the data is 8 MB, the room less.
	filler := filepath.Join(c.home, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	syscall.Statfs(c.home, &st)
	f.Write(make([]byte, int64(st.Bavail)*st.Bsize-4<<20)) // leave 4 MB
	f.Close()
	_, errs, code = c.run("", "snapshot", "create", "full", "s1")
	if code == 0 || !strings.Contains(strings.ToLower(errs), "no space") {
		t.Errorf("a snapshot past the home's space: exit %d, %q; want a failure that says no space", code, errs)
	}
	if out := c.ok("snapshot", "list", "full"); strings.Contains(out, "s1") {
		t.Errorf("a snapshot that did not fit is listed: %q", out)
	}
	os.Remove(filler)
	c.ok("snapshot", "create", "full", "s1")
	c.ok("cp", "-", "full:small")
	if out := c.ok("exec", "full", "cat", "keep"); out != "kept\n" {
		t.Errorf("after room was made: keep holds %q", out)
	}
}

// TestDaemonKilled: serve killed (kill -9) at each phase of a create made
// through it. The client gets an error, not a hang; a new daemon on the
// same home lists the neuron consistently, creates it, runs commands in
// it; a destroy leaves no process or mount.
func TestDaemonKilled(t *testing.T) {
	mode := "process"
	if ms := modes(t); slices.Contains(ms, "nsbox") {
		mode = "nsbox"
	}
	c := newCLI(t, mode)
	for _, point := range []string{"create.pending", "create.spawned", "create.booted"} {
		id := "d-" + strings.ReplaceAll(point, ".", "-")
		url, stop := c.serve(t, faultpoint.Env+"="+point)
		api := func(url string, args ...string) []string { return append([]string{"--api", url}, args...) }
		if out, errs, code := c.run("", api(url, "create", id)...); code == 0 {
			t.Fatalf("a create through a daemon killed at %s succeeded: %q %q", point, out, errs)
		}
		if _, code := stop(); code == 0 {
			t.Fatalf("the daemon was not killed at %s", point)
		}
		url, stop = c.serve(t)
		c.ok(api(url, "list")...)
		c.ok(api(url, "create", id)...)
		if out := c.ok(api(url, "exec", id, "--", "echo", "works")...); out != "works\n" {
			t.Errorf("after a daemon killed at %s: exec says %q", point, out)
		}
		c.ok(api(url, "destroy", "--wipe", id)...)
		stop()
		c.noneLeft(id)
	}
}
