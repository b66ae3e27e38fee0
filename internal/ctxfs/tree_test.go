package ctxfs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

var operator = ctxfs.Caller{UID: 0, GID: 0}

func TestTreeIsAnFS(t *testing.T) {
	f := standard(t)
	tr := f.tree()
	if err := fstest.TestFS(tr.FS(operator),
		".cortexfs", "neurons/a/status", "neurons/a/state.json", "neurons/a/policy.json", "neurons/a/health.json", "neurons/a/metrics.json",
		"neurons/a/ctl", "neurons/a/processes/10/argv", "neurons/a/processes/10/stdout", "neurons/a/processes/10/exit",
		"neurons/a/terminals/t1/replay", "neurons/a/terminals/t1/screen", "neurons/a/terminals/t1/size",
		"neurons/a/terminals/t1/meta.json", "neurons/a/terminals/t1/input", "neurons/a/receipts/r1.json",
		"neurons/b/status", "sessions/s1/meta.json", "sessions/s1/transcript.jsonl", "agents/coder/AGENTS.md", "audit/log",
	); err != nil {
		t.Fatal(err)
	}
	// What neuron a's uid sees: its own subtree, nothing of b, no
	// operator areas.
	if err := fstest.TestFS(tr.FS(ctxfs.Caller{UID: 1001, GID: 1001}), "neurons/a/status", "neurons/a/processes/10/stdout"); err != nil {
		t.Fatal(err)
	}
}

