package sandboxtest

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/term"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func testPersistence(t *testing.T, f *fixture) {
	m, c := f.running("keep")
	ctx := f.ctx
	if err := c.WriteFile(ctx, "work/keep.txt", []byte("survives"), &link.WriteOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, &link.ExecRequest{Command: sh("echo cached > \"$HOME/.cached\"; mkdir -p lib && echo installed > lib/pkg")}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	// A host attached to one of its terminals as the writer (the lock stays
	// on the host after the attachment, as the terminal does in the neuron).
	locks := filepath.Join(f.env.Layout.TerminalLocksDir(), "keep")
	lock, err := term.LockWriter(f.env.Layout.TerminalLocksDir(), "keep", "t0123456789")
	if err != nil {
		t.Fatal(err)
	}
	lock.Release()
	if err := m.Destroy(ctx, "keep", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(locks); err != nil {
		t.Fatalf("a destroy without wipe took the terminal locks: %v", err)
	}
	st, err := m.Get(ctx, "keep")
	if err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("after destroy: %+v %v", st, err)
	}
	all, err := m.List(ctx)
	if err != nil || len(all) != 1 || all[0].Status != sandbox.StatusStopped {
		t.Fatalf("stopped neurons are listed: %+v %v", all, err)
	}
	// Recreate under the same id: everything is back.
	m2 := f.manager()
	f.create(m2, "keep")
	c2, err := m2.Connect(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c2.ReadFile(ctx, "work/keep.txt"); err != nil || string(got) != "survives" {
		t.Fatalf("file after recreate: %q %v", got, err)
	}
	res, err := c2.Exec(ctx, &link.ExecRequest{Command: sh("cat \"$HOME/.cached\" lib/pkg")})
	if err != nil || string(res.Stdout) != "cached\ninstalled\n" {
		t.Fatalf("after recreate: %q %v", res.Stdout, err)
	}
	// Wipe: gone for good.
	if err := m2.Destroy(ctx, "keep", sandbox.DestroyOptions{Wipe: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Get(ctx, "keep"); !errdefs.IsNotFound(err) {
		t.Fatalf("after wipe: %v, want NotFoundError", err)
	}
	if _, err := os.Stat(locks); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the wipe left the terminal locks %s: %v", locks, err)
	}
	f.create(m2, "keep")
	c3, err := m2.Connect(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c3.Exists(ctx, "work/keep.txt"); err != nil || ok {
		t.Fatalf("wiped file came back: %v %v", ok, err)
	}
}

func testDeath(t *testing.T, f *fixture) {
	m, c := f.running("mortal")
	ctx := f.ctx
	st, err := m.Get(ctx, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "data", []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}
	// A long command is pending when the agent dies, and a call of every
	// other kind that waits: a background process's output followed, a
	// terminal's, an upload whose source never ends.
	sleeper := uniqueSleep()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), &link.ExecRequest{Command: sh("exec " + strings.Join(sleeper, " ")), Timeout: link.NoTimeout})
		done <- err
	}()
	waittest.For(t, 5*time.Second, "the sleeper to start", func() bool { return len(f.processes(c, sleeper)) > 0 })
	others := map[string]chan error{"attach": make(chan error, 1), "terminal": make(chan error, 1), "upload": make(chan error, 1)}
	bgSleep, termSleep := uniqueSleep(), uniqueSleep()
	bg, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("exec " + strings.Join(bgSleep, " "))})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := c.ProcAttach(context.Background(), &protocol.ProcAttachArgs{PID: bg.PID, Follow: true}, func(string, int64, []byte) error { return nil })
		others["attach"] <- err
	}()
	term, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: sh("exec " + strings.Join(termSleep, " "))})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := c.PtyFollow(context.Background(), term.PID, 0, false, func(string, int64, []byte) error { return nil })
		others["terminal"] <- err
	}()
	endless, endlessW := io.Pipe()
	defer endlessW.Close()
	go endlessW.Write([]byte("the first bytes of an upload that never ends\n"))
	go func() {
		_, err := c.WriteFileFrom(context.Background(), "endless", endless, nil)
		others["upload"] <- err
	}()
	waittest.For(t, 5*time.Second, "the background process and the terminal to run", func() bool {
		return len(f.processes(c, bgSleep)) > 0 && len(f.processes(c, termSleep)) > 0
	})
	killed := time.Now()
	f.kill(st)
	select {
	case err := <-done:
		if !errdefs.IsNotRunning(err) {
			t.Fatalf("pending exec: %v, want NOT_RUNNING", err)
		}
		if d := time.Since(killed); d > time.Second {
			t.Fatalf("pending exec failed only after %s (want within 1 s)", d)
		}
		t.Logf("pending exec failed %s after the kill", time.Since(killed))
	case <-time.After(10 * time.Second):
		t.Fatal("pending exec hangs after the agent died")
	}
	for name, ch := range others {
		select {
		case err := <-ch:
			if !errdefs.IsNotRunning(err) {
				t.Errorf("pending %s: %v, want NOT_RUNNING", name, err)
			}
			t.Logf("pending %s failed %s after the kill", name, time.Since(killed))
		case <-time.After(10 * time.Second):
			t.Errorf("pending %s hangs after the agent died", name)
		}
	}
	if _, err := c.Health(ctx); !errdefs.IsNotRunning(err) {
		t.Fatalf("later call: %v, want NOT_RUNNING", err)
	}
	waittest.For(t, 5*time.Second, "the neuron to be stopped", func() bool {
		st, err := m.Get(ctx, "mortal")
		return err == nil && st.Status == sandbox.StatusStopped
	})
	waittest.For(t, 5*time.Second, "the agent's command to die with it", func() bool { return len(f.processes(c, sleeper)) == 0 })
	if _, err := m.Connect(ctx, "mortal"); !errdefs.IsNotRunning(err) {
		t.Fatalf("connect to a dead neuron: %v, want NotRunningError", err)
	}
	// Create replaces the corpse; the data is still there.
	f.create(m, "mortal")
	c2, err := m.Connect(ctx, "mortal")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c2.ReadFile(ctx, "data"); err != nil || string(got) != "kept" {
		t.Fatalf("after recreate: %q %v", got, err)
	}
}

