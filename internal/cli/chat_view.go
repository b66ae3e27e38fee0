//go:build !cortex_light

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/charmbracelet/glamour"
	"github.com/mattn/go-runewidth"
	"golang.org/x/term"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/llm"
	"github.com/nsys-cortex/cortex/internal/loop"
)

// chatView shows a chat's events: the answer streams to stdout (and, on a
// terminal without NO_COLOR, is drawn again as rendered markdown once
// finished), tool calls and results go compactly to stderr, and a spinner
// on stderr (a terminal) says what is happening while the model thinks or
// a tool runs.
type chatView struct {
	out, errw io.Writer
	outFd     int  // stdout's terminal, or -1
	markdown  bool // render answers (stdout is a terminal, NO_COLOR unset)
	spinning  bool // draw the spinner (stderr is a terminal)

	mu      sync.Mutex
	block   strings.Builder // the answer text streamed since the last block ended
	midLine bool            // stdout's cursor is not at a line start
	inTurn  bool
	sp      *spin
	label   string // what the spinner says
	wg      sync.WaitGroup
	md      *glamour.TermRenderer
	mdWidth int
}

// spin is one spinner run: it draws until stopped.
type spin struct {
	stop    chan struct{}
	stopped bool // under chatView.mu: the goroutine draws no more
	frame   int
	start   time.Time
}

// terminalFd returns the file descriptor of w when it is a terminal, or -1.
func terminalFd(w any) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return -1
	}
	return int(f.Fd())
}

// newChatView returns the view of this command line's output; decorate
// turns on markdown and the spinner where the terminal allows.
func (a *App) newChatView(decorate bool) *chatView {
	v := &chatView{out: a.Stdout, errw: a.Stderr, outFd: terminalFd(a.Stdout)}
	noColor := os.Getenv("NO_COLOR") != ""
	v.markdown = decorate && v.outFd >= 0 && !noColor
	v.spinning = decorate && terminalFd(a.Stderr) >= 0
	return v
}

// close stops the spinner and waits for it.
func (v *chatView) close() {
	v.mu.Lock()
	v.spinStop()
	v.mu.Unlock()
	v.wg.Wait()
}

// begin starts a turn's display: the spinner until the answer streams.
func (v *chatView) begin() { v.beginWith("thinking…") }

// beginWith starts the display of an operation: the spinner saying label.
func (v *chatView) beginWith(label string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inTurn = true
	v.spinStart(label)
}

// end ends the display of an operation that has no turn_end event.
func (v *chatView) end() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endBlock()
	v.spinStop()
	v.inTurn = false
}

// note prints a line of the chat's own on stderr.
func (v *chatView) note(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endBlock()
	v.spinStop()
	fmt.Fprintf(v.errw, format+"\n", args...)
}

// event shows one event.
func (v *chatView) event(e chatrun.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch e.Kind {
	case loop.EventModel:
		switch e.Model.Kind {
		case llm.EventText:
			v.spinStop()
			text := cleanText(e.Model.Text)
			fmt.Fprint(v.out, text)
			v.block.WriteString(text)
			if text != "" {
				v.midLine = !strings.HasSuffix(text, "\n")
			}
		case llm.EventToolStart:
			v.endBlock()
			if e.Model.ToolCall != nil {
				v.spinStart("preparing " + e.Model.ToolCall.Name + "…")
			}
		}
	case loop.EventToolStart:
		v.endBlock()
		v.spinStop()
		summary := callSummary(e.Call.Input)
		fmt.Fprintf(v.errw, "  → %s %s\n", e.Call.Name, summary)
		v.spinStart(strings.TrimSpace(e.Call.Name + " " + summary))
	case loop.EventToolResult:
		v.spinStop()
		mark := "✓"
		if e.Result.IsError {
			mark = "✗"
		}
		fmt.Fprintf(v.errw, "    %s %s\n", mark, resultSummary(e.Result.Text))
		v.spinStart("thinking…")
	case loop.EventLoop:
		v.endBlock()
		v.spinStop()
		fmt.Fprintf(v.errw, "  ! loop detector (%s, %s): %s\n", e.Finding.Pattern, e.Finding.Verdict, cleanText(e.Finding.Message))
		v.spinStart(v.label)
	case loop.EventCompaction:
		v.endBlock()
		v.spinStop()
		fmt.Fprintf(v.errw, "  … %s\n", e.Text)
		v.spinStart("thinking…")
	case chatrun.EventCheckpoint:
		label := v.label
		v.endBlock()
		v.spinStop()
		fmt.Fprintf(v.errw, "  ⎘ %s\n", e.Text)
		v.spinStart(label)
	case loop.EventTurnEnd:
		v.endBlock()
		v.spinStop()
		v.inTurn = false
		if e.Stop != loop.StopDone {
			fmt.Fprintf(v.errw, "[%s] %s\n", e.Stop, cleanText(e.Text))
		}
	}
}

