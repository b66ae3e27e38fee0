//go:build !cortex_light

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// errPromptInterrupt is Ctrl-C at the prompt.
var errPromptInterrupt = errors.New("interrupted at the prompt")

// signalError is a signal that ended the reading of a line (the terminal
// was restored first).
type signalError struct{ sig syscall.Signal }

func (e *signalError) Error() string { return "stopped by " + e.sig.String() }

// lineEditor reads lines from a terminal: editing keys, a history, and
// ghost text (a suggestion drawn dimmed after the prompt, which Tab or
// Right takes and any typing replaces). The terminal is in raw mode only
// while a line is being read, and is put back before readLine returns,
// whatever ends it: Enter, Ctrl-C, Ctrl-D, the context, SIGTERM or SIGHUP.
// Between lines (while a turn runs) it is the terminal it was, so Ctrl-C
// is SIGINT and cancels the turn.
type lineEditor struct {
	in      int       // the terminal's fd (stdin)
	out     io.Writer // where the line is drawn (stderr, the same terminal)
	history []string
}

// edit is the state of the line being read.
type edit struct {
	prompt string
	buf    []rune
	pos    int // cursor, an index into buf
	scroll int // first rune shown
	ghost  string
	hist   int    // index into history while browsing it
	draft  []rune // the line being typed before browsing
}

// readLine reads one line. ghosts delivers ghost text that arrives while
// waiting (a suggestion); ghost is shown from the start.
func (le *lineEditor) readLine(ctx context.Context, prompt, ghost string, ghosts <-chan string) (string, error) {
	old, err := term.MakeRaw(le.in)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	defer term.Restore(le.in, old)
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	defer unix.Close(wake[0])
	defer unix.Close(wake[1])

	// One goroutine turns signals, ghost text and the context's end into a
	// byte on the wake pipe; it ends before the pipe is closed.
	var (
		mu       sync.Mutex
		gotSig   syscall.Signal
		gotGhost *string
	)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ctxDone := ctx.Done()
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				mu.Lock()
				if sig := s.(syscall.Signal); sig != syscall.SIGWINCH || gotSig == 0 {
					gotSig = sig
				}
				mu.Unlock()
			case g, ok := <-ghosts:
				if !ok {
					ghosts = nil
					continue
				}
				mu.Lock()
				gotGhost = &g
				mu.Unlock()
			case <-ctxDone:
				ctxDone = nil
			}
			_, _ = unix.Write(wake[1], []byte{1}) // a full pipe already wakes the reader
		}
	})
	defer wg.Wait()
	defer close(done)

	e := &edit{prompt: prompt, ghost: ghost, hist: len(le.history)}
	le.draw(e)
	var pending []byte
	buf := make([]byte, 256)
	for {
		fds := []unix.PollFd{{Fd: int32(le.in), Events: unix.POLLIN}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return "", fmt.Errorf("terminal: %w", err)
		}
		if fds[1].Revents != 0 {
			for {
				if n, _ := unix.Read(wake[0], buf); n <= 0 {
					break
				}
			}
			mu.Lock()
			sig, g := gotSig, gotGhost
			gotSig, gotGhost = 0, nil
			mu.Unlock()
			switch {
			case sig == syscall.SIGWINCH:
				le.draw(e)
			case sig != 0:
				le.finish(e, "")
				return "", &signalError{sig: sig}
			case ctx.Err() != nil:
				le.finish(e, "")
				return "", ctx.Err()
			}
			if g != nil && len(e.buf) == 0 {
				e.ghost = *g
				le.draw(e)
			}
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(le.in, buf)
		if n <= 0 {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			le.finish(e, "")
			return "", io.EOF
		}
		pending = append(pending, buf[:n]...)
		for len(pending) > 0 {
			k, used := decodeKey(pending)
			if used == 0 {
				break // the rest of a sequence is still on its way
			}
			pending = pending[used:]
			line, err, end := le.key(e, k)
			if end {
				return line, err
			}
		}
	}
}

// key is one decoded key press: a rune to insert, or a named key.
type key struct {
	r    rune
	name string
}

// decodeKey decodes the key at the start of b and how many bytes it took
// (0: b holds only part of it).
func decodeKey(b []byte) (key, int) {
	c := b[0]
	switch {
	case c == 0x1b:
		if len(b) == 1 {
			return key{name: "esc"}, 1
		}
		switch b[1] {
		case '[':
			i := 2
			for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == ';') {
				i++
			}
			if i == len(b) {
				return key{}, 0
			}
			names := map[string]string{"A": "up", "B": "down", "C": "right", "D": "left", "H": "home", "F": "end",
				"1~": "home", "7~": "home", "4~": "end", "8~": "end", "3~": "delete"}
			return key{name: names[string(b[2:i+1])]}, i + 1
		case 'O':
			if len(b) < 3 {
				return key{}, 0
			}
			names := map[byte]string{'A': "up", 'B': "down", 'C': "right", 'D': "left", 'H': "home", 'F': "end"}
			return key{name: names[b[2]]}, 3
		}
		return key{name: "esc"}, 1 // Alt+key: the key follows on its own
	case c < 0x20 || c == 0x7f:
		names := map[byte]string{'\r': "enter", '\n': "enter", '\t': "tab", 0x7f: "backspace", 0x08: "backspace",
			0x01: "home", 0x05: "end", 0x02: "left", 0x06: "right", 0x10: "up", 0x0e: "down",
			0x03: "ctrl-c", 0x04: "ctrl-d", 0x15: "ctrl-u", 0x0b: "ctrl-k", 0x17: "ctrl-w", 0x0c: "ctrl-l"}
		return key{name: names[c]}, 1
	}
	if !utf8.FullRune(b) {
		return key{}, 0
	}
	r, n := utf8.DecodeRune(b)
	if r == utf8.RuneError {
		return key{}, n // not text: dropped
	}
	return key{r: r}, n
}

