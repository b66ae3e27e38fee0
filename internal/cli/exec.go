package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/launch"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/logging"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	cterm "github.com/nsys-cortex/cortex/internal/term"
)

// connect finds a running neuron by id (or unique prefix) and connects:
// through the daemon when the CLI is pointed at one, else directly.
func (a *App) connect(ctx context.Context, ref string, action gate.Action) (channel, *sandbox.State, error) {
	api, err := a.apiClient()
	if err != nil {
		return nil, nil, err
	}
	if api != nil {
		st, err := remoteFind(ctx, api, ref, true)
		if err != nil {
			return nil, nil, err
		}
		if st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused { // the daemon resumes a paused one
			return nil, nil, &sandbox.NotRunningError{ID: st.ID, Reason: "its status is " + string(st.Status)}
		}
		a.awaitSignals()
		return &remoteChannel{n: api.Neuron(st.ID)}, st, nil
	}
	set, err := a.sandboxes()
	if err != nil {
		return nil, nil, err
	}
	// Finding a neuron here can change it: a deadline past due is
	// enforced, a dead agent's records cleared.
	a.awaitSignals()
	m, st, err := set.Find(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	// Through the daemon, its gate decides (above); locally, this one.
	if err := a.authorize(ctx, action, st.ID); err != nil {
		return nil, nil, err
	}
	c, err := m.Connect(ctx, st.ID)
	return c, st, err
}

// authorize asks the host's one gate about the operator's action on
// neuron id (the local CLI is the operator: it is allowed, and recorded).
func (a *App) authorize(ctx context.Context, action gate.Action, id string) error {
	lay, err := layout.FromEnv()
	if err != nil {
		return err
	}
	g := &gate.Gate{Audit: launch.NewAudit(filepath.Join(lay.LogsDir(), "audit.log")), Layout: lay}
	return g.Allow(ctx, &gate.Request{Principal: gate.Principal{Kind: gate.Operator}, Neuron: id, Action: action}, nil)
}

// SignalCause is the cause of a context cancelled by a signal.
type SignalCause struct{ Signal syscall.Signal }

func (s SignalCause) Error() string { return "interrupted by " + s.Signal.String() }

// ExitTimeout is the status of a command killed by --timeout (as timeout(1)).
const ExitTimeout = 124

// interrupted maps a cancelled context to the shell's status for the
// signal that cancelled it (130 for SIGINT, 143 for SIGTERM).
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	var sc SignalCause
	if errors.As(context.Cause(ctx), &sc) {
		return &exitError{code: 128 + int(sc.Signal)}
	}
	return &exitError{code: 130}
}

func (a *App) execCommand() *cobra.Command {
	var (
		cwd                               string
		env                               []string
		timeout                           time.Duration
		interactive, tty, detach, noStdin bool
	)
	line := commandArgs{usage: "exec: give a neuron and a command (nsys-cortex exec [flags] ID [[flags] --] COMMAND [ARG...])"}
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [[flags] --] COMMAND [ARG...]",
		Short: "Run a command in a neuron; exits with the command's status",
		Long: `Exec runs COMMAND in the neuron and streams its output as it comes. The exit
status is the command's own (128+N when a signal N ended it; 127 when it was
not found; 124 when --timeout killed it).

` + commandLineRule("exec", "-i") + `

Stdin is forwarded when it is not a terminal, so in a "while read" loop give
-n (or </dev/null) or exec eats the loop's input; -i forwards a terminal too.
-t runs the command on a PTY. -d starts it in the background, with no stdin,
and prints its pid (see ps, logs, kill). There is no timeout unless --timeout.
Ctrl-C (or SIGTERM, SIGHUP) kills the command in the neuron.`,
		ValidArgsFunction: a.neuronArgs,
		Annotations:       map[string]string{lateSignals: "in connect"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, st, err := a.connect(ctx, line.ID, gate.Exec)
			if err != nil {
				return err
			}
			command := protocol.Command{Argv: line.Argv, Cwd: cwd, Env: env}
			if detach {
				info, err := c.ProcStart(ctx, &protocol.ProcStartArgs{Command: command})
				if err != nil {
					return spawnError(err)
				}
				fmt.Fprintln(a.Stdout, info.PID)
				return nil
			}
			if tty {
				code, _, err := a.pty(ctx, c, st.ID, command, timeout)
				if err != nil {
					return interrupted(ctx, err)
				}
				return exitCode(code)
			}
			req := &link.ExecRequest{Command: command, Stdout: a.Stdout, Stderr: a.Stderr, Timeout: link.NoTimeout}
			if timeout > 0 {
				req.Timeout = timeout
			}
			if !noStdin && (interactive || !isTerminal(a.Stdin)) {
				req.Stdin = a.Stdin
			}
			res, err := c.Exec(ctx, req)
			if err != nil {
				return interrupted(ctx, err)
			}
			if res.TimedOut {
				fmt.Fprintf(a.Stderr, "nsys-cortex: the command ran past --timeout %s and was killed\n", timeout)
				return exitCode(ExitTimeout)
			}
			return exitCode(res.ExitCode)
		},
	}
	takeCommandArgs(cmd, &line, nil)
	cmd.Flags().StringVarP(&cwd, "cwd", "w", "", "working directory inside the neuron (default: its workdir)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE for the command (repeatable)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long (e.g. 30s)")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "forward stdin even when it is a terminal")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a pseudo-terminal")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "start in the background (no stdin) and print the pid")
	cmd.Flags().BoolVarP(&noStdin, "no-stdin", "n", false, "do not forward stdin (the command reads /dev/null)")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case timeout < 0:
			return fmt.Errorf("--timeout %s is negative", timeout)
		case detach && tty:
			return errors.New("-d and -t cannot be combined")
		case detach && interactive:
			return errors.New("-d and -i cannot be combined: a background process reads no stdin")
		case detach && timeout > 0:
			return errors.New("--timeout applies to commands exec waits for; stop a background one with kill")
		case noStdin && interactive:
			return errors.New("-n and -i contradict each other")
		}
		return nil
	}
	return cmd
}