// endBlock ends the answer text streamed so far: on a terminal it is drawn
// again as rendered markdown, in place, when it still fits on the screen
// (text that scrolled off cannot be taken back, and stays as it came).
func (v *chatView) endBlock() {
	text := v.block.String()
	v.block.Reset()
	if text == "" {
		return
	}
	if v.markdown {
		cols, rows, err := term.GetSize(v.outFd)
		if err == nil && cols > 0 {
			if used := screenRows(text, cols); used < rows {
				if rendered, err := v.render(text, cols); err == nil {
					if used > 1 {
						fmt.Fprintf(v.out, "\x1b[%dA", used-1)
					}
					fmt.Fprint(v.out, "\r\x1b[J", rendered)
					v.midLine = false
					return
				}
			}
		}
	}
	if v.midLine {
		fmt.Fprintln(v.out)
		v.midLine = false
	}
}

// render renders markdown for a terminal cols wide (GLAMOUR_STYLE names
// another style or a style file; the default is dark).
func (v *chatView) render(text string, cols int) (string, error) {
	width := max(cols-4, 20)
	if v.md == nil || v.mdWidth != width {
		style := glamour.WithStandardStyle("dark")
		if s := os.Getenv("GLAMOUR_STYLE"); s != "" {
			style = glamour.WithStylePath(s)
		}
		md, err := glamour.NewTermRenderer(style, glamour.WithWordWrap(width))
		if err != nil {
			return "", err
		}
		v.md, v.mdWidth = md, width
	}
	out, err := v.md.Render(text)
	if err != nil {
		return "", err
	}
	return strings.Trim(out, "\n") + "\n", nil
}

// screenRows is how many terminal rows text took when written from the
// start of a row on a terminal cols wide; the cursor is on the last.
func screenRows(text string, cols int) int {
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		w := 0
		for _, r := range line {
			if r == '\t' {
				w += 8 - w%8
				continue
			}
			w += runewidth.RuneWidth(r)
		}
		rows += max(1, (w+cols-1)/cols)
	}
	return rows
}

// spinStart shows the spinner saying label (called with v.mu held).
func (v *chatView) spinStart(label string) {
	v.label = label
	if !v.spinning || !v.inTurn {
		return
	}
	if v.sp != nil {
		v.drawSpin(v.sp)
		return
	}
	sp := &spin{stop: make(chan struct{}), start: time.Now()}
	v.sp = sp
	v.drawSpin(sp)
	v.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sp.stop:
				return
			case <-t.C:
			}
			v.mu.Lock()
			if sp.stopped {
				v.mu.Unlock()
				return
			}
			sp.frame++
			v.drawSpin(sp)
			v.mu.Unlock()
		}
	})
}

var spinFrames = []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")

// drawSpin draws the spinner line on stderr (called with v.mu held).
func (v *chatView) drawSpin(sp *spin) {
	line := fmt.Sprintf("%c %s", spinFrames[sp.frame%len(spinFrames)], v.label)
	if s := time.Since(sp.start); s >= time.Second {
		line += fmt.Sprintf(" (%ds)", int(s.Seconds()))
	}
	cols := 80
	if fd := terminalFd(v.errw); fd >= 0 {
		if c, _, err := term.GetSize(fd); err == nil && c > 0 {
			cols = c
		}
	}
	if v.midLine {
		// The answer is mid-line on the same terminal: the spinner waits
		// for its line to end rather than overwrite it.
		return
	}
	fmt.Fprint(v.errw, "\r\x1b[K"+runewidth.Truncate(line, cols-1, "…"))
}

// spinStop takes the spinner off the screen (called with v.mu held).
func (v *chatView) spinStop() {
	if v.sp == nil {
		return
	}
	v.sp.stopped = true
	close(v.sp.stop)
	v.sp = nil
	if !v.midLine {
		fmt.Fprint(v.errw, "\r\x1b[K")
	}
}

// cleanText drops control characters other than newline and tab from
// text a model wrote: it is drawn on the user's terminal, where an escape
// sequence would act.
func cleanText(s string) string {
	clean := true
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return -1
		}
		return r
	}, s)
}

// callSummary is a tool call's input in a few words: its command, path,
// pattern or task, after its action.
func callSummary(input json.RawMessage) string {
	var m map[string]any
	if err := json.Unmarshal(input, &m); err != nil {
		return summarise(string(input), 80)
	}
	var parts []string
	if s, ok := m["action"].(string); ok && s != "" {
		parts = append(parts, s)
	}
	for _, k := range []string{"command", "path", "pattern", "query", "name", "task", "message", "key", "session", "process"} {
		if s, ok := m[k].(string); ok && s != "" {
			parts = append(parts, s)
			break
		}
	}
	if len(parts) == 0 {
		return summarise(string(input), 80)
	}
	return summarise(strings.Join(parts, " "), 80)
}

// resultSummary is a tool result's first line and how many follow.
func resultSummary(text string) string {
	text = strings.TrimSpace(text)
	first, rest, _ := strings.Cut(text, "\n")
	s := summarise(first, 100)
	if n := strings.Count(rest, "\n"); rest != "" {
		s += fmt.Sprintf(" (+%d lines)", n+1)
	}
	if s == "" {
		s = "(no output)"
	}
	return s
}

// summarise is s on one line, at most n characters.
func summarise(s string, n int) string {
	s = cleanText(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// firstLine is the first line of s, at most n characters.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return summarise(s, n)
}
