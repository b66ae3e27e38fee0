package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/sandbox/process"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// newManager returns a process manager over a fresh short home.
func newManager(t *testing.T) (*lifecycle.Manager, sandbox.Env) {
	t.Helper()
	lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	e.Layout = lay
	m := process.New(e)
	t.Cleanup(func() {
		sandboxtest.DestroyAll(m)
		m.Close()
	})
	return m, e
}

func TestRefusesWithoutConsent(t *testing.T) {
	m, _ := newManager(t)
	t.Setenv(sandbox.EnvAllowInsecure, "")
	_, err := m.Create(context.Background(), "x", sandbox.CreateOptions{})
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), sandbox.EnvAllowInsecure) || !strings.Contains(err.Error(), "not a security boundary") {
		t.Fatalf("%v", err)
	}
	c := process.SelfCheck(context.Background(), env(t))
	if c.OK || !strings.Contains(c.Summary, sandbox.EnvAllowInsecure) {
		t.Fatalf("%+v", c)
	}
}

func TestEnvironmentIsScrubbed(t *testing.T) {
	for k, v := range map[string]string{"OPENAI_API_KEY": "sk-leak", "AWS_SECRET_ACCESS_KEY": "leak", "SSH_AUTH_SOCK": "/leak",
		"GITHUB_TOKEN": "leak", "SOME_PASSWORD": "leak", "LANG": "C.UTF-8"} {
		t.Setenv(k, v)
	}
	m, _ := newManager(t)
	ctx := context.Background()
	st, err := m.Create(ctx, "env", sandbox.CreateOptions{Env: []string{"GRANTED=yes"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(ctx, "env")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"env"}}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if strings.Contains(out, "leak") || !strings.Contains(out, "GRANTED=yes") || !strings.Contains(out, "LANG=C.UTF-8") ||
		!strings.Contains(out, "HOME="+filepath.Join(st.OverlayPath, "home")) {
		t.Fatalf("neuron environment:\n%s", out)
	}
	// Nor does the agent itself hold them.
	b, _ := os.ReadFile("/proc/" + itoa(st.PID) + "/environ")
	if strings.Contains(string(b), "leak") {
		t.Fatal("the agent's own environment holds a secret")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A host that crashed mid-create left a pending state and a live agent:
// the next list sweeps them away.
func TestPendingOrphanSweep(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	overlay := e.Layout.OverlayDir("crashed")
	os.MkdirAll(overlay, 0o700)
	os.WriteFile(filepath.Join(overlay, ".mode"), []byte("process\n"), 0o600)
	orphan := exec.Command("sleep", "60")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	defer orphan.Process.Kill()
	reaped := make(chan struct{})
	go func() { orphan.Wait(); close(reaped) }()
	start, _ := store.ProcStart(orphan.Process.Pid)
	writeState := func(created time.Time) {
		st := sandbox.State{ID: "crashed", Mode: "process", Status: sandbox.StatusPending, Pending: true,
			PID: orphan.Process.Pid, PIDStart: start, CreatedAt: created, OverlayPath: overlay}
		if err := store.WriteJSON(filepath.Join(overlay, ".neuron.json"), &st, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// While its creator still holds the lock and is young, it is left alone.
	creator := store.NewLock(filepath.Join(overlay, ".lock"))
	if ok, _ := creator.TryExclusive(); !ok {
		t.Fatal("lock")
	}
	writeState(time.Now())
	if st, err := m.Get(ctx, "crashed"); err != nil || st.Status != sandbox.StatusPending {
		t.Fatalf("young pending state with a live creator: %+v %v", st, err)
	}
	// Older than 60 s: swept even though a creator holds the lock.
	writeState(time.Now().Add(-61 * time.Second))
	if st, err := m.Get(ctx, "crashed"); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("old pending state: %+v %v", st, err)
	}
	select {
	case <-reaped:
	case <-time.After(5 * time.Second):
		t.Fatal("the orphaned agent was not killed")
	}
	if _, err := os.Stat(filepath.Join(overlay, ".neuron.json")); !os.IsNotExist(err) {
		t.Fatal("the pending state file survived the sweep")
	}
	creator.Release()

	// The creator died (its lock is free): swept at once, young or not.
	orphan2 := exec.Command("sleep", "60")
	orphan2.Start()
	defer orphan2.Process.Kill()
	go orphan2.Wait()
	start2, _ := store.ProcStart(orphan2.Process.Pid)
	st := sandbox.State{ID: "crashed", Mode: "process", Pending: true, PID: orphan2.Process.Pid, PIDStart: start2, CreatedAt: time.Now()}
	store.WriteJSON(filepath.Join(overlay, ".neuron.json"), &st, 0o600)
	all, err := m.List(ctx)
	if err != nil || len(all) != 1 || all[0].Status != sandbox.StatusStopped {
		t.Fatalf("%+v %v", all, err)
	}
	waitGone(t, orphan2.Process.Pid)
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if !waittest.Until(30*time.Second, func() bool { return !store.Alive(pid, 0) }) {
		t.Fatalf("process %d still alive", pid)
	}
}

func TestStaleAndCorruptState(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	overlay := e.Layout.OverlayDir("stale")
	os.MkdirAll(overlay, 0o700)
	os.WriteFile(filepath.Join(overlay, ".mode"), []byte("process\n"), 0o600)
	sock := process.ChannelDir(e.Layout, "stale")
	os.MkdirAll(sock, 0o700)
	// A dead pid: the state file and sockets are cleared, the neuron is stopped.
	store.WriteJSON(filepath.Join(overlay, ".neuron.json"), &sandbox.State{ID: "stale", Mode: "process", PID: 999999, PIDStart: 1}, 0o600)
	if st, err := m.Get(ctx, "stale"); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("%+v %v", st, err)
	}
	for _, p := range []string{filepath.Join(overlay, ".neuron.json"), sock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s survived the stale cleanup", p)
		}
	}
	// A corrupt state file does not break anything, and create replaces it.
	os.WriteFile(filepath.Join(overlay, ".neuron.json"), []byte("{half a sta"), 0o600)
	if st, err := m.Get(ctx, "stale"); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := m.Create(ctx, "stale", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Tier three of discovery: the state file is lost but the agent runs.
func TestOverlayFallbackAndOrphanCleanup(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	st, err := m.Create(ctx, "lost", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	os.Remove(filepath.Join(e.Layout.OverlayDir("lost"), ".neuron.json"))
	m2 := process.New(e)
	defer m2.Close()
	got, err := m2.Get(ctx, "lost")
	if err != nil || got.Status != sandbox.StatusRunning || got.PID != st.PID {
		t.Fatalf("%+v %v", got, err)
	}
	killed, err := m2.CleanupOrphans(ctx)
	if err != nil || len(killed) != 1 || !strings.HasPrefix(killed[0], "lost") {
		t.Fatalf("%v %v", killed, err)
	}
	waitGone(t, st.PID)
	if got, _ := m2.Get(ctx, "lost"); got.Status != sandbox.StatusStopped {
		t.Fatalf("%+v", got)
	}
	// A neuron with its state file is never an orphan.
	if _, err := m2.Create(ctx, "kept", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if killed, _ := m2.CleanupOrphans(ctx); len(killed) != 0 {
		t.Fatalf("killed a known neuron: %v", killed)
	}
}

func TestBootFailuresAreClear(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		bin  func() (string, error)
		want string
		env  []string
	}{
		{"missing agent", func() (string, error) { return "", errors.New("cortex-agent not found: build with `make build`") }, "make build", nil},
		{"not an agent", func() (string, error) { return "/bin/true", nil }, "exited before it connected", nil},
		{"wrong protocol", func() (string, error) { return os.Args[0], nil }, "speaks protocol 9.0", []string{"CORTEX_FAKE_AGENT=wrong-major"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lay, _ := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
			m := process.New(sandbox.Env{Layout: lay, AgentBinary: c.bin})
			defer m.Close()
			// The boot timeout is far beyond the wait below: a failure that
			// waits for it never comes in time.
			created := make(chan error, 1)
			go func() {
				_, err := m.Create(ctx, "bad", sandbox.CreateOptions{Env: c.env, BootTimeout: time.Hour})
				created <- err
			}()
			err := waittest.Recv(t, 2*time.Minute, "the failure (without waiting for the boot timeout)", created)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error saying %q", err, c.want)
			}
			t.Logf("%v", err)
			if st, err := m.Get(ctx, "bad"); err == nil && st.Status != sandbox.StatusStopped {
				t.Fatalf("after a failed create: %+v", st)
			}
		})
	}
}

// fakeAgent stands in for cortex-agent when the test binary is run as one:
// it dials the host and announces a protocol this host cannot speak.
func fakeAgent(mode string) {
	var dir string
	for i, a := range os.Args {
		if a == "--channel-dir" && i+1 < len(os.Args) {
			dir = os.Args[i+1]
		}
	}
	var conn net.Conn
	dial := func() bool {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".sock") || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if c, err := net.Dial("unix", filepath.Join(dir, e.Name())); err == nil {
				conn = c
				return true
			}
		}
		return false
	}
	if !waittest.Until(30*time.Second, dial) {
		os.Exit(3)
	}
	data, _ := json.Marshal(protocol.Hello{Protocol: "9.0", Role: protocol.RoleAgent, Software: "fake-agent"})
	protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindHello, Data: data}, nil)
	// Alive until the host has read the hello and hung up (or killed it):
	// an agent that exits first fails the boot for another reason.
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	io.Copy(io.Discard, conn)
	os.Exit(0)
}