func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

func (a *App) shellCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive shell in a neuron, on a new terminal (detach with Ctrl-P Ctrl-Q)",
		Long: `Shell starts a login shell on a new terminal in the neuron and attaches to
it. The terminal outlives this command: Ctrl-P Ctrl-Q detaches and leaves
it running (nsys-cortex term list ID; nsys-cortex attach ID TERM). The exit
status is the shell's when it exits.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isTerminal(a.Stdin) {
				return errors.New("shell needs a terminal on stdin; to run a script use: nsys-cortex exec ID -- sh -s < script")
			}
			ctx := cmd.Context()
			command := protocol.Command{Shell: "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"}
			if t := os.Getenv("TERM"); t != "" {
				command.Env = []string{"TERM=" + t}
			}
			code, err := a.attachTo(ctx, args[0], "", &command, false)
			if err != nil {
				return interrupted(ctx, err)
			}
			return exitCode(code)
		},
	}
}

// runPty runs command on a PTY in the neuron wired to this terminal: raw
// mode, input forwarded, output streamed, the size kept in step on
// SIGWINCH. It returns the command's exit status (ExitTimeout when timeout,
// if set, ran out first).
func (a *App) runPty(ctx context.Context, c *link.Client, neuron string, command protocol.Command, timeout time.Duration) (int, string, error) {
	cols, rows, fd := a.ptySetup(&command)
	info, err := spawnPty(ctx, c, &protocol.PtySpawnArgs{Command: command, Cols: cols, Rows: rows})
	if err != nil {
		return 0, "", spawnError(err)
	}
	// The command is the terminal's writer: an attach elsewhere may watch.
	if lock, err := cterm.LockWriter(a.lay.TerminalLocksDir(), neuron, info.ID); err == nil {
		defer lock.Release()
	}
	followCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		followCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	restore, err := a.rawTerminal(func(w, h int) { c.PtyResize(ctx, info.PID, w, h) })
	if err != nil {
		c.PtyClose(context.WithoutCancel(ctx), info.PID)
		return 0, "", err
	}
	defer restore()
	go func() {
		// Input ends with our stdin or with the session; a read that blocks
		// on the terminal ends with the process.
		buf := make([]byte, 32<<10)
		for {
			n, err := a.Stdin.Read(buf)
			if n > 0 {
				if c.PtyWrite(ctx, info.PID, append([]byte(nil), buf[:n]...)) != nil {
					return
				}
			}
			if err != nil {
				if fd < 0 {
					c.ProcInput(ctx, info.PID, nil, true) // ^D: end of input
				}
				return
			}
		}
	}()
	res, err := c.PtyFollow(followCtx, info.PID, 0, true, func(_ string, _ int64, p []byte) error {
		_, err := a.Stdout.Write(p)
		return err
	})
	if err != nil {
		// Leave no shell running behind an interrupted session.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		c.PtyClose(cctx, info.PID)
		cancel()
		if ctx.Err() == nil && followCtx.Err() != nil {
			if fd >= 0 {
				fmt.Fprint(a.Stdout, "\r\n")
			}
			fmt.Fprintf(a.Stderr, "nsys-cortex: the command ran past --timeout %s and was killed\n", timeout)
			return ExitTimeout, "", nil
		}
		return 0, "", err
	}
	if res.Info == nil {
		return 0, "", errors.New("pty: the agent reported no exit status")
	}
	return res.Info.ExitCode, res.Info.Signal, nil
}

// spawnPty starts a terminal even when ctx ends meanwhile (the agent may
// have started it already), and then ends it again: a cancelled command
// leaves nothing running.
func spawnPty(ctx context.Context, c *link.Client, args *protocol.PtySpawnArgs) (*protocol.ProcInfo, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	args.Hold = true // its output waits for this command's attachment
	info, err := c.PtySpawn(sctx, args)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		c.PtyClose(sctx, info.PID)
		return nil, ctx.Err()
	}
	return info, nil
}

// procStatus is a process's state as the tables show it.
func procStatus(p *protocol.ProcInfo) string {
	if p.Running {
		return "running"
	}
	s := "exited " + strconv.Itoa(p.ExitCode)
	if p.Signal != "" {
		s += " (" + p.Signal + ")"
	}
	return s
}

// termSize returns the size of this terminal (stdin; 80x24 without one)
// and its descriptor (-1 without one).
func (a *App) termSize() (cols, rows, fd int) {
	cols, rows, fd = 80, 24, -1
	if f, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd = int(f.Fd())
		if w, h, err := term.GetSize(fd); err == nil {
			cols, rows = w, h
		}
	}
	return cols, rows, fd
}

// ptySetup is termSize, and gives command this terminal's TERM.
func (a *App) ptySetup(command *protocol.Command) (cols, rows, fd int) {
	cols, rows, fd = a.termSize()
	if !hasEnvKey(command.Env, "TERM") {
		if t := os.Getenv("TERM"); t != "" {
			command.Env = append(command.Env, "TERM="+t)
		}
	}
	return cols, rows, fd
}

func hasEnvKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// procListing is how ps shows a neuron's processes.
var procListing = listing[protocol.ProcInfo]{
	header: []string{"PID", "KIND", "STATUS", "STARTED", "COMMAND"},
	row: func(p protocol.ProcInfo) []string {
		kind := "proc"
		if p.Pty {
			kind = "pty"
		}
		return []string{strconv.Itoa(p.PID), kind, procStatus(&p), ago(p.Started), commandLine(p.Argv)}
	},
	name: func(p protocol.ProcInfo) string { return strconv.Itoa(p.PID) },
}

func (a *App) psCommand() *cobra.Command {
	var out outputFlags
	cmd := &cobra.Command{
		Use:               "ps ID",
		Short:             "List a neuron's background processes and terminals",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := procListing.mode(&out)
			if err != nil {
				return err
			}
			c, _, err := a.connect(cmd.Context(), args[0], gate.ProcessRead)
			if err != nil {
				return err
			}
			list, err := c.ProcList(cmd.Context())
			if err != nil {
				return err
			}
			return procListing.print(&out, a.Stdout, mode, list)
		},
	}
	procListing.addFlags(&out, cmd, "{{.PID}} {{.Running}} {{.ExitCode}}")
	return cmd
}

// process connects to neuron ref and parses the pid of one of its processes.
func (a *App) process(ctx context.Context, ref, pidArg string, action gate.Action) (channel, int, error) {
	pid, err := strconv.Atoi(pidArg)
	if err != nil || pid <= 0 {
		return nil, 0, fmt.Errorf("PID %q is not a process id", pidArg)
	}
	c, _, err := a.connect(ctx, ref, action)
	return c, pid, err
}

func (a *App) logsCommand() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [ID [PID]]",
		Short: "Print the daemon's log, a neuron's own log, or a background process's output",
		Long: `logs prints the daemon's log (nsys-cortex serve: <home>/logs/cortex.log, JSON
