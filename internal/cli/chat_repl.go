//go:build !cortex_light

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/loop"
	"github.com/nsys-cortex/cortex/internal/session"
)

// repl is an interactive chat: requests and slash commands, one per line.
type repl struct {
	app     *App
	r       *chatrun.Runner
	view    *chatView
	events  func(chatrun.Event) // the view's, or JSON lines (-o json)
	ed      *lineEditor         // on a terminal
	scan    *bufio.Scanner      // otherwise
	suggest bool
}

// suggestion is a next request being asked for in the background.
type suggestion struct {
	cancel context.CancelFunc
	ch     chan string
	wg     sync.WaitGroup
}

// stop cancels the request and waits for it.
func (s *suggestion) stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
}

func (s *suggestion) results() <-chan string {
	if s == nil {
		return nil
	}
	return s.ch
}

const chatHelp = `Type a request and press Enter. Ctrl-C cancels a running turn; twice at the prompt (or Ctrl-D, /exit) quits.
  /compact              summarise the conversation before the latest request now
  /model [provider/]M   show or switch the model (recorded in the session)
  /rewind [N]           list the requests, or go back to just before request N: the
                        conversation and the neuron's files (add --keep-files to leave
                        the files as they are)
  /fork [N]             continue in a new session copied up to now (or to just before request N)
  /sessions             list the sessions
  /exit                 quit
A suggested next request is shown dimmed after an answer: Tab or Right takes it.`

// interactive reads requests until /exit or the end of input.
func (a *App) interactive(ctx context.Context, r *chatrun.Runner, f *chatFlags) error {
	c := &repl{app: a, r: r, view: a.newChatView(f.output == "text")}
	defer c.view.close()
	c.events = c.view.event
	if f.output == "json" {
		c.events = a.jsonEvents()
	}
	if in := terminalFd(a.Stdin); in >= 0 && terminalFd(a.Stderr) >= 0 {
		c.ed = &lineEditor{in: in, out: a.Stderr}
		c.suggest = f.suggest && f.output == "text"
		fmt.Fprintln(a.Stderr, "Type a request, or /help.")
	} else {
		c.scan = bufio.NewScanner(a.Stdin)
		c.scan.Buffer(make([]byte, 1<<20), 1<<20)
	}
	return c.run(ctx)
}

func (c *repl) run(ctx context.Context) error {
	var sg *suggestion
	defer func() { sg.stop() }()
	interrupts := 0
	ghost := ""
	for {
		line, err := c.read(ctx, "› ", ghost, sg.results())
		sg.stop()
		sg, ghost = nil, ""
		var se *signalError
		switch {
		case errors.Is(err, errPromptInterrupt):
			if interrupts++; interrupts >= 2 {
				return nil
			}
			fmt.Fprintln(c.app.Stderr, "(Ctrl-C again, Ctrl-D or /exit to quit)")
			continue
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &se):
			return &exitError{code: 128 + int(se.sig)}
		case err != nil:
			return err
		}
		interrupts = 0
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "/"):
			exit, next, err := c.command(ctx, line)
			if err != nil {
				fmt.Fprintf(c.app.Stderr, "%s: %s\n", strings.Fields(line)[0], describe(err))
			}
			if exit {
				return nil
			}
			ghost = next
			continue
		}
		c.view.begin()
		res, err := c.app.chatTurn(ctx, c.r, line, c.events)
		if err != nil {
			c.view.note("nsys-cortex: %s", describe(err))
			continue
		}
		if c.suggest && res.Stop == loop.StopDone {
			sg = c.startSuggestion(ctx)
		}
	}
}

// read reads a line: on a terminal with the editor (ghost text shown,
// more arriving on ghosts), otherwise from the input as it comes.
func (c *repl) read(ctx context.Context, prompt, ghost string, ghosts <-chan string) (string, error) {
	if c.ed != nil {
		return c.ed.readLine(ctx, prompt, ghost, ghosts)
	}
	fmt.Fprint(c.app.Stderr, prompt)
	if !c.scan.Scan() {
		fmt.Fprintln(c.app.Stderr)
		if err := c.scan.Err(); err != nil {
			return "", err
		}
		return "", io.EOF
	}
	return c.scan.Text(), nil
}

// startSuggestion asks for the next request in the background.
func (c *repl) startSuggestion(ctx context.Context) *suggestion {
	ctx, cancel := context.WithCancel(ctx)
	s := &suggestion{cancel: cancel, ch: make(chan string, 1)}
	s.wg.Go(func() {
		text, err := c.r.Suggest(ctx)
		if err != nil || text == "" {
			return // a hint that does not come is no failure
		}
		s.ch <- text
	})
	return s
}