func TestTreeContent(t *testing.T) {
	f := standard(t)
	fsys := f.tree().FS(operator)
	for p, want := range map[string]string{
		"neurons/a/status":                  "running mode=fake pid=1 created=2026-01-02T03:04:05Z\n",
		"neurons/a/processes/10/argv":       "sh -c 'echo hi'\n",
		"neurons/a/processes/10/stdout":     "hello\n",
		"neurons/a/processes/10/status":     "running pid=10 started=2026-01-02T03:04:05Z\n",
		"neurons/a/processes/10/exit":       "",
		"neurons/a/terminals/t1/size":       "80x24\n",
		"neurons/a/terminals/t1/screen":     "$ \n",
		"neurons/a/terminals/t1/replay":     "\x1b[1m$\x1b[0m ",
		"sessions/s1/transcript.jsonl":      "{\"a\":1}\n{\"b\":2}\n",
		"agents/coder/AGENTS.md":            "# agent\n",
		".cortexfs":                         "cortexfs 1 tok\n",
		"neurons/a/ctl":                     "verbs: stop | restart | snapshot NAME | kill SIG | pause | resume\n",
		"neurons/a/metrics.json":            `{"id":"a","cpuSeconds":1.5}` + "\n",
		"neurons/a/terminals/t1/../t1/size": "",
	} {
		b, err := fs.ReadFile(fsys, p)
		if strings.Contains(p, "..") {
			if err == nil {
				t.Errorf("%s: read, want an error", p)
			}
			continue
		}
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
}

func TestPerUIDVisibility(t *testing.T) {
	f := standard(t)
	tr := f.tree()
	a := tr.FS(ctxfs.Caller{UID: 1001, GID: 1001})
	ents, err := fs.ReadDir(a, "neurons")
	if err != nil || len(ents) != 1 || ents[0].Name() != "a" {
		t.Fatalf("neurons seen by a's uid: %v, %v; want only a", ents, err)
	}
	// Nor the mount's token: only the host's validation reads it.
	if root, _ := fs.ReadDir(a, "."); len(root) != 1 || root[0].Name() != "neurons" {
		t.Errorf("the root as a's uid sees it: %v; want neurons only", root)
	}
	for _, p := range []string{ctxmount.MagicName, "neurons/b/status", "neurons/b", "audit/log", "sessions", "agents/coder/AGENTS.md"} {
		if _, err := fs.ReadFile(a, p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a's uid reads %s: %v; want not-exist", p, err)
		}
	}
	stranger := tr.FS(ctxfs.Caller{UID: 4242, GID: 4242})
	if ents, _ := fs.ReadDir(stranger, "neurons"); len(ents) != 0 {
		t.Errorf("a stranger sees neurons %v", ents)
	}
	// The subtree's owner is the neuron's uid, with the operator's group.
	fi, err := fs.Stat(tr.FS(operator), "neurons/b")
	if err != nil {
		t.Fatal(err)
	}
	if info := fi.Sys().(ctxfs.Info); info.UID != 1002 || info.GID != 0 || info.Perm != 0o750 {
		t.Errorf("neurons/b: uid %d gid %d perm %o; want 1002 0 750", info.UID, info.GID, info.Perm)
	}
}

func TestCtlVerbs(t *testing.T) {
	ctx := context.Background()
	f := standard(t)
	tr := f.tree()
	ok := []struct{ path, line string }{
		{"neurons/a/ctl", "snapshot before-upgrade"},
		{"neurons/a/ctl", "kill SIGTERM"},
		{"neurons/a/processes/10/ctl", "signal KILL"},
		{"neurons/a/terminals/t1/ctl", "resize 120x40"},
		{"neurons/a/terminals/t1/input", "ls\n"},
		{"neurons/a/terminals/t1/ctl", "close"},
		{"neurons/b/ctl", "pause"},
		{"neurons/b/ctl", "resume"},
		{"neurons/b/ctl", "stop"},
	}
	for _, c := range ok {
		if err := tr.WriteFile(ctx, operator, c.path, []byte(c.line)); err != nil {
			t.Errorf("%s < %q: %v", c.path, c.line, err)
		}
	}
	cmds := f.commands()
	if len(cmds) != len(ok) {
		t.Fatalf("commands %+v", cmds)
	}
	if c := cmds[0]; c.Verb != "snapshot" || c.Arg != "before-upgrade" || c.Target != ctxfs.TargetNeuron {
		t.Errorf("snapshot: %+v", c)
	}
	if c := cmds[1]; c.Verb != "kill" || c.Arg != "TERM" {
		t.Errorf("kill: %+v", c)
	}
	if c := cmds[2]; c.Verb != "signal" || c.Arg != "KILL" || c.PID != 10 || c.Target != ctxfs.TargetProcess {
		t.Errorf("signal: %+v", c)
	}
	if c := cmds[3]; c.Cols != 120 || c.Rows != 40 || c.PID != 11 {
		t.Errorf("resize: %+v", c)
	}
	if c := cmds[4]; c.Verb != "input" || string(c.Data) != "ls\n" {
		t.Errorf("input: %+v", c)
	}
	if c := cmds[6]; c.Verb != "pause" || c.Neuron != "b" || c.Target != ctxfs.TargetNeuron {
		t.Errorf("pause: %+v", c)
	}
	if c := cmds[7]; c.Verb != "resume" || c.Neuron != "b" {
		t.Errorf("resume: %+v", c)
	}
	if b, _ := fs.ReadFile(tr.FS(operator), "neurons/b/status"); !strings.HasPrefix(string(b), "stopped") {
		t.Errorf("status after stop: %q", b)
	}

	for _, bad := range []struct{ path, line string }{
		{"neurons/b/ctl", "explode"},
		{"neurons/b/ctl", "snapshot"},
		{"neurons/b/ctl", "kill SIGFOO"},
		{"neurons/a/processes/10/ctl", "stop"},
		{"neurons/a/terminals/t1/ctl", "resize 12by40"},
		{"neurons/b/ctl", "pause now"},
	} {
		err := tr.WriteFile(ctx, operator, bad.path, []byte(bad.line))
		if ctxfs.Errno(err) != syscall.EINVAL {
			t.Errorf("%s < %q: %v; want EINVAL", bad.path, bad.line, err)
		}
		b, _ := fs.ReadFile(tr.FS(operator), bad.path)
		if !strings.Contains(string(b), "last: error") || !strings.Contains(string(b), bad.line) {
			t.Errorf("%s after a bad verb reads %q; want the reason", bad.path, b)
		}
	}
	if len(f.commands()) != len(ok) {
		t.Errorf("a bad verb reached the controller")
	}
	var failed int
	for _, fact := range f.facts {
		if fact["event"] == "ctx.ctl" && fact["ok"] == false {
			failed++
		}
	}
	if failed != 6 || len(f.facts) != len(ok)+6 {
		t.Errorf("audit facts: %d failed of %d: %v", failed, len(f.facts), f.facts)
	}
	for _, fact := range f.facts {
		if fact["verb"] == "input" && fact["line"] != nil {
			t.Errorf("input's keys were recorded: %v", fact)
		}
	}

	// Read-only files refuse writes; so does a read-only tree.
	if err := tr.WriteFile(ctx, operator, "neurons/a/status", []byte("x")); ctxfs.Errno(err) != syscall.EACCES {
		t.Errorf("write to status: %v; want EACCES", err)
	}
	ro := f.tree(func(o *ctxfs.Options) { o.ReadOnly = true })
	if err := ro.WriteFile(ctx, operator, "neurons/b/ctl", []byte("stop")); ctxfs.Errno(err) != syscall.EROFS {
		t.Errorf("write to a read-only tree: %v; want EROFS", err)
	}
}

// A verb that the layers below refuse fails the write with the errno of
// the refusal's class, whichever package made the error: an invalid one
// is EINVAL (it was EIO for any error outside ctxfs's own few), and what
// ctl reads next says why.
func TestCtlRefusalsKeepTheirClass(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{errdefs.New(errdefs.Invalid, "the snapshot does not fit this neuron"), syscall.EINVAL},
		{fmt.Errorf("restart: %w", protocol.Errorf(protocol.CodeBadRequest, "no such signal")), syscall.EINVAL},
		{errdefs.New(errdefs.Exists, "snapshot exists"), syscall.EEXIST},
		{errdefs.New(errdefs.NotRunning, "neuron a is not running"), syscall.EHOSTDOWN},
		{errdefs.New(errdefs.OwnedElsewhere, "owned by pid 1"), syscall.EACCES},
		{errdefs.New(errdefs.Capacity, "no room"), syscall.EIO},
		{context.DeadlineExceeded, syscall.ETIMEDOUT},
	} {
		f := standard(t)
		f.refuse = c.err
		tr := f.tree()
		err := tr.WriteFile(ctx, operator, "neurons/a/ctl", []byte("snapshot s1"))
		if got := ctxfs.Errno(err); got != c.want {
			t.Errorf("refused with %q: %v (%v); want %v", c.err, got, err, c.want)
		}
		if b, _ := fs.ReadFile(tr.FS(operator), "neurons/a/ctl"); !strings.Contains(string(b), c.err.Error()) {
			t.Errorf("ctl after %q reads %q; want the reason", c.err, b)
		}
	}
}

