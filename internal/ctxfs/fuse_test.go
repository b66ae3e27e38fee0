package ctxfs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxfstest"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// CanMount says why FUSE mounts cannot run here ("" when they can).
func canMount() string {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "needs /dev/fuse: " + err.Error()
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return "needs root or fusermount3 (apt-get install fuse3)"
		}
		if b, _ := os.ReadFile("/etc/fuse.conf"); !strings.Contains(string(b), "\nuser_allow_other") {
			return "needs root, or user_allow_other in /etc/fuse.conf (the mount uses allow_other)"
		}
	}
	return ""
}

// otherUID is a uid no one uses, for acting as a neuron's uid (setpriv
// takes numbers; no passwd entry is needed).
const otherUID = 64123

// openDir makes a directory every uid may traverse (the mount tests read
// as another uid), removed at the end.
func openDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "ctxfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// mountTree mounts tr in a fresh directory and unmounts it at the end.
func mountTree(t testing.TB, tr *ctxfs.Tree) string {
	if why := canMount(); why != "" {
		t.Skip(why)
	}
	dir := filepath.Join(openDir(t), "ctx")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := ctxfs.Mount(dir, tr, ctxfs.MountOptions{Debug: os.Getenv("CTXFS_DEBUG") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctxfstest.Unmount(t, srv) })
	return dir
}

func run(t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

func TestMountedTree(t *testing.T) {
	f := standard(t)
	dir := mountTree(t, f.tree())

	// ls and cat, from child processes (as people use it).
	out, err := run(t, "ls", filepath.Join(dir, "neurons"))
	if err != nil || out != "a\nb\n" {
		t.Fatalf("ls neurons: %q, %v", out, err)
	}
	out, err = run(t, "cat", filepath.Join(dir, "neurons/a/status"))
	if err != nil || !strings.HasPrefix(out, "running mode=fake") {
		t.Fatalf("cat status: %q, %v", out, err)
	}
	out, err = run(t, "ls", filepath.Join(dir, "neurons/a"))
	if err != nil || strings.Fields(out)[0] != "ctl" {
		t.Fatalf("ls neuron: %q, %v", out, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "neurons/a/status"))
	if err != nil || fi.Size() != int64(len(f.Snapshot().ByID["a"].Status)) || fi.Mode().Perm() != 0o440 {
		t.Fatalf("stat status: %v, %v", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1001 {
		t.Errorf("status owner %d; want the neuron's uid 1001", st.Uid)
	}

	// Writes to read-only files fail with EACCES (even root's); creating
	// files fails with EROFS.
	if err := os.WriteFile(filepath.Join(dir, "neurons/a/status"), []byte("x"), 0); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write status: %v; want EACCES", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "neurons/a/new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("create a file: %v; want EROFS or EACCES", err)
	}

	// A bad verb is EINVAL, and ctl says why.
	if err := os.WriteFile(filepath.Join(dir, "neurons/b/ctl"), []byte("explode\n"), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad verb: %v; want EINVAL", err)
	}
	out, err = run(t, "bash", "-c", "echo explode > "+filepath.Join(dir, "neurons/b/ctl"))
	if err == nil || !strings.Contains(out, "Invalid argument") {
		t.Errorf("bad verb from bash: %q, %v; want Invalid argument", out, err)
	}
	out, _ = run(t, "cat", filepath.Join(dir, "neurons/b/ctl"))
	if !strings.Contains(out, `unknown verb "explode"`) {
		t.Errorf("ctl after a bad verb: %q", out)
	}

	// stop via ctl.
	if out, err := run(t, "sh", "-c", "echo stop > "+filepath.Join(dir, "neurons/b/ctl")); err != nil {
		t.Fatalf("stop: %q, %v", out, err)
	}
	out, _ = run(t, "cat", filepath.Join(dir, "neurons/b/status"))
	if !strings.HasPrefix(out, "stopped") {
		t.Errorf("status after stop: %q", out)
	}

	// Typing into a terminal shows in its replay (the fake echoes).
	if out, err := run(t, "sh", "-c", "printf 'ls\\n' > "+filepath.Join(dir, "neurons/a/terminals/t1/input")); err != nil {
		t.Fatalf("input: %q, %v", out, err)
	}
	out, _ = run(t, "cat", filepath.Join(dir, "neurons/a/terminals/t1/replay"))
	if !strings.HasSuffix(out, "ls\n") {
		t.Errorf("replay after input: %q", out)
	}
}

// A mount namespace made while /ctx is mounted (a sandbox that a test
// running beside this one creates) holds a copy of the mount: unmounting
// ours must not wait for that copy's users.
func TestUnmountWithACopyElsewhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a mount namespace")
	}
	if why := canMount(); why != "" {
		t.Skip(why)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) (util-linux) to make a mount namespace")
	}
	dir := filepath.Join(openDir(t), "ctx")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := ctxfs.Mount(dir, standard(t).tree(), ctxfs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("unshare", "--mount", "sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	// Once unshare has exec'd sleep, its namespace is made.
	waittest.For(t, time.Minute, "the copy of the mount in a new namespace", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", holder.Process.Pid))
		return isSleep(holder.Process.Pid) && strings.Contains(string(b), " "+dir+" ")
	})
	ctxfstest.Unmount(t, srv)
}

