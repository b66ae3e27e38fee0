package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/nsys-cortex/cortex/internal/gate"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	cterm "github.com/nsys-cortex/cortex/internal/term"
)

// localSession is a terminal through the channel; the writer paces the
// terminal's output, a watcher may find gaps (said on stderr).
type localSession struct {
	c     *link.Client
	pid   int
	pace  bool
	notes io.Writer
}

func (s *localSession) Follow(ctx context.Context, offset int64, out func([]byte) error) (*protocol.ProcInfo, error) {
	started := false // a gap before the first bytes is the replay's start, not a loss
	res, err := s.c.PtyFollow(ctx, s.pid, offset, s.pace, func(stream string, off int64, p []byte) error {
		if strings.HasPrefix(stream, protocol.StreamGap) {
			if started {
				fmt.Fprintf(s.notes, "\r\n[nsys-cortex: output before byte %d of this terminal is no longer kept]\r\n", off)
			}
			return nil
		}
		started = true
		return out(p)
	})
	if err != nil {
		return nil, err
	}
	return res.Info, nil
}

func (s *localSession) Write(ctx context.Context, p []byte) error { return s.c.PtyWrite(ctx, s.pid, p) }
func (s *localSession) Resize(ctx context.Context, cols, rows int) error {
	return s.c.PtyResize(ctx, s.pid, cols, rows)
}

// remoteSession is a terminal through the daemon's WebSocket.
type remoteSession struct{ t *cortex.Terminal }

func (s *remoteSession) Follow(ctx context.Context, _ int64, out func([]byte) error) (*protocol.ProcInfo, error) {
	stop := context.AfterFunc(ctx, func() { s.t.Close() })
	defer stop()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.t.Read(buf)
		if n > 0 {
			if werr := out(buf[:n]); werr != nil {
				return nil, werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
	code, sig, err := s.t.Wait()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return &protocol.ProcInfo{PID: s.t.PID, ID: s.t.ID, ExitCode: code, Signal: sig}, nil
}

func (s *remoteSession) Write(_ context.Context, p []byte) error {
	_, err := s.t.Write(p)
	return err
}
func (s *remoteSession) Resize(_ context.Context, cols, rows int) error {
	return s.t.Resize(cols, rows)
}

// rawTerminal puts this terminal (stdin, when it is one) in raw mode and
// calls onResize with its new size whenever it changes, until restore.
// Without a terminal it does nothing.
func (a *App) rawTerminal(onResize func(cols, rows int)) (restore func(), err error) {
	_, _, fd := a.termSize()
	if fd < 0 {
		return func() {}, nil
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					onResize(w, h) // a lost resize is corrected by the next one
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { signal.Stop(winch); close(done); term.Restore(fd, old) }) }, nil
}

// attachTo attaches this terminal to terminal ref of the neuron (or to a
// new one running command when ref is ""), as its writer unless watch.
// It returns the terminal's exit status, or 0 after a detach.
func (a *App) attachTo(ctx context.Context, neuron, ref string, command *protocol.Command, watch bool) (int, error) {
	c, st, err := a.connect(ctx, neuron, gate.TerminalOpen)
	if err != nil {
		return 0, err
	}
	cols, rows, fd := a.termSize()
	var (
		session cterm.Session
		info    *protocol.ProcInfo
	)
	switch c := c.(type) {
	case *link.Client:
		if ref == "" {
			if info, err = spawnPty(ctx, c, &protocol.PtySpawnArgs{Command: *command, Cols: cols, Rows: rows}); err != nil {
				return 0, spawnError(err)
			}
		} else {
			list, err := c.ProcList(ctx)
			if err != nil {
				return 0, err
			}
			if info, err = cterm.Find(list, ref); err != nil {
				return 0, err
			}
		}
		if !watch {
			lock, err := cterm.LockWriter(a.lay.TerminalLocksDir(), st.ID, info.ID)
			if err != nil {
				return 0, err
			}
			defer lock.Release()
		}
		session = &localSession{c: c, pid: info.PID, pace: !watch, notes: a.Stderr}
	case *remoteChannel:
		o := cortex.TerminalOptions{Cols: cols, Rows: rows, Watch: watch}
		if ref == "" {
			o.Command = cortex.Command{Argv: command.Argv, Shell: command.Shell, Cwd: command.Cwd, Env: command.Env}
		} else {
			list, err := c.ProcList(ctx)
			if err != nil {
				return 0, err
			}
			if info, err = cterm.Find(list, ref); err != nil {
				return 0, err
			}
			o.PID = info.PID
		}
		t, err := c.n.Terminal(ctx, o)
		if err != nil {
			return 0, err
		}
		defer t.Close()
		info = &protocol.ProcInfo{PID: t.PID, ID: t.ID}
		session = &remoteSession{t: t}
	default:
		return 0, fmt.Errorf("no terminals over %T", c)
	}
	if !watch && ref != "" && fd >= 0 {
		session.Resize(ctx, cols, rows) // the newcomer's size
	}
	resize := func(w, h int) {
		if !watch { // only the writer steers the terminal
			session.Resize(ctx, w, h)
		}
	}
	restore, err := a.rawTerminal(resize)
	if err != nil {
		return 0, err
	}
	res, err := cterm.Attach(ctx, session, cterm.Options{In: a.Stdin, Out: a.Stdout, Watch: watch})
	restore()
	if err != nil {
		return 0, err
	}
	if res.Detached {
		fmt.Fprintf(a.Stderr, "\r\nnsys-cortex: detached from terminal %s; it runs on (nsys-cortex attach %s %s)\r\n", info.ID, st.ID, info.ID)
		return 0, nil
	}
	if res.Exit == nil {
		return 0, errors.New("terminal: no exit status")
	}
	return res.Exit.ExitCode, nil
}

func (a *App) attachCommand() *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "attach [--watch] ID TERM",
		Short: "Attach to a terminal of a neuron (detach with Ctrl-P Ctrl-Q)",
		Long: `Attach joins this terminal to terminal TERM (its id, or its pid) of the
neuron: its recent output is replayed first, then you type into it. One
attachment at a time types (the writer); --watch follows read-only, as
many as like. Ctrl-P Ctrl-Q detaches and leaves it running (a watcher may
also leave with Ctrl-C). The exit status is the terminal's own when it ends.`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, err := a.attachTo(cmd.Context(), args[0], args[1], nil, watch)
			if err != nil {
				return interrupted(cmd.Context(), err)
			}
			return exitCode(code)
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "follow read-only (keys are not sent)")
	return cmd
}