// key applies one key press; end says the line is read (or abandoned).
func (le *lineEditor) key(e *edit, k key) (line string, err error, end bool) {
	switch k.name {
	case "":
		if k.r == 0 {
			return "", nil, false
		}
		e.ghost = "" // typing replaces the suggestion
		e.buf = append(e.buf[:e.pos], append([]rune{k.r}, e.buf[e.pos:]...)...)
		e.pos++
	case "enter":
		line = string(e.buf)
		le.finish(e, "")
		if strings.TrimSpace(line) != "" && (len(le.history) == 0 || le.history[len(le.history)-1] != line) {
			le.history = append(le.history, line)
		}
		return line, nil, true
	case "ctrl-c":
		if len(e.buf) > 0 {
			e.buf, e.pos, e.ghost = nil, 0, ""
			break
		}
		le.finish(e, "^C")
		return "", errPromptInterrupt, true
	case "ctrl-d":
		if len(e.buf) == 0 {
			le.finish(e, "")
			return "", io.EOF, true
		}
		if e.pos < len(e.buf) {
			e.buf = append(e.buf[:e.pos], e.buf[e.pos+1:]...)
		}
	case "tab", "right":
		if len(e.buf) == 0 && e.ghost != "" {
			e.buf, e.ghost = []rune(e.ghost), ""
			e.pos = len(e.buf)
		} else if k.name == "right" && e.pos < len(e.buf) {
			e.pos++
		}
	case "left":
		if e.pos > 0 {
			e.pos--
		}
	case "home":
		e.pos = 0
	case "end":
		e.pos = len(e.buf)
	case "backspace":
		if e.pos > 0 {
			e.buf = append(e.buf[:e.pos-1], e.buf[e.pos:]...)
			e.pos--
		}
	case "delete":
		if e.pos < len(e.buf) {
			e.buf = append(e.buf[:e.pos], e.buf[e.pos+1:]...)
		}
	case "ctrl-u":
		e.buf, e.pos = append([]rune(nil), e.buf[e.pos:]...), 0
	case "ctrl-k":
		e.buf = e.buf[:e.pos]
	case "ctrl-w":
		i := e.pos
		for i > 0 && e.buf[i-1] == ' ' {
			i--
		}
		for i > 0 && e.buf[i-1] != ' ' {
			i--
		}
		e.buf, e.pos = append(e.buf[:i], e.buf[e.pos:]...), i
	case "ctrl-l":
		fmt.Fprint(le.out, "\x1b[H\x1b[2J")
	case "up", "down":
		le.browse(e, k.name == "up")
	}
	le.draw(e)
	return "", nil, false
}

// browse moves through the history.
func (le *lineEditor) browse(e *edit, back bool) {
	switch {
	case back && e.hist > 0:
		if e.hist == len(le.history) {
			e.draft = append([]rune(nil), e.buf...)
		}
		e.hist--
		e.buf = []rune(le.history[e.hist])
	case !back && e.hist < len(le.history):
		e.hist++
		if e.hist == len(le.history) {
			e.buf = e.draft
		} else {
			e.buf = []rune(le.history[e.hist])
		}
	default:
		return
	}
	e.ghost = ""
	e.pos = len(e.buf)
}

// draw draws the line: the prompt, the part of the text around the cursor
// that fits on one row, the ghost text (dimmed) when nothing is typed.
func (le *lineEditor) draw(e *edit) {
	cols := 80
	if c, _, err := term.GetSize(le.in); err == nil && c > 0 {
		cols = c
	}
	pw := runewidth.StringWidth(e.prompt)
	avail := max(cols-pw-1, 1)
	if e.pos < e.scroll {
		e.scroll = e.pos
	}
	for e.scroll < e.pos && runewidth.StringWidth(string(e.buf[e.scroll:e.pos])) > avail {
		e.scroll++
	}
	var b strings.Builder
	b.WriteString("\r" + e.prompt)
	b.WriteString(runewidth.Truncate(string(e.buf[e.scroll:]), avail, ""))
	if len(e.buf) == 0 && e.ghost != "" {
		b.WriteString("\x1b[2m" + runewidth.Truncate(e.ghost, avail, "…") + "\x1b[22m")
	}
	b.WriteString("\x1b[K\r")
	if col := pw + runewidth.StringWidth(string(e.buf[e.scroll:e.pos])); col > 0 {
		fmt.Fprintf(&b, "\x1b[%dC", col)
	}
	fmt.Fprint(le.out, b.String())
}

// finish draws the line as it ends (without ghost text, mark after it)
// and moves to the next row.
func (le *lineEditor) finish(e *edit, mark string) {
	e.ghost = ""
	e.pos = len(e.buf)
	le.draw(e)
	fmt.Fprint(le.out, mark+"\r\n")
}
