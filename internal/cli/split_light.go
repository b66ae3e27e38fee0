//go:build cortex_light

package cli

import (
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/cobra"
)

// The light program's stand-ins for the full program's commands (see
// split.go): each runs the full program in this process's place, with
// the command line as it was given, so its flags, help, output and exit
// status are the full program's own.

func (a *App) chatCommand() *cobra.Command     { return a.delegated("chat", shortChat) }
func (a *App) serveCommand() *cobra.Command    { return a.delegated("serve", shortServe) }
func (a *App) mountCommand() *cobra.Command    { return a.delegated("mount", shortMount) }
func (a *App) umountCommand() *cobra.Command   { return a.delegated("umount", shortUmount) }
func (a *App) mcpCommand() *cobra.Command      { return a.delegated("mcp", shortMCP) }
func (a *App) policyCommand() *cobra.Command   { return a.delegated("policy", shortPolicy) }
func (a *App) toolsCommand() *cobra.Command    { return a.delegated("tools", shortTools) }
func (a *App) snapshotCommand() *cobra.Command { return a.delegated("snapshot", shortSnapshot) }

func (a *App) delegated(name, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:                name,
		Short:              short,
		DisableFlagParsing: true, // the full program parses them
		RunE:               func(*cobra.Command, []string) error { return a.runFull(a.args) },
	}
	// `nsys-cortex help NAME` is the full program's help of NAME.
	cmd.SetHelpFunc(func(*cobra.Command, []string) {
		fmt.Fprintf(a.Stderr, "nsys-cortex: %s\n", describe(a.runFull([]string{name, "--help"})))
	})
	return cmd
}

// runFull replaces this process with the full program, run with args.
// It returns only when that cannot be done, with why.
func (a *App) runFull(args []string) error {
	if a.FullProgram == nil {
		return fmt.Errorf("this nsys-cortex is the light program and knows no full one")
	}
	p, err := a.FullProgram()
	if err != nil {
		return err
	}
	argv := append([]string{"nsys-cortex"}, args...)
	return fmt.Errorf("running the full program %s: %w", p, syscall.Exec(p, argv, os.Environ()))
}
