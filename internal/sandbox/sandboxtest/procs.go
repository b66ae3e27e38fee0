package sandboxtest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// collector gathers output delivered by ProcAttach/PtyFollow.
type collector struct {
	mu      sync.Mutex
	streams map[string]*bytes.Buffer
	gaps    int
}

func (c *collector) add(stream string, off int64, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		c.streams = map[string]*bytes.Buffer{}
	}
	if strings.HasPrefix(stream, protocol.StreamGap) {
		c.gaps++
		return nil
	}
	b := c.streams[stream]
	if b == nil {
		b = &bytes.Buffer{}
		c.streams[stream] = b
	}
	b.Write(p)
	return nil
}

func (c *collector) get(stream string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.streams[stream]; b != nil {
		return b.String()
	}
	return ""
}

func testProcesses(t *testing.T, f *fixture) {
	m, c := f.running("bg")
	ctx := f.ctx
	t.Run("AttachFollowAndReplay", func(t *testing.T) {
		info, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("echo one; echo warn >&2; sleep 0.3; echo two; exit 3")})
		if err != nil || info.PID <= 0 || !info.Running {
			t.Fatalf("%+v %v", info, err)
		}
		var live collector
		end, err := c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, live.add)
		if err != nil {
			t.Fatal(err)
		}
		if end.Running || end.ExitCode != 3 || live.get("stdout") != "one\ntwo\n" || live.get("stderr") != "warn\n" {
			t.Fatalf("%+v stdout=%q stderr=%q", end, live.get("stdout"), live.get("stderr"))
		}
		// A later attach, from another host process, replays from any offset.
		m2 := f.manager()
		c2, err := m2.Connect(ctx, "bg")
		if err != nil {
			t.Fatal(err)
		}
		var replay collector
		if _, err := c2.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, StdoutOffset: 4}, replay.add); err != nil {
			t.Fatal(err)
		}
		if replay.get("stdout") != "two\n" || replay.get("stderr") != "warn\n" {
			t.Fatalf("replay: %q %q", replay.get("stdout"), replay.get("stderr"))
		}
		list, err := c2.ProcList(ctx)
		if err != nil || len(list) == 0 || list[len(list)-1].PID != info.PID || list[len(list)-1].StdoutEnd != 8 {
			t.Fatalf("list: %+v %v", list, err)
		}
	})
	t.Run("OutlivesTheHost", func(t *testing.T) {
		m2 := f.manager()
		c2, err := m2.Connect(ctx, "bg")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c2.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("for i in 1 2 3; do echo tick $i; sleep 0.1; done")})
		if err != nil {
			t.Fatal(err)
		}
		m2.Close() // the host that started it goes away
		var out collector
		end, err := c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, out.add)
		if err != nil || end.ExitCode != 0 || out.get("stdout") != "tick 1\ntick 2\ntick 3\n" {
			t.Fatalf("%+v %q %v", end, out.get("stdout"), err)
		}
	})
	t.Run("InputAndSignal", func(t *testing.T) {
		info, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("while read l; do echo got $l; done; echo eof"), Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ProcInput(ctx, info.PID, []byte("a\nb\n"), true); err != nil {
			t.Fatal(err)
		}
		var out collector
		end, err := c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, out.add)
		if err != nil || out.get("stdout") != "got a\ngot b\neof\n" || end.ExitCode != 0 {
			t.Fatalf("%q %+v %v", out.get("stdout"), end, err)
		}
		// A signal reaches the whole process group: the shell and its child.
		child := uniqueSleep()
		info, err = c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh(strings.Join(child, " ") + " & wait")})
		if err != nil {
			t.Fatal(err)
		}
		waittest.For(t, 5*time.Second, "the child to start", func() bool { return len(f.processes(c, child)) > 0 })
		if err := c.ProcSignal(ctx, info.PID, "TERM"); err != nil {
			t.Fatal(err)
		}
		end, err = c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, (&collector{}).add)
		if err != nil || end.Running || end.Signal != "SIGTERM" {
			t.Fatalf("after TERM: %+v %v", end, err)
		}
		waittest.For(t, 5*time.Second, "the group's child to die", func() bool { return len(f.processes(c, child)) == 0 })
		if err := c.ProcSignal(ctx, info.PID, "TERM"); !protocol.HasCode(err, protocol.CodeNotFound) {
			t.Fatalf("signal an exited process: %v, want NOT_FOUND", err)
		}
		if err := c.ProcSignal(ctx, 999999, "TERM"); !protocol.HasCode(err, protocol.CodeNotFound) {
			t.Fatalf("signal an unknown process: %v, want NOT_FOUND", err)
		}
		if err := c.ProcSignal(ctx, info.PID, "NOSUCHSIG"); !protocol.HasCode(err, protocol.CodeBadRequest) {
			t.Fatalf("bad signal: %v, want BAD_REQUEST", err)
		}
	})
	t.Run("BoundedRing", func(t *testing.T) {
		info, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: sh("head -c 300000 /dev/zero; echo END"), RingBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var out collector
		end, err := c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID, Follow: true}, out.add)
		if err != nil || end.StdoutEnd != 300004 {
			t.Fatalf("%+v %v", end, err)
		}
		// A late attach from offset 0 gets a gap, then the last 64 KiB.
		var late collector
		if _, err := c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: info.PID}, late.add); err != nil {
			t.Fatal(err)
		}
		if late.gaps != 1 || len(late.get("stdout")) != 64<<10 || !strings.HasSuffix(late.get("stdout"), "END\n") {
			t.Fatalf("late attach: gaps=%d len=%d", late.gaps, len(late.get("stdout")))
		}
	})
	t.Run("MissingProgram", func(t *testing.T) {
		if _, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: protocol.Command{Argv: []string{"no-such-program-xyz"}}}); !protocol.HasCode(err, protocol.CodeNotFound) {
			t.Fatalf("%v, want NOT_FOUND", err)
		}
	})
	_ = m
}