func TestForeignOverlayIsNotOurs(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	overlay := e.Layout.OverlayDir("other")
	os.MkdirAll(overlay, 0o700)
	os.WriteFile(filepath.Join(overlay, ".mode"), []byte("nsbox\n"), 0o600)
	if _, err := m.Get(ctx, "other"); !errdefs.IsNotFound(err) {
		t.Fatalf("%v", err)
	}
	if _, err := m.Create(ctx, "other", sandbox.CreateOptions{}); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "--mode nsbox") {
		t.Fatalf("%v", err)
	}
	// Nor is it listed, by List or through a Set's scan; and a scan that
	// is out of date by the time it is handed over (the overlay marked
	// process when scanned, another mode's or gone by now) is looked at
	// again, not taken as it was.
	if _, err := m.Create(ctx, "mine", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := func(sts []*sandbox.State, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range sts {
			out = append(out, st.ID)
		}
		return out
	}
	set := sandbox.NewSet(e, process.Backend())
	for name, got := range map[string][]string{
		"List":     ids(m.List(ctx)),
		"Set.List": ids(set.List(ctx)),
		"a stale scan": ids(m.ListOverlays(ctx, []sandbox.Overlay{
			{ID: "mine", Mode: "process"}, {ID: "other", Mode: "process"}, {ID: "gone", Mode: "process"}})),
	} {
		if strings.Join(got, " ") != "mine" {
			t.Errorf("%s: %v, want only the process neuron", name, got)
		}
	}
	if _, st, err := set.Find(ctx, "other"); !errdefs.IsNotFound(err) {
		t.Errorf("find of another mode's overlay: %v %v", st, err)
	}
}