// isSleep says whether process pid runs sleep.
func isSleep(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b)) == "sleep"
}

func TestMountedTailFollows(t *testing.T) {
	f := standard(t)
	dir := mountTree(t, f.tree())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tail := exec.CommandContext(ctx, "tail", "-n", "+1", "-f", filepath.Join(dir, "neurons/a/processes/10/stdout"))
	out, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { tail.Process.Kill(); tail.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != want {
				t.Fatalf("tail -f: %q; want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("tail -f did not show %q", want)
		}
	}
	expect("hello")
	for i := range 3 {
		w := "line " + strconv.Itoa(i)
		f.appendOut("a", 10, ctxfs.Stdout, []byte(w+"\n"))
		expect(w)
	}

	// The audit log, a host file, grows too.
	audit := exec.CommandContext(ctx, "tail", "-n", "0", "-f", filepath.Join(dir, "audit/log"))
	aout, _ := audit.StdoutPipe()
	if err := audit.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { audit.Process.Kill(); audit.Wait() }()
	alines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(aout)
		for sc.Scan() {
			alines <- sc.Text()
		}
		close(alines)
	}()
	// tail -n 0 shows only what is written after it has read to the end.
	auditLog := filepath.Join(dir, "audit/log")
	waittest.For(t, 10*time.Second, "tail to read audit/log to its end", func() bool { return openAtEnd(audit.Process.Pid, auditLog) })
	if err := os.WriteFile(filepath.Join(dir, "neurons/b/ctl"), []byte("restart"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-alines:
		if !strings.Contains(l, `"verb":"restart"`) {
			t.Fatalf("tail -f audit/log: %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail -f audit/log did not show the ctl write's fact")
	}
}

// openAtEnd reports whether process pid has the file at path open with its
// offset at the file's end (as /proc/PID/fdinfo says).
func openAtEnd(pid int, path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err != nil || target != path {
			continue
		}
		info, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(l, "pos:"); ok {
				if pos, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && pos >= st.Size() {
					return true
				}
			}
		}
	}
	return false
}

func TestMountedPerUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another uid (setpriv)")
	}
	uid := otherUID
	f := newFake(t, map[string]int{"mine": uid, "theirs": uid + 1000})
	tr := f.tree()
	dir := mountTree(t, tr)
	as := func(args ...string) (string, error) {
		id := strconv.Itoa(uid)
		return run(t, "setpriv", append([]string{"--reuid", id, "--regid", id, "--clear-groups", "--"}, args...)...)
	}
	if out, err := as("cat", filepath.Join(dir, "neurons/mine/status")); err != nil || !strings.HasPrefix(out, "running") {
		t.Fatalf("the neuron's uid reads its own status: %q, %v", out, err)
	}
	if out, err := as("ls", filepath.Join(dir, "neurons")); err != nil || out != "mine\n" {
		t.Errorf("the neuron's uid lists neurons: %q, %v; want only its own", out, err)
	}
	for _, p := range []string{"neurons/theirs/status", "neurons/theirs", "audit/log"} {
		if out, err := as("cat", filepath.Join(dir, p)); err == nil {
			t.Errorf("the neuron's uid reads %s: %q", p, out)
		}
	}
	// Even with the kernel's cache warm from the operator's look.
	if _, err := os.ReadFile(filepath.Join(dir, "neurons/theirs/status")); err != nil {
		t.Fatal(err)
	}
	if out, err := as("cat", filepath.Join(dir, "neurons/theirs/status")); err == nil {
		t.Errorf("the neuron's uid reads another's status after the operator did: %q", out)
	}
	// Its writes wait for validation.
	if out, err := as("sh", "-c", "echo restart > "+filepath.Join(dir, "neurons/mine/ctl")); err == nil {
		t.Errorf("a neuron wrote ctl before the mount was validated: %q", out)
	}
	if err := ctxmount.Validate(dir, "tok", ctxmount.ReadWithCat); err != nil {
		t.Fatal(err)
	}
	tr.SetValidated(true)
	if out, err := as("sh", "-c", "echo restart > "+filepath.Join(dir, "neurons/mine/ctl")); err != nil {
		t.Errorf("a neuron's ctl write after validation: %q, %v", out, err)
	}
	// A write the gate refuses fails with EPERM, through the kernel too.
	f.mu.Lock()
	f.deny = true
	f.mu.Unlock()
	ctl := filepath.Join(dir, "neurons/mine/ctl")
	if out, err := as("/usr/bin/python3", "-c", "import os; fd = os.open('"+ctl+"', os.O_WRONLY); os.write(fd, b'restart')"); err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("a ctl write the gate refuses: %q, %v; want EPERM", out, err)
	}
}

func TestValidate(t *testing.T) {
	f := standard(t)
	dir := mountTree(t, f.tree())
	if err := ctxmount.Validate(dir, "tok", ctxmount.ReadWithCat); err != nil {
		t.Errorf("the real mount: %v", err)
	}
	if err := ctxmount.Validate(dir, "other", ctxmount.ReadWithCat); err == nil {
		t.Error("another token validated")
	}
	if err := ctxmount.Validate(openDir(t), "tok", ctxmount.ReadWithCat); err == nil {
		t.Error("a plain directory validated")
	}
}

// TestStaleMountIsCleared kills a mount's server (a child process) and
// mounts again over the corpse.
func TestStaleMountIsCleared(t *testing.T) {
	if os.Getenv("CTXFS_HELPER_MOUNT") != "" {
		helperMount(t)
		return
	}
	if why := canMount(); why != "" {
		t.Skip(why)
	}
	dir := filepath.Join(openDir(t), "ctx")
	os.Mkdir(dir, 0o755)
	child := exec.Command(os.Args[0], "-test.run=^TestStaleMountIsCleared$")
	// The helper is killed, so its own temporary directories are made in
	// this test's, which is removed.
	child.Env = append(os.Environ(), "CTXFS_HELPER_MOUNT="+dir, "TMPDIR="+t.TempDir())
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "mounted\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("helper: %q, %v", line, err)
	}
	child.Process.Kill()
	child.Wait()
	if !ctxfs.Stale(dir) {
		t.Fatal("a dead mount is not stale")
	}
	f := standard(t)
	srv, err := ctxfs.Mount(dir, f.tree(), ctxfs.MountOptions{})
	if err != nil {
		t.Fatalf("mount over a stale mount: %v", err)
	}
	defer ctxfstest.Unmount(t, srv)
	if out, err := run(t, "cat", filepath.Join(dir, "neurons/a/status")); err != nil || !strings.HasPrefix(out, "running") {
		t.Errorf("after clearing: %q, %v", out, err)
	}
	// A live mount is not taken over.
	if _, err := ctxfs.Mount(dir, f.tree(), ctxfs.MountOptions{}); err == nil || !strings.Contains(err.Error(), "already mounted") {
		t.Errorf("mount over a live mount: %v", err)
	}
}

func helperMount(t *testing.T) {
	f := standard(t)
	if _, err := ctxfs.Mount(os.Getenv("CTXFS_HELPER_MOUNT"), f.tree(), ctxfs.MountOptions{}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("mounted\n")
	select {} // until killed
}