func testDiscovery(t *testing.T, f *fixture) {
	m1, c1 := f.running("seen")
	ctx := f.ctx
	st1, _ := m1.Get(ctx, "seen")
	m2 := f.manager() // another host process
	all, err := m2.List(ctx)
	if err != nil || len(all) != 1 || all[0].ID != "seen" || all[0].Status != sandbox.StatusRunning || all[0].PID != st1.PID {
		t.Fatalf("list from another manager: %+v %v", all, err)
	}
	c2, err := m2.Connect(ctx, "seen")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*link.Client{c1, c2, c1} {
		res, err := c.Exec(ctx, &link.ExecRequest{Command: protocol.Command{Argv: []string{"echo", "hi"}}})
		if err != nil || string(res.Stdout) != "hi\n" {
			t.Fatalf("exec: %q %v", res.Stdout, err)
		}
	}
	if err := m2.Destroy(ctx, "seen", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 5*time.Second, "the first host to see the neuron stop", func() bool {
		_, err := c1.Health(ctx)
		return errdefs.IsNotRunning(err)
	})
	if st, err := m1.Get(ctx, "seen"); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("first manager after destroy elsewhere: %+v %v", st, err)
	}
}

func testOwnership(t *testing.T, f *fixture) {
	ctx := f.ctx
	exclusive := f.env
	exclusive.Exclusive = true
	owner := f.cfg.New(exclusive)
	f.mgrs = append(f.mgrs, owner)
	f.create(owner, "owned")
	other := f.manager()
	var oe *sandbox.OwnedElsewhereError
	if _, err := other.Connect(ctx, "owned"); !errors.As(err, &oe) {
		t.Fatalf("connect to an owned neuron: %v, want OwnedElsewhereError", err)
	}
	if err := other.Destroy(ctx, "owned", sandbox.DestroyOptions{}); !errors.As(err, &oe) {
		t.Fatalf("destroy an owned neuron: %v, want OwnedElsewhereError", err)
	}
	if st, err := other.Get(ctx, "owned"); err != nil || st.Status != sandbox.StatusRunning || st.Owner == nil {
		t.Fatalf("get of an owned neuron: %+v %v", st, err)
	}
	// The owner's own connects while it starts the neuron again (a
	// daemon's requests during a restart or a restore) wait for the start:
	// never "owned elsewhere" by the owner itself.
	if err := owner.Destroy(ctx, "owned", sandbox.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		_, err := owner.Create(ctx, "owned", f.cfg.Options)
		started <- err
	}()
	for done := false; !done; {
		select {
		case err := <-started:
			if err != nil {
				t.Fatalf("create again: %v", err)
			}
			done = true
		default:
		}
		if _, err := owner.Connect(ctx, "owned"); errors.As(err, &oe) {
			t.Fatalf("the owner's connect while it creates the neuron: %v", err)
		}
	}
	// The owner lets go; anyone may use it again.
	owner.Close()
	c, err := other.Connect(ctx, "owned")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
}