// termListing is how term list shows a neuron's terminals.
var termListing = listing[protocol.ProcInfo]{
	header: []string{"TERM", "PID", "SIZE", "STATUS", "STARTED", "COMMAND"},
	row: func(p protocol.ProcInfo) []string {
		return []string{p.ID, strconv.Itoa(p.PID), fmt.Sprintf("%dx%d", p.Cols, p.Rows), procStatus(&p), ago(p.Started), commandLine(p.Argv)}
	},
	name: func(p protocol.ProcInfo) string { return p.ID },
}

func (a *App) termCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "term", Short: "List and end a neuron's terminals"}
	var out outputFlags
	list := &cobra.Command{
		Use:               "list ID",
		Short:             "List a neuron's terminals, running and ended (kept across restarts)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := termListing.mode(&out)
			if err != nil {
				return err
			}
			c, _, err := a.connect(cmd.Context(), args[0], gate.Read)
			if err != nil {
				return err
			}
			all, err := c.ProcList(cmd.Context())
			if err != nil {
				return err
			}
			var terms []protocol.ProcInfo
			for _, p := range all {
				if p.Pty {
					terms = append(terms, p)
				}
			}
			return termListing.print(&out, a.Stdout, mode, terms)
		},
	}
	termListing.addFlags(&out, list, "{{.ID}} {{.Running}}")
	kill := &cobra.Command{
		Use:               "kill ID TERM",
		Short:             "End a terminal (hang up, then SIGKILL its process group)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := a.connect(cmd.Context(), args[0], gate.TerminalControl)
			if err != nil {
				return err
			}
			all, err := c.ProcList(cmd.Context())
			if err != nil {
				return err
			}
			info, err := cterm.Find(all, args[1])
			if err != nil {
				return err
			}
			switch c := c.(type) {
			case *link.Client:
				_, err = c.PtyClose(cmd.Context(), info.PID)
			case *remoteChannel:
				// Through the process route: it needs no writer lock.
				err = c.ProcSignal(cmd.Context(), info.PID, "KILL")
			}
			return err
		},
	}
	cmd.AddCommand(list, kill)
	return cmd
}