func testPty(t *testing.T, f *fixture) {
	_, c := f.running("tty")
	ctx := f.ctx
	info, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"sh"}}, Cols: 100, Rows: 30})
	if err != nil || !info.Pty || info.Cols != 100 {
		t.Fatalf("%+v %v", info, err)
	}
	if err := c.PtyWrite(ctx, info.PID, []byte("stty size; echo $((6*7)); tty\n")); err != nil {
		t.Fatal(err)
	}
	var screen strings.Builder
	var off int64
	waittest.For(t, 10*time.Second, "the PTY's answer", func() bool {
		res, data, err := c.PtyRead(ctx, &protocol.PtyReadArgs{PID: info.PID, Offset: off, WaitMs: 200})
		if err != nil {
			t.Fatal(err)
		}
		screen.Write(data)
		off = res.Next
		return strings.Contains(screen.String(), "42") && strings.Contains(screen.String(), "/dev/pts/")
	})
	if !strings.Contains(screen.String(), "30 100") {
		t.Fatalf("stty size did not report the spawn size: %q", screen.String())
	}
	if err := c.PtyResize(ctx, info.PID, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.PtyWrite(ctx, info.PID, []byte("stty size\n")); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 10*time.Second, "the new size", func() bool {
		res, data, err := c.PtyRead(ctx, &protocol.PtyReadArgs{PID: info.PID, Offset: off, WaitMs: 200})
		if err != nil {
			t.Fatal(err)
		}
		screen.Write(data)
		off = res.Next
		return strings.Contains(screen.String(), "40 120")
	})
	// Replay from 0 returns the whole session so far.
	res, data, err := c.PtyRead(ctx, &protocol.PtyReadArgs{PID: info.PID, Max: 1 << 20})
	if err != nil || res.Offset != 0 || !strings.Contains(string(data), "42") {
		t.Fatalf("replay: %+v %q %v", res, data, err)
	}
	if err := c.PtyWrite(ctx, info.PID, []byte("exit 5\n")); err != nil {
		t.Fatal(err)
	}
	var out collector
	end, err := c.PtyFollow(ctx, info.PID, off, false, out.add)
	if err != nil || end.Info == nil || end.Info.Running || end.Info.ExitCode != 5 {
		t.Fatalf("follow to the end: %+v %v", end, err)
	}
	// Closing a PTY hangs up its shell.
	info2, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"sh"}}})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := c.PtyClose(ctx, info2.PID)
	if err != nil || closed.Running {
		t.Fatalf("close: %+v %v", closed, err)
	}
	if err := c.PtyWrite(ctx, info2.PID, []byte("x")); err == nil {
		t.Fatal("write to a closed PTY succeeded")
	}
	if _, err := c.PtySpawn(ctx, &protocol.PtySpawnArgs{Command: protocol.Command{Argv: []string{"sh"}}, Cols: -1}); !protocol.HasCode(err, protocol.CodeBadRequest) {
		t.Fatalf("bad size: %v", err)
	}
}
