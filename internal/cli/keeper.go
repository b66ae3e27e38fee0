package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/keeper"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// The keeper enforces deadlines and idle rules for one home, with or
// without a daemon (docs/lifecycle.md, internal/keeper). Without serve,
// the CLI that gives a neuron a deadline or an idle rule starts
// `nsys-cortex keeper` in the background; it exits once nothing is left
// to watch. serve runs one in its own process for its lifetime; one that
// starts while a standalone keeper holds the home asks it to give way
// (keeper.yield, below) and takes over.

// keeperLog is where a standalone keeper logs.
func keeperLog(lay layout.Layout) string { return filepath.Join(lay.LogsDir(), "keeper.log") }

// yieldFile is touched by a daemon that wants the home's keeper: a
// standalone keeper that sees it touched after it started exits.
func yieldFile(lay layout.Layout) string { return filepath.Join(lay.Home, "keeper.yield") }

// keeperSpawn is what this process knows of the keeper it started.
type keeperSpawn struct {
	mu sync.Mutex
	// exited is closed when the keeper this process started has exited
	// (nil: it started none).
	exited chan struct{}
}

// ensureKeeper makes sure a keeper runs for the home (the CLI's
// sandbox.Env.EnsureKeeper): it wakes the one that runs, or starts
// `nsys-cortex keeper` detached (a session of its own, stdin and stdout
// on /dev/null, stderr to its log) to outlive this command. A goroutine
// waits for it, so a long-lived CLI (chat, mcp) leaves no zombie.
func (a *App) ensureKeeper() {
	a.keeper.mu.Lock()
	defer a.keeper.mu.Unlock()
	err := keeper.Ensure(a.lay, func() error {
		if ch := a.keeper.exited; ch != nil {
			select {
			case <-ch:
			default:
				return nil // ours is starting: its first round looks at every neuron
			}
		}
		return a.startKeeper()
	})
	if err != nil {
		fmt.Fprintf(a.Stderr, "nsys-cortex: could not start the keeper (%v); deadlines and idle rules apply when a command next looks at the neuron\n", err)
	}
}

func (a *App) startKeeper() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.lay.LogsDir(), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(keeperLog(a.lay), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	// Not CommandContext: the keeper is meant to outlive this command.
	// It is no orphan: it exits by itself once nothing is left to watch.
	cmd := exec.Command(exe, "keeper")
	cmd.Env = append(keeperEnv(os.Environ()), layout.EnvHome+"="+a.lay.Home)
	cmd.Dir = "/" // hold no directory of the caller's
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	a.keeper.exited = exited
	go func() {
		cmd.Wait() // its status is in its log
		close(exited)
	}()
	return nil
}

func (a *App) keeperCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "keeper",
		Short:  "Enforce the home's deadlines and idle rules (the CLI starts it)",
		Hidden: true,
		Long: `keeper enforces the deadlines and idle rules of the home's neurons and
exits once none has either. The CLI starts it in the background when a
neuron gets one; nsys-cortex serve runs its own. Its log is
<home>/logs/keeper.log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.inKeeper = true
			set, err := a.sandboxes()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(a.lay.LogsDir(), 0o700); err != nil {
				return err
			}
			logf, err := os.OpenFile(keeperLog(a.lay), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return err
			}
			defer logf.Close()
			log := slog.New(slog.NewTextHandler(logf, nil))
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				a.giveWayToDaemon(ctx, cancel, log)
			}()
			defer func() { cancel(); <-watched }()
			err = keeper.New(a.lay, set, keeper.Options{ExitWhenIdle: true, Log: log}).Run(ctx)
			if errors.Is(err, keeper.ErrRunning) {
				keeper.Wake(a.lay)
				log.Info("another keeper runs for this home: woke it", "pid", os.Getpid())
				return nil
			}
			if err != nil {
				log.Error("keeper ended", "err", err)
			}
			return err
		},
	}
}

// giveWayToDaemon ends a standalone keeper (cancel) once a daemon asks
// for the home (touches the yield file after this keeper started).
func (a *App) giveWayToDaemon(ctx context.Context, cancel func(), log *slog.Logger) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if fi, err := os.Stat(yieldFile(a.lay)); err == nil && fi.ModTime().After(start) {
			log.Info("a daemon asks for this home's neurons: the keeper gives way to it")
			cancel()
			return
		}
	}
}

// keeperEnv is what of this command's environment the keeper, which
// outlives it, gets: nsys-cortex's own settings and what finding programs
// and the docker daemon takes, never the rest (a key exported for
// create --secret would otherwise sit in a long-lived process's environ).
func keeperEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "NSYS_CORTEX_"), strings.HasPrefix(k, "DOCKER_"), strings.HasPrefix(k, "LC_"),
			slices.Contains([]string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "XDG_RUNTIME_DIR"}, k):
			out = append(out, kv)
		}
	}
	return out
}
