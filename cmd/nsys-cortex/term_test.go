package main_test

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

// ptyRun runs the CLI on a terminal of its own; its output is collected.
type ptyRun struct {
	cmd  *exec.Cmd
	tty  interface{ Write([]byte) (int, error) }
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (c *cli) onPty(t *testing.T, cols, rows uint16, args ...string) *ptyRun {
	t.Helper()
	r := &ptyRun{cmd: c.command(args...), done: make(chan error, 1)}
	r.start(t, cols, rows)
	return r
}

// start runs r.cmd on a new terminal of that size and collects its output.
func (r *ptyRun) start(t *testing.T, cols, rows uint16) {
	t.Helper()
	tty, err := pty.StartWithSize(r.cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	r.tty = tty
	copied := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				close(copied)
				return
			}
		}
	}()
	go func() {
		err := r.cmd.Wait()
		// Read what the command wrote before it exited: the reads end (EIO)
		// once nothing holds the terminal and its buffer is drained. Closing
		// it as soon as the command exits throws that output away (one run
		// in ten of a final burst, TestPtyRunKeepsTheLastOutput); a
		// descendant that keeps the terminal open is given a bound.
		select {
		case <-copied:
		case <-time.After(10 * time.Second):
		}
		tty.Close()
		<-copied
		r.done <- err
	}()
	// The command leads its own session (pty.Start): its whole process
	// group ends with the test, children of a shell included.
	t.Cleanup(func() { syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) })
}

// TestPtyRunKeepsTheLastOutput: a command that writes a final burst and
// exits at once has all of it collected, every time.
func TestPtyRunKeepsTheLastOutput(t *testing.T) {
	const size = 8000 // within what a terminal buffers: written before the exit is seen
	for i := 0; i < 50; i++ {
		r := &ptyRun{cmd: exec.Command("sh", "-c", "stty raw -echo; head -c 8000 /dev/zero | tr '\\0' a"), done: make(chan error, 1)}
		r.start(t, 80, 24)
		if code := r.exit(t); code != 0 || len(r.output()) != size {
			t.Fatalf("run %d: exit %d, %d bytes of %d", i, code, len(r.output()), size)
		}
	}
}

func (r *ptyRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// waitFor waits until the output contains s.
func (r *ptyRun) waitFor(t *testing.T, s string) {
	t.Helper()
	if !waittest.Until(30*time.Second, func() bool { return strings.Contains(r.output(), s) }) {
		t.Fatalf("never saw %q in %q", s, r.output())
	}
}

// exit waits for the CLI and returns its status.
func (r *ptyRun) exit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-r.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		t.Fatalf("the CLI did not exit; output %q", r.output())
	}
	return -1
}

func TestTerminals(t *testing.T) {
	eachMode(t, func(t *testing.T, c *cli) {
		c.ok("create", "tt")
		// A shell, detached: it runs on.
		sh := c.onPty(t, 100, 30, "shell", "tt")
		sh.tty.Write([]byte("echo first-$((20+1))\n"))
		sh.waitFor(t, "first-21")
		sh.tty.Write([]byte{0x10, 0x11}) // Ctrl-P Ctrl-Q
		if code := sh.exit(t); code != 0 || !strings.Contains(sh.output(), "detached from terminal") {
			t.Fatalf("detach: %d %q", code, sh.output())
		}
		id := strings.TrimSpace(c.ok("term", "list", "tt", "-o", "name"))
		if !strings.HasPrefix(id, "t") || strings.Contains(id, "\n") {
			t.Fatalf("term list: %q", id)
		}
		// Watchers see the replay and what comes; a second writer is refused.
		w1 := c.onPty(t, 80, 24, "attach", "--watch", "tt", id)
		w2 := c.onPty(t, 80, 24, "attach", "--watch", "tt", id)
		w1.waitFor(t, "first-21")
		w2.waitFor(t, "first-21")
		wr := c.onPty(t, 91, 33, "attach", "tt", id)
		wr.waitFor(t, "first-21") // the newcomer sees the replay
		if _, errs, code := c.run("", "attach", "tt", id); code != 125 || !strings.Contains(errs, "already has a writer") {
			t.Fatalf("a second writer: %d %q", code, errs)
		}
		wr.tty.Write([]byte("stty size; echo second-$((40+2)); exit 5\n"))
		for _, r := range []*ptyRun{wr, w1, w2} {
			r.waitFor(t, "second-42")
			if code := r.exit(t); code != 5 {
				t.Fatalf("exit through attach: %d %q", code, r.output())
			}
		}
		if !strings.Contains(wr.output(), "33 91") {
			t.Fatalf("the writer's size did not reach the terminal: %q", wr.output())
		}
		// Its history outlives the neuron's agent: destroy, create, read it.
		c.ok("destroy", "tt")
		c.ok("create", "tt")
		list := c.ok("term", "list", "tt")
		if !strings.Contains(list, id) || !strings.Contains(list, "exited 5") {
			t.Fatalf("after recreate: %q", list)
		}
		again := c.onPty(t, 80, 24, "attach", "--watch", "tt", id)
		again.waitFor(t, "second-42")
		if code := again.exit(t); code != 5 {
			t.Fatalf("%d", code)
		}
		// term kill ends a running one.
		sh = c.onPty(t, 80, 24, "shell", "tt")
		sh.tty.Write([]byte("echo re''ady\n"))
		sh.waitFor(t, "ready")
		sh.tty.Write([]byte{0x10, 0x11})
		sh.exit(t)
		var running string
		for _, l := range strings.Split(c.ok("term", "list", "tt"), "\n") {
			if strings.Contains(l, "running") {
				running = strings.Fields(l)[0]
			}
		}
		if running == "" {
			t.Fatal("no running terminal")
		}
		c.ok("term", "kill", "tt", running)
		if list := c.ok("term", "list", "tt"); strings.Contains(list, "running") {
			t.Fatalf("after kill: %q", list)
		}
	})
}
