package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/term"
)

// Every class has a row: a class nobody mapped would otherwise exit
// ExitFailure without anyone deciding it.
func TestEveryClassHasAnOutcome(t *testing.T) {
	if missing := errdefs.Unmapped(outcomes); len(missing) > 0 {
		t.Errorf("classes with no outcome: %v", missing)
	}
	for c, o := range outcomes {
		if o.spawnExit != ExitFailure && o.spawnExit != ExitNoInvoke && o.spawnExit != ExitNotFound {
			t.Errorf("class %v: a spawn failure exits %d", c, o.spawnExit)
		}
	}
}

// The statuses and messages of the CLI before classes, kept: locally
// and through the daemon alike.
func TestOutcomes(t *testing.T) {
	remote := func(code cortex.Code) error { return cortex.APIError{Code: code, Message: "m"}.Typed() }
	for _, c := range []struct {
		err  error
		exit int    // of spawnError
		msg  string // of describe
	}{
		{protocol.Errorf(protocol.CodeNotFound, "no such file"), ExitNotFound, "no such file (NOT_FOUND)"},
		{protocol.Errorf(protocol.CodePermission, "denied"), ExitNoInvoke, "denied (PERMISSION)"},
		{protocol.Errorf(protocol.CodePathEscape, "out"), ExitFailure, "out (PATH_ESCAPE)"},
		{fmt.Errorf("start: %w", protocol.Errorf(protocol.CodeNotRunning, "gone")), ExitFailure, "start: gone (NOT_RUNNING)"},
		{remote(cortex.CodeNotFound), ExitNotFound, "m (NOT_FOUND)"},
		{remote(cortex.CodePermission), ExitNoInvoke, "m (PERMISSION)"},
		{remote(cortex.CodePolicyDenied), ExitFailure, "m (POLICY_DENIED)"},
		{remote(cortex.CodeOwnedElsewhere), ExitFailure, "m (OWNED_ELSEWHERE)"},
		{&sandbox.OwnedElsewhereError{ID: "n1"}, ExitFailure,
			`neuron "n1" is owned by another process; when that is nsys-cortex serve, go through it: --api URL or NSYS_CORTEX_API_URL`},
		{&term.BusyError{Terminal: "t1"}, ExitFailure, "terminal t1 already has a writer: watch it with attach --watch, or detach the other one first"},
		{errors.New("plain"), ExitFailure, "plain"},
	} {
		if got := describe(c.err); got != c.msg {
			t.Errorf("describe(%T) = %q, want %q", c.err, got, c.msg)
		}
		exit := ExitFailure
		var ee *exitError
		if err := spawnError(c.err); errors.As(err, &ee) {
			exit = ee.code
			if ee.msg != c.msg {
				t.Errorf("spawnError(%T) says %q, want %q", c.err, ee.msg, c.msg)
			}
		} else if err != c.err {
			t.Errorf("spawnError(%T) = %v, want it unchanged", c.err, err)
		}
		if exit != c.exit {
			t.Errorf("spawnError(%T) exits %d, want %d", c.err, exit, c.exit)
		}
	}
}

// An error carries a neuron's words (a file name it chose, what its agent
// answered): a terminal must never act on them.
func TestErrorsArePrintable(t *testing.T) {
	name := "esc/\x1b]0;T\a\x1b]52;c;UFdORUQ=\a\x1b[2K\rnsys-cortex: copy complete"
	for _, err := range []error{
		fmt.Errorf("cp: %s exists and is not a directory", name),
		protocol.Errorf(protocol.CodeNotFound, "no such file %s", name),
		cortex.APIError{Code: cortex.CodeNotFound, Message: name}.Typed(),
	} {
		msg := describe(err)
		for _, c := range msg {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				t.Fatalf("describe(%v) = %q: it holds the control character %q", err, msg, c)
			}
		}
		if !strings.Contains(msg, `\x1b]0;T`) {
			t.Errorf("describe = %q: the escape is not shown escaped", msg)
		}
	}
	if got := describe(errors.New("line one\nline two")); got != "line one\nline two" {
		t.Errorf("a message of two lines became %q", got)
	}
}