lines). logs ID prints the neuron's log on the host: its agent's messages
and, in nsbox, its PID 1's and every egress proxy decision. logs ID PID
prints a background process's output (kept in a bounded buffer in the
neuron). -f keeps following.`,
		Args:              cobra.RangeArgs(0, 2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if len(args) == 0 {
				return a.daemonLog(ctx, follow)
			}
			if len(args) == 1 {
				return a.neuronLog(ctx, args[0], follow)
			}
			c, pid, err := a.process(ctx, args[0], args[1], gate.ProcessRead)
			if err != nil {
				return err
			}
			_, err = c.ProcAttach(ctx, &protocol.ProcAttachArgs{PID: pid, Follow: follow}, func(stream string, off int64, p []byte) error {
				switch {
				case stream == protocol.StreamStderr:
					_, err := a.Stderr.Write(p)
					return err
				case strings.HasPrefix(stream, protocol.StreamGap):
					fmt.Fprintf(a.Stderr, "[earlier output of %s was dropped; resuming at byte %d]\n", strings.TrimPrefix(stream, protocol.StreamGap+":"), off)
					return nil
				}
				_, err := a.Stdout.Write(p)
				return err
			})
			return interrupted(ctx, err)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the process exits (the neuron's log: until interrupted)")
	return cmd
}

// daemonLog prints the daemon's log, and with follow what is added to it
// (across rotations) until ctx ends.
func (a *App) daemonLog(ctx context.Context, follow bool) error {
	if _, err := a.loadConfig(); err != nil {
		return err
	}
	lay, err := layout.FromEnv()
	if err != nil {
		return err
	}
	path := filepath.Join(lay.LogsDir(), logging.DefaultFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !follow {
		fmt.Fprintf(a.Stderr, "nsys-cortex: no daemon log yet (nsys-cortex serve writes %s)\n", path)
		return nil
	}
	if err := logging.Tail(ctx, path, a.Stdout, follow); err != nil {
		return err
	}
	return interrupted(ctx, ctx.Err())
}

// neuronLog prints the neuron's log file, and with follow what is added
// to it until ctx ends.
func (a *App) neuronLog(ctx context.Context, ref string, follow bool) error {
	if api, err := a.apiClient(); err != nil {
		return err
	} else if api != nil {
		return &sandbox.UnavailableError{Mode: "api", Reason: "a neuron's own log is a file on the daemon's host (" + api.URL() +
			"): read it there with nsys-cortex logs " + ref + "; a process's output works over the API: nsys-cortex logs ID PID"}
	}
	set, err := a.sandboxes()
	if err != nil {
		return err
	}
	m, st, err := set.Find(ctx, ref)
	if err != nil {
		return err
	}
	lp, ok := m.(sandbox.LogPather)
	if !ok {
		return &sandbox.UnavailableError{Mode: st.Mode, Reason: "this mode keeps no neuron log"}
	}
	path, err := lp.LogPath(ctx, st.ID)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !follow {
		return nil // nothing logged yet
	} else if err != nil {
		return err
	}
	defer f.Close()
	// The log holds lines of the neuron's (its kernel's console, in a VM):
	// each is printed cleaned of control characters, so none can move the
	// cursor, retitle the terminal or write its clipboard.
	r := bufio.NewReader(f)
	var partial string
	synced := time.Now()
	for {
		line, err := r.ReadString('\n')
		partial += line
		if err == nil {
			if _, err := io.WriteString(a.Stdout, protocol.CleanLogText(strings.TrimSuffix(partial, "\n"))+"\n"); err != nil {
				return err
			}
			partial = ""
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if !follow {
			if partial != "" {
				_, err := io.WriteString(a.Stdout, protocol.CleanLogText(partial)+"\n")
				return err
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return interrupted(ctx, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		if time.Since(synced) >= time.Second {
			// Asking for the path again copies what a detached
			// container printed since into the log (docker mode).
			lp.LogPath(ctx, st.ID)
			synced = time.Now()
		}
	}
}

func (a *App) killCommand() *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:               "kill ID PID",
		Short:             "Signal a background process (and its process group)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.neuronArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, pid, err := a.process(cmd.Context(), args[0], args[1], gate.ProcessSignal)
			if err != nil {
				return err
			}
			return c.ProcSignal(cmd.Context(), pid, sig)
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "TERM", "signal to send (TERM, KILL, INT, HUP, or a number)")
	return cmd
}

// commandLine renders argv for a table: arguments with spaces or control
// characters are quoted so that no argument can break the layout.
func commandLine(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' || r == '\'' }) {
			out[i] = strconv.Quote(a)
		}
	}
	return strings.Join(out, " ")
}