// command runs a slash command; exit ends the chat, ghost is offered at
// the next prompt.
func (c *repl) command(ctx context.Context, line string) (exit bool, ghost string, err error) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	out, errw := c.app.Stdout, c.app.Stderr
	switch name {
	case "/exit", "/quit":
		return true, "", nil
	case "/help":
		fmt.Fprintln(errw, chatHelp)
	case "/sessions":
		list, err := session.ForLayout(c.app.lay).List()
		if err != nil {
			return false, "", err
		}
		current := c.r.ID()
		for _, s := range list {
			mark := " "
			if s.ID == current {
				mark = "*"
			}
			fmt.Fprintf(out, "%s %s  %s  %4d entries  %s\n", mark, s.ID, s.Modified.Format("2006-01-02 15:04"), s.Entries, s.Title)
		}
	case "/compact":
		c.view.beginWith("compacting…")
		interruptible(ctx, func(ctx context.Context) { err = c.r.Compact(ctx, c.events) })
		c.view.end()
		if err != nil {
			return false, "", err
		}
		fmt.Fprintln(errw, "compacted: the conversation before the latest request is now a summary")
	case "/model":
		if arg == "" {
			p, m := c.r.Model()
			fmt.Fprintf(errw, "model %s/%s (switch with /model [provider/]NAME)\n", p, m)
			break
		}
		if err := c.r.SetModel(arg); err != nil {
			return false, "", err
		}
		p, m := c.r.Model()
		fmt.Fprintf(errw, "model %s/%s from the next request on (recorded in session %s)\n", p, m, c.r.ID())
	case "/rewind":
		return c.rewind(ctx, arg)
	case "/fork":
		at := ""
		if arg != "" {
			t, err := c.turn(arg)
			if err != nil {
				return false, "", err
			}
			e, _ := c.r.Session().Get(t.Entry)
			at = e.ParentID
		}
		from := c.r.ID()
		id, err := c.r.Fork(at)
		if err != nil {
			return false, "", err
		}
		fmt.Fprintf(errw, "forked session %s: now in session %s (the neuron's files are shared; /rewind here puts them back too)\n", from, id)
	default:
		return false, "", fmt.Errorf("unknown command; /help lists them")
	}
	return false, "", nil
}

// turn finds request N ("3") of the conversation.
func (c *repl) turn(arg string) (chatrun.Turn, error) {
	turns := c.r.Turns()
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 || n > len(turns) {
		if len(turns) == 0 {
			return chatrun.Turn{}, errors.New("there is no request yet")
		}
		return chatrun.Turn{}, fmt.Errorf("%q: give a request's number, 1 to %d (/rewind lists them)", arg, len(turns))
	}
	return turns[n-1], nil
}

// rewind lists the requests, asks which (unless given) and goes back to
// just before it; the request comes back as ghost text.
func (c *repl) rewind(ctx context.Context, arg string) (bool, string, error) {
	keep := false
	var rest []string
	for _, f := range strings.Fields(arg) {
		if f == "--keep-files" {
			keep = true
		} else {
			rest = append(rest, f)
		}
	}
	turns := c.r.Turns()
	if len(turns) == 0 {
		return false, "", errors.New("there is no request to go back to")
	}
	which := strings.Join(rest, " ")
	if which == "" {
		for _, t := range turns {
			fmt.Fprintf(c.app.Stdout, "%3d  %-52s  %s\n", t.N, firstLine(t.Request, 52), filesNote(t))
		}
		line, err := c.read(ctx, fmt.Sprintf("rewind to before request (1-%d, Enter to cancel): ", len(turns)), "", nil)
		if err != nil && !errors.Is(err, errPromptInterrupt) {
			return false, "", err
		}
		if which = strings.TrimSpace(line); which == "" || err != nil {
			return false, "", nil
		}
	}
	t, err := c.turn(which)
	if err != nil {
		return false, "", err
	}
	var done *chatrun.Rewound
	interruptible(ctx, func(ctx context.Context) { done, err = c.r.Rewind(ctx, t.Entry, keep) })
	if errors.Is(err, chatrun.ErrFilesLost) {
		return false, "", fmt.Errorf("%w\n  /rewind %d --keep-files rewinds the conversation alone", err, t.N)
	}
	if err != nil {
		return false, "", err
	}
	files := "the files are as they were"
	switch {
	case done.Restored != "" && done.Whole:
		files = "the neuron is back as it was (checkpoint " + done.Restored + ": its files, memory and the processes that ran then)"
	case done.Restored != "":
		files = "the files are back as they were (checkpoint " + done.Restored + "; the neuron restarted)"
	case keep:
		files = "the files were left as they are"
	}
	fmt.Fprintf(c.app.Stderr, "rewound to before request %d: %s. The request is offered again: Tab takes it.\n", t.N, files)
	return false, t.Request, nil
}

// filesNote says what a rewind to before t does to the files.
func filesNote(t chatrun.Turn) string {
	switch t.Files {
	case chatrun.FilesRestored:
		return "files: put back"
	case chatrun.FilesUnchanged:
		return "files: unchanged since"
	}
	return "files: cannot be put back (" + t.Why + ")"
}
