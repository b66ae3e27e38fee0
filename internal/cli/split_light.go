//go:build cortex_light

package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nsys-cortex/cortex/internal/cli/sigcatch"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The light program's stand-ins for the full program's commands (see
// split.go): each runs the full program in this process's place, with
// the command line as it was given, so its flags, help, completion,
// output and exit status are the full program's own.

func (a *App) chatCommand() *cobra.Command     { return a.delegated("chat", shortChat) }
func (a *App) serveCommand() *cobra.Command    { return a.delegated("serve", shortServe) }
func (a *App) mountCommand() *cobra.Command    { return a.delegated("mount", shortMount) }
func (a *App) umountCommand() *cobra.Command   { return a.delegated("umount", shortUmount) }
func (a *App) mcpCommand() *cobra.Command      { return a.delegated("mcp", shortMCP) }
func (a *App) policyCommand() *cobra.Command   { return a.delegated("policy", shortPolicy) }
func (a *App) toolsCommand() *cobra.Command    { return a.delegated("tools", shortTools) }
func (a *App) snapshotCommand() *cobra.Command { return a.delegated("snapshot", shortSnapshot) }
func (a *App) exportCommand() *cobra.Command   { return a.delegated("export", shortExport) }
func (a *App) importCommand() *cobra.Command   { return a.delegated("import", shortImport) }

func init() { passThrough = (*App).passThrough }

// passThrough runs the full program for `help NAME ...` and shell
// completion of NAME when NAME is one of its commands: their answers need
// its command tree. It returns only when it does not.
func (a *App) passThrough(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return nil
	}
	switch args[0] {
	case "help", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
	default:
		return nil
	}
	for _, c := range a.rootCommand().Commands() {
		if c.Name() == args[1] && c.Annotations["full"] == "true" {
			return a.runFull(ctx, args)
		}
	}
	return nil
}

func (a *App) delegated(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              short,
		Annotations:        map[string]string{"full": "true"},
		DisableFlagParsing: true, // the full program parses them
		RunE:               func(cmd *cobra.Command, _ []string) error { return a.runFull(cmd.Context(), a.args) },
	}
}

// runFull replaces this process with the full program, run with args.
// It returns only when that cannot be done, with why; a signal that came
// while the program was found (the first one unpacks it) ends this
// process as that signal ends any command.
func (a *App) runFull(ctx context.Context, args []string) error {
	if a.FullProgram == nil {
		return fmt.Errorf("this nsys-cortex is the light program and knows no full one")
	}
	a.awaitSignals() // its first run unpacks it: a temporary file to remove
	f, err := a.FullProgram()
	if err != nil {
		return err
	}
	defer f.Close()
	// From here a signal has its default action, as it will in the full
	// program (execve resets what this one caught): caught now, it would
	// be lost in the exec.
	signal.Reset(sigcatch.Signals...)
	if ctx.Err() != nil {
		return interrupted(ctx, ctx.Err())
	}
	argv := append([]string{os.Args[0]}, args...)
	// The descriptor, not the name: what runs is the file that was checked.
	path := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	return fmt.Errorf("running the full program %s: %w", f.Name(), syscall.Exec(path, argv, os.Environ()))
}

// standIns are the light program's stand-ins for the modes only the full
// program links (kube mode: client-go takes ~15,000 allocations to
// initialise). A stand-in that is not configured can run nothing and
// says why, as the mode would; one that is hands the command, as it was
// given, to the full program the moment the mode is used (its self-check,
// its manager), before anything of the command is done.
func (a *App) standIns() []sandbox.Backend {
	full := func() error { return a.runFull(context.Background(), a.args) }
	return []sandbox.Backend{{
		Name: "kube", Rank: 5, Isolating: true,
		New: func(sandbox.Env) (sandbox.Manager, error) {
			if os.Getenv(kubeImageEnv) == "" {
				return nil, &sandbox.UnavailableError{Mode: "kube", Reason: kubeNotConfigured}
			}
			return nil, full()
		},
		SelfCheck: func(context.Context, sandbox.Env) sandbox.Check {
			if os.Getenv(kubeImageEnv) == "" {
				return sandbox.Check{Mode: "kube", Summary: kubeNotConfigured}
			}
			return sandbox.Check{Mode: "kube", Summary: full().Error()}
		},
	}}
}

// handOff runs the full program with this command line, for a part of
// the command that only it links (the shared API keys).
func (a *App) handOff(ctx context.Context) error { return a.runFull(ctx, a.args) }
