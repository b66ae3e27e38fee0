package main_test

import (
	"fmt"
	"io"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/waittest"
)

var ansiSeq = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>])`)

// plain is terminal output without escape sequences and carriage returns.
func plain(s string) string { return strings.ReplaceAll(ansiSeq.ReplaceAllString(s, ""), "\r", "") }

// after waits until the output past offset from contains s (escape
// sequences ignored unless raw) and returns the offset just past it.
func (r *ptyRun) after(t *testing.T, from int, s string, raw bool) int {
	t.Helper()
	end := -1
	if !waittest.Until(30*time.Second, func() bool { end = find(r.output(), from, s, raw); return end >= 0 }) {
		out := r.output()
		t.Fatalf("never saw %q in %q", s, plain(out[min(from, len(out)):]))
	}
	return end
}

// waitRaw waits until the program on the terminal has put it in raw mode:
// its line editor reads keys, not lines. (The master end of a terminal
// reports the termios of its other end.)
func (r *ptyRun) waitRaw(t *testing.T) {
	t.Helper()
	rc, err := r.tty.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw := func() bool {
		var tio *unix.Termios
		var terr error
		if err := rc.Control(func(fd uintptr) { tio, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err != nil || terr != nil {
			return false
		}
		return tio.Lflag&unix.ICANON == 0
	}
	if !waittest.Until(30*time.Second, raw) {
		t.Fatalf("the terminal never went to raw mode; output %q", plain(r.output()))
	}
}

// find returns the offset in out just past the first s after from (in the
// text without escape sequences and carriage returns unless raw), or -1.
func find(out string, from int, s string, raw bool) int {
	if raw {
		if i := strings.Index(out[from:], s); i >= 0 {
			return from + i + len(s)
		}
		return -1
	}
	var text []byte
	var at []int // at[i]: the offset in out of text[i]
	for i := from; i < len(out); {
		if loc := ansiSeq.FindStringIndex(out[i:]); loc != nil && loc[0] == 0 {
			i += loc[1]
			continue
		}
		if out[i] != '\r' {
			text = append(text, out[i])
			at = append(at, i)
		}
		i++
	}
	if j := strings.Index(string(text), s); j >= 0 {
		return at[j+len(s)-1] + 1
	}
	return -1
}

// type_ types on the chat's terminal.
func (r *ptyRun) type_(t *testing.T, s string) {
	t.Helper()
	if _, err := r.tty.Write([]byte(s)); err != nil {
		t.Fatalf("typing %q: %v; output %q", s, err, plain(r.output()))
	}
}

// workspaceFile finds a file of the neuron's workspace on the host
// (process mode keeps it under the overlay directory); "" when there is none.
func workspaceFile(t *testing.T, c *cli, neuron, name string) string {
	t.Helper()
	found := ""
	filepath.WalkDir(filepath.Join(c.home, "overlays", neuron), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name {
			found = p
		}
		return nil
	})
	return found
}

// TestChatInteractiveOnATerminal drives a chat through a real terminal:
// a rendered answer, a suggestion taken with Tab, /model, Ctrl-C
// cancelling a turn and not the chat, /rewind putting the conversation and
// the files back, /fork continuing in a new session.
func TestChatInteractiveOnATerminal(t *testing.T) {
	eachMode(t, chatOnATerminal)
}

var chatSleeps atomic.Int32

func chatOnATerminal(t *testing.T, c *cli) {
	var env []string
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "NO_COLOR=") && !strings.HasPrefix(kv, "TERM=") && !strings.HasPrefix(kv, "GLAMOUR_STYLE=") {
			env = append(env, kv)
		}
	}
	c.env = append(env, "OPENAI_API_KEY=test-key", "TERM=xterm-256color")
	// The command of the turn Ctrl-C cancels: no other test's, nor another mode's.
	sleep := fmt.Sprintf("sleep %d", 8000000+os.Getpid()%100000*10+int(chatSleeps.Add(1)))
	fake := &fakeOpenAI{route: func(body map[string]any) func(io.Writer) {
		if isSuggestionRequest(body) {
			req, _ := lastUser(body)
			if strings.Contains(req, "turn one") {
				return text("edit the notes now")
			}
			return text("")
		}
		req, step := lastUser(body)
		switch {
		case req == "turn one: write notes" && step == 0:
			return toolCall("w1", "write", map[string]any{"path": "notes.txt", "content": "first\n"})
		case req == "turn one: write notes":
			return text("Wrote **notes**.")
		case req == "edit the notes now" && step == 0:
			return toolCall("e1", "edit", map[string]any{"path": "notes.txt", "old_string": "first", "new_string": "second"})
		case req == "edit the notes now":
			return text("Edited.")
		case req == "sleep please" && step == 0:
			return toolCall("s1", "bash", map[string]any{"command": sleep})
		}
		return text(fmt.Sprintf("answer to %s from %v", req, body["model"]))
	}}
	srv := httptest.NewServer(fake)
	// Closed after the chat is killed (cleanups run last first): the
	// server's Close waits for the chat's connections.
	t.Cleanup(srv.Close)
	r := c.onPty(t, 100, 40, "chat", "agent1", "--provider", "openai", "--model", "fake", "--base-url", srv.URL+"/v1")
	at := r.after(t, 0, "Type a request", false)

	// An answer after a tool call, rendered as markdown (bold is drawn
	// bold, not as asterisks), then a suggestion drawn dimmed.
	r.type_(t, "turn one: write notes\r")
	at = r.after(t, at, "→ write notes.txt", false)
	at = r.after(t, at, "Wrote notes.", false)
	if !regexp.MustCompile(`\x1b\[[0-9;]*;1mnotes`).MatchString(r.output()) {
		t.Fatalf("the answer was not rendered: %q", r.output())
	}
	at = r.after(t, at, "\x1b[2medit the notes now", true)
	// Tab takes it; Enter sends it.
	r.type_(t, "\t\r")
	at = r.after(t, at, "Edited.", false)
	if got := workspaceFile(t, c, "agent1", "notes.txt"); got == "" {
		t.Fatal("notes.txt was not written")
	} else if b, _ := os.ReadFile(got); string(b) != "second\n" {
		t.Fatalf("notes.txt: %q", b)
	}

	// /model switches the model of the next requests.
	r.type_(t, "/model openai/fake-2\r")
	at = r.after(t, at, "model openai/fake-2 from the next request on", false)
	r.type_(t, "turn three\r")
	at = r.after(t, at, "answer to turn three from fake-2", false)

	// Ctrl-C cancels the running turn, not the chat.
	r.type_(t, "sleep please\r")
	at = r.after(t, at, "→ bash "+sleep, false)
	waittest.For(t, 30*time.Second, "the turn's "+sleep+" to run", func() bool {
		return len(hostProcessesWhere(func(argv string) bool { return strings.Contains(strings.ReplaceAll(argv, "\x00", " "), sleep) })) > 0
	})
	r.type_(t, "\x03")
	at = r.after(t, at, "[cancelled]", false)

	// /rewind lists the requests and goes back to before the first: the
	// file is gone, and the first request is offered again.
	r.type_(t, "/rewind\r")
	at = r.after(t, at, "rewind to before request (1-4", false)
	r.type_(t, "1\r")
	at = r.after(t, at, "rewound to before request 1: the files are back", false)
	if p := workspaceFile(t, c, "agent1", "notes.txt"); p != "" {
		t.Fatalf("notes.txt survived the rewind: %s", p)
	}
	at = r.after(t, at, "\x1b[2mturn one: write notes", true)
	r.type_(t, "turn again\r") // typing replaces the suggestion
	at = r.after(t, at, "answer to turn again from fake-2", false)
	var last []map[string]any
	for _, b := range fake.requests() {
		if !isSuggestionRequest(b) {
			last = messages(b)
		}
	}
	if len(last) != 2 || content(last[1]) != "turn again" {
		t.Fatalf("after the rewind the model got %d messages: %v", len(last), last)
	}

	// /fork continues in a new session; the old one keeps what it had.
	r.type_(t, "/fork\r")
	at = r.after(t, at, "now in session", false)
	r.type_(t, "in the fork\r")
	r.after(t, at, "answer to in the fork from fake-2", false)
	r.type_(t, "/exit\r")
	if code := r.exit(t); code != 0 {
		t.Fatalf("exit %d: %q", code, plain(r.output()))
	}
	files, _ := filepath.Glob(filepath.Join(c.home, "sessions", "*.jsonl"))
	if len(files) != 2 {
		t.Fatalf("sessions: %v", files)
	}
	var withFork, withModel int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), `"in the fork"`) {
			withFork++
			if !strings.Contains(string(b), `"parentSession"`) || !strings.Contains(string(b), `"turn again"`) {
				t.Fatal("the fork does not hold the conversation before it")
			}
		}
		if strings.Contains(string(b), `"type":"model_change"`) {
			withModel++
		}
	}
	if withFork != 1 || withModel != 2 {
		t.Fatalf("fork in %d sessions, model change in %d", withFork, withModel)
	}
	// Every request after the switch used the new model; nothing the
	// suggestion said was sent unless taken.
	sent := 0
	for _, b := range fake.requests() {
		if req, _ := lastUser(b); !isSuggestionRequest(b) && req == "edit the notes now" {
			sent++
		}
	}
	if sent != 2 {
		t.Fatalf("the taken suggestion was sent %d times (want the two steps of its turn)", sent)
	}
	if slices.ContainsFunc(fake.requests(), func(b map[string]any) bool {
		req, _ := lastUser(b)
		return !isSuggestionRequest(b) && req == "turn three" && b["model"] != "fake-2"
	}) {
		t.Fatal("a request after /model used the old model")
	}
}

// TestChatRestoresTheTerminal ends a chat waiting at its prompt (the
// terminal in raw mode) with Ctrl-D and with SIGTERM: either way the shell
// that ran it gets its terminal back as it was (stty says so).
func TestChatRestoresTheTerminal(t *testing.T) {
	c := newCLI(t, "process")
	c.env = append(c.env, "OPENAI_API_KEY=test-key")
	srv := httptest.NewServer(&fakeOpenAI{})
	defer srv.Close()
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, r *ptyRun)
		code string
	}{
		{"ctrl-d", func(t *testing.T, r *ptyRun) { r.type_(t, "\x04") }, "exit=0"},
		{"sigterm", func(t *testing.T, r *ptyRun) {
			pid := childOf(t, r.cmd.Process.Pid)
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}, "exit=143"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(binDir, "nsys-cortex")
			script := bin + " chat agent1 --provider openai --model fake --base-url " + srv.URL + "/v1; echo exit=$?; stty -a"
			r := &ptyRun{cmd: exec.Command("sh", "-c", script), done: make(chan error, 1)}
			r.cmd.Env = c.env
			r.start(t, 100, 30)
			r.after(t, 0, "Type a request", false)
			r.waitRaw(t) // the editor is reading
			tc.end(t, r)
			if code := r.exit(t); code != 0 {
				t.Fatalf("sh: %d", code)
			}
			out := plain(r.output())
			if !strings.Contains(out, tc.code) || !regexp.MustCompile(`[^-]icanon`).MatchString(out) || !regexp.MustCompile(`[^-]echo `).MatchString(out) {
				t.Fatalf("the terminal after the chat: %q", out)
			}
		})
	}
}

// childOf returns the pid of a child of process pid (waiting for one).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	child := 0
	found := func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			if fields := strings.Fields(string(b)); len(fields) > 0 {
				if c, err := strconv.Atoi(fields[0]); err == nil {
					child = c
					return true
				}
			}
		}
		return false
	}
	waittest.For(t, 30*time.Second, fmt.Sprintf("a child of process %d", pid), found)
	return child
}
