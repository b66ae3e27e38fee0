package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// ownError is a package's own error type: it says its class, and nothing
// else needs to know the type.
type ownError struct{ class errdefs.Class }

func (e *ownError) Error() string        { return "own " + e.class.String() }
func (e *ownError) Class() errdefs.Class { return e.class }

func TestOf(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want errdefs.Class
	}{
		{"nil", nil, errdefs.Internal},
		{"plain", errors.New("x"), errdefs.Internal},
		{"classed", &ownError{errdefs.Busy}, errdefs.Busy},
		{"wrapped", fmt.Errorf("a: %w", &ownError{errdefs.NotRunning}), errdefs.NotRunning},
		{"joined", errors.Join(errors.New("x"), &ownError{errdefs.Capacity}), errdefs.Capacity},
		{"sentinel", errdefs.New(errdefs.Exists, "taken"), errdefs.Exists},
		{"outer wins", errdefs.Errorf(errdefs.Invalid, "bad: %w", &ownError{errdefs.NotFound}), errdefs.Invalid},
		{"classed before standard", fmt.Errorf("%w: %w", context.Canceled, &ownError{errdefs.Timeout}), errdefs.Timeout},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), errdefs.Timeout},
		{"canceled", context.Canceled, errdefs.Cancelled},
		{"not exist", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, errdefs.NotFound},
		{"exist", os.ErrExist, errdefs.Exists},
		{"permission", syscall.EACCES, errdefs.Permission},
	} {
		if got := errdefs.Of(c.err); got != c.want {
			t.Errorf("%s: Of(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestKinds(t *testing.T) {
	esc := errdefs.New(errdefs.PathEscape, "out")
	if !errdefs.IsPermission(esc) || !errdefs.IsPathEscape(esc) || errdefs.IsPolicyDenied(esc) {
		t.Error("a path escape is a kind of permission failure, and only that")
	}
	if !errdefs.IsUnavailable(errdefs.New(errdefs.Capacity, "full")) || errdefs.IsCapacity(errdefs.New(errdefs.Unavailable, "no")) {
		t.Error("capacity is a kind of unavailable, not the other way round")
	}
	for _, c := range []errdefs.Class{errdefs.OwnedElsewhere, errdefs.Busy, errdefs.Locked, errdefs.Exists} {
		if !errdefs.IsConflict(errdefs.New(c, "x")) {
			t.Errorf("%v is not a conflict", c)
		}
	}
	if errdefs.IsConflict(nil) || errdefs.IsConflict(errdefs.New(errdefs.NotRunning, "x")) || errdefs.IsNotFound(nil) {
		t.Error("nil or not running is a conflict")
	}
	if !errdefs.IsInternal(errors.New("x")) || errdefs.IsInternal(nil) {
		t.Error("IsInternal")
	}
}

// Every class has an IsXxx that answers for it, a name that parses back,
// and errors.Is still sees what an Errorf wraps.
func TestEveryClass(t *testing.T) {
	is := map[errdefs.Class]func(error) bool{
		errdefs.Internal: errdefs.IsInternal, errdefs.NotFound: errdefs.IsNotFound, errdefs.NotRunning: errdefs.IsNotRunning,
		errdefs.OwnedElsewhere: errdefs.IsOwnedElsewhere, errdefs.Busy: errdefs.IsBusy, errdefs.Locked: errdefs.IsLocked,
		errdefs.Exists: errdefs.IsExists, errdefs.Invalid: errdefs.IsInvalid, errdefs.RangeNotSatisfiable: errdefs.IsRangeNotSatisfiable,
		errdefs.Unenforceable: errdefs.IsUnenforceable, errdefs.Unsupported: errdefs.IsUnsupported, errdefs.TooLarge: errdefs.IsTooLarge,
		errdefs.Timeout: errdefs.IsTimeout, errdefs.Permission: errdefs.IsPermission, errdefs.PathEscape: errdefs.IsPathEscape,
		errdefs.PolicyDenied: errdefs.IsPolicyDenied, errdefs.Unauthorized: errdefs.IsUnauthorized, errdefs.Unavailable: errdefs.IsUnavailable,
		errdefs.Capacity: errdefs.IsCapacity, errdefs.BootFailed: errdefs.IsBootFailed, errdefs.Cancelled: errdefs.IsCancelled,
		errdefs.RateLimited: errdefs.IsRateLimited,
	}
	for _, c := range errdefs.Classes() {
		f := is[c]
		if f == nil {
			t.Errorf("class %v has no IsXxx in this test", c)
			continue
		}
		if !f(errdefs.New(c, "x")) {
			t.Errorf("Is%v does not hold for its own class", c)
		}
		if p, ok := errdefs.ParseClass(c.String()); !ok || p != c {
			t.Errorf("ParseClass(%q) = %v, %v", c.String(), p, ok)
		}
	}
	if len(is) != len(errdefs.Classes()) {
		t.Errorf("%d IsXxx for %d classes", len(is), len(errdefs.Classes()))
	}
	err := errdefs.Errorf(errdefs.Timeout, "waiting: %w", context.DeadlineExceeded)
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "waiting: context deadline exceeded" {
		t.Errorf("Errorf: %v", err)
	}
}

func TestUnmapped(t *testing.T) {
	table := map[errdefs.Class]int{}
	for _, c := range errdefs.Classes() {
		table[c] = 1
	}
	if got := errdefs.Unmapped(table); len(got) != 0 {
		t.Errorf("Unmapped of a full table: %v", got)
	}
	delete(table, errdefs.Locked)
	if got := errdefs.Unmapped(table); len(got) != 1 || got[0] != errdefs.Locked {
		t.Errorf("Unmapped without Locked: %v", got)
	}
}
