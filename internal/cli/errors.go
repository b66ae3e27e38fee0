package cli

import (
	"errors"
	"fmt"
	"strings"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// outcome is what the CLI makes of an error of one class.
type outcome struct {
	// spawnExit is the exit status of a command that could not be started
	// in a neuron (exec, shell, term): a shell's 127 and 126 where the
	// program is missing or not runnable, ExitFailure otherwise.
	spawnExit int
	// hint is added to the message of a local error (the daemon's
	// answers say what to do themselves).
	hint string
}

// outcomes is the CLI's one table of errors. Every failure of the CLI
// exits ExitFailure, with the message describe gives; exec passes the
// command's own status through.
var outcomes = map[errdefs.Class]outcome{
	errdefs.Internal:   {spawnExit: ExitFailure},
	errdefs.NotFound:   {spawnExit: ExitNotFound},
	errdefs.NotRunning: {spawnExit: ExitFailure},
	errdefs.OwnedElsewhere: {spawnExit: ExitFailure,
		hint: "; when that is nsys-cortex serve, go through it: --api URL or NSYS_CORTEX_API_URL"},
	errdefs.Busy:                {spawnExit: ExitFailure},
	errdefs.Locked:              {spawnExit: ExitFailure},
	errdefs.Exists:              {spawnExit: ExitFailure},
	errdefs.Invalid:             {spawnExit: ExitFailure},
	errdefs.RangeNotSatisfiable: {spawnExit: ExitFailure},
	errdefs.Unenforceable:       {spawnExit: ExitFailure},
	errdefs.Unsupported:         {spawnExit: ExitFailure},
	errdefs.TooLarge:            {spawnExit: ExitFailure},
	errdefs.Timeout:             {spawnExit: ExitFailure},
	errdefs.Permission:          {spawnExit: ExitNoInvoke},
	errdefs.PathEscape:          {spawnExit: ExitFailure},
	errdefs.PolicyDenied:        {spawnExit: ExitFailure},
	errdefs.Unauthorized:        {spawnExit: ExitFailure},
	errdefs.Unavailable:         {spawnExit: ExitFailure},
	errdefs.Capacity:            {spawnExit: ExitFailure},
	errdefs.RateLimited:         {spawnExit: ExitFailure},
	errdefs.BootFailed:          {spawnExit: ExitFailure},
	errdefs.Cancelled:           {spawnExit: ExitFailure},
}

// outcomeOf returns the row of err's class.
func outcomeOf(err error) outcome {
	if o, ok := outcomes[errdefs.Of(err)]; ok {
		return o
	}
	return outcome{spawnExit: ExitFailure}
}

// describe turns an error into the message a person reads: what the
// agent answered names its code, as the daemon's answers do (APIError
// says "message (CODE)"); a local error gets its class's hint.
func describe(err error) string {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return printable(fmt.Sprintf("%s (%s)", err.Error(), pe.Code))
	case errors.As(err, new(cortex.APIError)):
		return printable(err.Error())
	}
	return printable(err.Error()) + outcomeOf(err).hint
}

// printable escapes what an error carries of a neuron's words (a file
// name, an agent's message) that a terminal would act on: control
// characters and escape sequences are shown escaped, line by line.
func printable(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = protocol.CleanLogText(l)
	}
	return strings.Join(lines, "\n")
}

// spawnError reports a program that could not start with the shell's status
// (127 not found, 126 not runnable) and the reason on stderr.
func spawnError(err error) error {
	if code := outcomeOf(err).spawnExit; code != ExitFailure {
		return &exitError{code: code, msg: describe(err)}
	}
	return err
}
