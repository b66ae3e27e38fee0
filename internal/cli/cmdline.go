package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandLineRule is how every command that runs a command line in a
// neuron (exec, launch) reads its words, for the help text of command name;
// flag is one of its flags, for the examples.
func commandLineRule(name, flag string) string {
	return fmt.Sprintf(`Flags go before ID, or between ID and a -- that starts the command line
(kubectl's habit: %[1]s ID %[2]s -- sh). Otherwise everything after ID is
the command line, dashes and all (docker's habit): %[1]s ID ls -la runs
ls -la, %[1]s ID %[2]s runs a program named %[2]s, and
%[1]s ID git diff -- f runs git diff -- f. A leading -- only marks where
the command line starts: %[1]s ID -- %[2]s runs %[2]s too.`, name, flag)
}

// commandArgs is the neuron and the command line of a command that runs
// one: cmd [flags] ID [[flags] --] COMMAND [ARG...], read by commandLineRule.
type commandArgs struct {
	ID   string
	Argv []string
	// usage is the error for a missing neuron or command line.
	usage string
}

// takeCommandArgs makes cmd read its words by commandLineRule into line:
// cobra parses the flags before ID and stops there; cmd's Args (the first
// hook after that parse, before PreRunE checks the flags together) reads
// the rest. need, when not nil, says whether cmd needs a command line at
// all (launch --profiles does not).
func takeCommandArgs(cmd *cobra.Command, line *commandArgs, need func(*cobra.Command) bool) {
	cmd.Flags().SetInterspersed(false)
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if need != nil && !need(cmd) {
			return nil
		}
		return line.parse(cmd, args)
	}
}

// parse reads args, the words from ID on, into line; flags between ID and
// a -- are set on cmd.
func (line *commandArgs) parse(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return errors.New(line.usage)
	}
	line.ID, args = args[0], args[1:]
	if dash := slices.Index(args, "--"); dash > 0 && isFlagWord(args[0]) {
		if err := flagsBeforeDash(cmd, args[:dash]); err != nil {
			return err
		}
		args = args[dash:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New(line.usage)
	}
	line.Argv = args
	return nil
}

// isFlagWord reports whether w reads as a flag ("-" alone is an operand).
func isFlagWord(w string) bool { return len(w) > 1 && w[0] == '-' }

// flagsBeforeDash sets the flags words give on cmd. Each word must be a
// flag of cmd or a flag's value: anything else there would be silently
// dropped or silently run, so it is refused by name.
func flagsBeforeDash(cmd *cobra.Command, words []string) error {
	fs := cmd.Flags()
	if err := fs.Parse(words); err != nil {
		return cmd.FlagErrorFunc()(cmd, fmt.Errorf("%w (between ID and --, only %s's flags go)", err, cmd.Name()))
	}
	if help, _ := fs.GetBool("help"); help {
		return pflag.ErrHelp // cobra shows the help, as for a flag before ID
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: %q is not a flag: between ID and -- only %s's flags go; the command line follows the --",
			cmd.Name(), fs.Arg(0), cmd.Name())
	}
	return nil
}