// An overlay's mark is read as a record: not through a symbolic link,
// and not from a FIFO (which would hang every list and find). Either
// leaves the overlay unmarked, so no mode but process's (unmarked
// overlays are its, from before marks) claims it.
func TestMarkIsARecord(t *testing.T) {
	_, e := newManager(t)
	ctx := context.Background()
	for id, plant := range map[string]func(string) error{
		"linked": func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo":   func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"big":    func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("nsbox "), 100), 0o600) },
	} {
		os.MkdirAll(e.Layout.OverlayDir(id), 0o700)
		if err := plant(filepath.Join(e.Layout.OverlayDir(id), ".mode")); err != nil {
			t.Fatal(err)
		}
		if got := sandbox.OverlayMode(e.Layout, id); got != "" {
			t.Errorf("%s: mark %q, want none", id, got)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := sandbox.NewSet(e, process.Backend()).List(ctx); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a list is stuck on a planted mark")
	}
}

// A deep home and a 64-character id make socket paths longer than bind(2)
// takes; the channel still works.
func TestLongPaths(t *testing.T) {
	deep := filepath.Join(sandboxtest.ShortTempDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	lay, _ := layout.New(deep, "")
	e := env(t)
	e.Layout = lay
	m := process.New(e)
	defer m.Close()
	ctx := context.Background()
	id := strings.Repeat("n", 64)
	if _, err := m.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(ctx, id, sandbox.DestroyOptions{Wipe: true})
	c, err := m.Connect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

// NSYS_CORTEX_OVERLAY_STORE_DIR keeps neuron data apart from the home tree.
func TestOverlayStoreElsewhere(t *testing.T) {
	base := sandboxtest.ShortTempDir(t)
	lay, _ := layout.New(filepath.Join(base, "h"), filepath.Join(base, "store"))
	e := env(t)
	e.Layout = lay
	m := process.New(e)
	defer m.Close()
	ctx := context.Background()
	st, err := m.Create(ctx, "apart", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy(ctx, "apart", sandbox.DestroyOptions{Wipe: true})
	if st.OverlayPath != filepath.Join(base, "store", "apart") || !strings.HasPrefix(st.Workdir, st.OverlayPath) {
		t.Fatalf("%+v", st)
	}
	c, _ := m.Connect(ctx, "apart")
	if err := c.WriteFile(ctx, "f", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "store", "apart", "home", "workspace", "f")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "h", "overlays")); !os.IsNotExist(err) {
		t.Fatalf("data landed in the home tree too: %v", err)
	}
}

// Destroy ends everything the neuron started, also a detached (setsid)
// descendant that holds a command's stdin.
func TestDestroyEndsDetachedDescendants(t *testing.T) {
	m, _ := newManager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, "surv", sandbox.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := m.Connect(ctx, "surv")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, &link.ExecRequest{
		Command: protocol.Command{Shell: "exec 3<&0; setsid sleep 313 <&3 & echo $! > holder.pid; exit 0"},
		Stdin:   bytes.NewReader(make([]byte, 200<<10)), Timeout: link.NoTimeout})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	b, err := c.ReadFile(ctx, "holder.pid")
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !store.Alive(holder, 0) {
		t.Fatalf("holder %d is not running", holder)
	}
	start := time.Now()
	if err := m.Destroy(ctx, "surv", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("destroy took %s", time.Since(start))
	waitGone(t, holder)
}

// An agent killed from outside (kill -9) leaves its commands' children
// behind for a moment; the next look at the neuron ends them.
func TestKilledAgentLeavesNothingBehind(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	st, err := m.Create(ctx, "k9", sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Connect(ctx, "k9")
	if _, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Shell: "sleep 702 & echo $! > bg.pid; wait"}}); err != nil {
		t.Fatal(err)
	}
	var bg int
	if !waittest.Until(30*time.Second, func() bool {
		if b, err := c.ReadFile(ctx, "bg.pid"); err == nil {
			bg, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return bg != 0
	}) {
		t.Fatal("no background pid")
	}
	m.Close() // as if the CLI that created it had exited
	syscall.Kill(st.PID, syscall.SIGKILL)
	waitGone(t, st.PID)
	m2 := process.New(e) // another host process

	defer m2.Close()
	got, err := m2.Get(ctx, "k9")
	if err != nil || got.Status != sandbox.StatusStopped {
		t.Fatalf("%+v %v", got, err)
	}
	waitGone(t, bg)
}

// A list of enough neurons to be inspected a few at once gives each its
// state, as one at a time did: the live ones running, the ones whose
// agent was killed stopped (their records cleared while the others are
// looked at), in order.
func TestListManyAtOnce(t *testing.T) {
	m, e := newManager(t)
	ctx := context.Background()
	const n = 40
	var want []string
	for i := range n {
		id := "many" + strconv.Itoa(100+i)
		if _, err := m.Create(ctx, id, sandbox.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	killed := map[string]bool{"many105": true, "many120": true, "many133": true}
	for id := range killed {
		st, err := m.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(st.PID, syscall.SIGKILL)
		waittest.For(t, 10*time.Second, id+"'s agent to die", func() bool { return !store.Alive(st.PID, st.PIDStart) })
	}
	// A manager of another process: it holds none of them in memory.
	sts, err := sandbox.NewSet(e, process.Backend()).List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range sts {
		got = append(got, st.ID)
		wantStatus := sandbox.StatusRunning
		if killed[st.ID] {
			wantStatus = sandbox.StatusStopped
		}
		if st.Status != wantStatus {
			t.Errorf("%s: %s, want %s", st.ID, st.Status, wantStatus)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("listed %v, want %v", got, want)
	}
}
