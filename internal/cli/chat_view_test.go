//go:build !cortex_light

package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/tools"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// lockedBuffer is a buffer the spinner's goroutine and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func textEvent(s string) chatrun.Event {
	return chatrun.Event{Event: loop.Event{Kind: loop.EventModel, Model: &llm.Event{Kind: llm.EventText, Text: s}}}
}

func TestChatViewSpinnerAndToolLines(t *testing.T) {
	var out, errw lockedBuffer
	v := &chatView{out: &out, errw: &errw, outFd: -1, spinning: true}
	call := &llm.ToolCall{ID: "1", Name: "bash", Input: json.RawMessage(`{"command":"go test ./..."}`)}
	v.begin()
	v.event(chatrun.Event{Event: loop.Event{Kind: loop.EventToolStart, Call: call}})
	waittest.For(t, 30*time.Second, "the spinner to turn", func() bool { return strings.Contains(errw.String(), "⠙ bash go test ./...") })
	v.event(chatrun.Event{Event: loop.Event{Kind: loop.EventToolResult, Call: call, Result: &tools.Result{Text: "ok  pkg\nok  pkg2\n"}}})
	v.event(textEvent("All **green**."))
	v.event(chatrun.Event{Event: loop.Event{Kind: loop.EventTurnEnd, Stop: loop.StopDone}})
	v.close() // waits for the spinner's goroutine
	e := errw.String()
	if !strings.Contains(e, "  → bash go test ./...\n") || !strings.Contains(e, "    ✓ ok pkg (+1 lines)\n") {
		t.Fatalf("stderr %q", e)
	}
	if !strings.Contains(e, "⠙ bash go test ./...") || !strings.HasSuffix(e, "\r\x1b[K") {
		t.Fatalf("the spinner did not turn, or was left on the screen: %q", e)
	}
	if o := out.String(); o != "All **green**.\n" {
		t.Fatalf("stdout (not a terminal: plain) %q", o)
	}
}

func TestChatViewRendersMarkdownInPlace(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skip("needs a pseudo-terminal: ", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 60, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	var screen lockedBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, ptmx); close(copied) }()
	v := &chatView{out: tty, errw: io.Discard, outFd: int(tty.Fd()), markdown: true}
	v.begin()
	v.event(textEvent("# Title\n\nSome **bold** words and a list:\n\n"))
	v.event(textEvent("- one\n- two"))
	v.event(chatrun.Event{Event: loop.Event{Kind: loop.EventTurnEnd, Stop: loop.StopDone}})
	v.close()
	tty.Close()
	<-copied
	raw := screen.String()
	// The streamed text (6 rows; the cursor on the last) is erased in place
	// and the rendering drawn instead: bold as bold, the list with bullets.
	if !strings.Contains(raw, "- two\x1b[5A\r\x1b[J") {
		t.Fatalf("the streamed text was not taken back: %q", raw)
	}
	if !regexp.MustCompile(`\x1b\[[0-9;]*;1mbold`).MatchString(raw) || !strings.Contains(raw, "• ") {
		t.Fatalf("not rendered: %q", raw)
	}
	// No rendered line is wider than the terminal.
	ansi := regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	for _, line := range strings.Split(raw[strings.Index(raw, "\x1b[J"):], "\n") {
		if w := len([]rune(strings.TrimRight(ansi.ReplaceAllString(line, ""), "\r"))); w > 60 {
			t.Fatalf("a rendered line is %d columns wide: %q", w, line)
		}
	}
}