func TestNeuronWritesNeedValidation(t *testing.T) {
	ctx := context.Background()
	f := standard(t)
	tr := f.tree()
	a := ctxfs.Caller{UID: 1001, GID: 1001}
	if err := tr.WriteFile(ctx, a, "neurons/a/ctl", []byte("restart")); ctxfs.Errno(err) != syscall.EROFS {
		t.Fatalf("a neuron's write before validation: %v; want EROFS", err)
	}
	tr.SetValidated(true)
	if err := tr.WriteFile(ctx, a, "neurons/a/ctl", []byte("restart")); err != nil {
		t.Fatalf("a neuron's write after validation: %v", err)
	}
	if err := tr.WriteFile(ctx, a, "neurons/b/ctl", []byte("stop")); ctxfs.Errno(err) != syscall.ENOENT {
		t.Fatalf("a neuron's write to another neuron: %v; want ENOENT", err)
	}
	if c := f.commands(); len(c) != 1 || c[0].UID != 1001 {
		t.Fatalf("commands %+v", c)
	}
}

// Every writable file of the tree reaches a neuron only through the gate:
// the test finds the writable files itself (any file with a write bit, as
// the operator sees the tree), writes each verb there with a gate that
// refuses everything, and fails if a command reached the controller, the
// gate was not asked, or a writable file is one it does not know.
func TestEveryWriteGoesThroughTheGate(t *testing.T) {
	ctx := context.Background()
	f := standard(t)
	f.deny = true
	tr := f.tree()
	verbs := map[string][]string{
		"ctl":    {"stop", "restart", "snapshot s1", "kill TERM", "pause", "resume"}, // a neuron's
		"pctl":   {"signal KILL"},
		"tctl":   {"resize 80x24", "close"},
		"tinput": {"ls\n"},
	}
	var writable []string
	fs.WalkDir(tr.FS(operator), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o222 != 0 {
			writable = append(writable, p)
		}
		return nil
	})
	if len(writable) < 4 {
		t.Fatalf("writable files found: %v", writable)
	}
	for _, p := range writable {
		var kind string
		switch {
		case strings.Contains(p, "/terminals/") && strings.HasSuffix(p, "/input"):
			kind = "tinput"
		case strings.Contains(p, "/terminals/") && strings.HasSuffix(p, "/ctl"):
			kind = "tctl"
		case strings.Contains(p, "/processes/") && strings.HasSuffix(p, "/ctl"):
			kind = "pctl"
		case strings.HasSuffix(p, "/ctl"):
			kind = "ctl"
		default:
			t.Errorf("%s is writable, and this test knows no verbs for it: say how the gate sees its writes", p)
			continue
		}
		for _, line := range verbs[kind] {
			asked := len(f.asked)
			err := tr.WriteFile(ctx, operator, p, []byte(line))
			if ctxfs.Errno(err) != syscall.EPERM {
				t.Errorf("%s < %q with a gate that refuses: %v, want EPERM", p, line, err)
			}
			if len(f.asked) != asked+1 {
				t.Errorf("%s < %q: the gate was asked %d times", p, line, len(f.asked)-asked)
			}
		}
	}
	if cmds := f.commands(); len(cmds) != 0 {
		t.Fatalf("commands reached the controller past a refusing gate: %+v", cmds)
	}
}

// A paused neuron is read without its agent being asked: health.json says
// it is paused, processes/ and terminals/ are empty, status says so, and
// metrics.json still reads (host records).
func TestPausedNeuronIsNotAsked(t *testing.T) {
	f := standard(t)
	tr := f.tree()
	fsys := tr.FS(operator)
	if err := tr.WriteFile(context.Background(), operator, "neurons/a/ctl", []byte("pause")); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.asks = 0
	f.mu.Unlock()
	for p, want := range map[string]string{
		"neurons/a/health.json":  `{"paused":true,"running":false}` + "\n",
		"neurons/a/metrics.json": `{"id":"a","cpuSeconds":1.5}` + "\n",
	} {
		if b, err := fs.ReadFile(fsys, p); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if b, _ := fs.ReadFile(fsys, "neurons/a/status"); !strings.HasPrefix(string(b), "paused ") {
		t.Errorf("status of a paused neuron: %q", b)
	}
	for _, dir := range []string{"neurons/a/processes", "neurons/a/terminals"} {
		if ents, err := fs.ReadDir(fsys, dir); err != nil || len(ents) != 0 {
			t.Errorf("%s of a paused neuron: %v, %v", dir, ents, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asks != 0 {
		t.Errorf("reading a paused neuron asked its agent %d times", f.asks)
	}
}
