package sandbox

import (
	"fmt"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Each error type says its class (errdefs): the boundaries map classes,
// never these types, and callers ask errdefs.IsNotFound and the like.

// NotFoundError: no neuron has this id (no state, no overlay).
type NotFoundError struct {
	ID string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("neuron %q not found (nsys-cortex list shows the neurons there are)", e.ID)
}

// Class is errdefs.NotFound.
func (e *NotFoundError) Class() errdefs.Class { return errdefs.NotFound }

// NotRunningError: the neuron exists but its agent is not running (or not
// answering).
type NotRunningError struct {
	ID     string
	Reason string
	// Hint says what to do; empty means "create it again".
	Hint string
}

func (e *NotRunningError) Error() string {
	msg := fmt.Sprintf("neuron %q is not running", e.ID)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	hint := e.Hint
	if hint == "" {
		hint = "nsys-cortex create " + e.ID + " starts it again with its data"
	}
	return msg + " (" + hint + ")"
}

// Class is errdefs.NotRunning.
func (e *NotRunningError) Class() errdefs.Class { return errdefs.NotRunning }

// OwnedElsewhereError: another live process owns the neuron.
type OwnedElsewhereError struct {
	ID     string
	Owner  *Owner
	Reason string
}

func (e *OwnedElsewhereError) Error() string {
	msg := fmt.Sprintf("neuron %q is owned by another process", e.ID)
	if e.Owner != nil {
		msg = fmt.Sprintf("neuron %q is owned by %s (pid %d)", e.ID, e.Owner.Command, e.Owner.PID)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Class is errdefs.OwnedElsewhere.
func (e *OwnedElsewhereError) Class() errdefs.Class { return errdefs.OwnedElsewhere }

// AlreadyRunningError: Create was asked for a neuron that is running.
type AlreadyRunningError struct {
	State *State
}

func (e *AlreadyRunningError) Error() string {
	if e.State.Status == StatusPaused {
		return fmt.Sprintf("neuron %q is paused (mode %s): resume it (nsys-cortex resume %s)", e.State.ID, e.State.Mode, e.State.ID)
	}
	if e.State.PID <= 0 { // a detached container: no host process stands for it
		return fmt.Sprintf("neuron %q is already running (mode %s)", e.State.ID, e.State.Mode)
	}
	return fmt.Sprintf("neuron %q is already running (mode %s, pid %d)", e.State.ID, e.State.Mode, e.State.PID)
}

// Class is errdefs.Exists.
func (e *AlreadyRunningError) Class() errdefs.Class { return errdefs.Exists }

// CapacityError: the machine (or a configured ceiling) has no room.
type CapacityError struct {
	Reason string
}

func (e *CapacityError) Error() string { return "no capacity: " + e.Reason }

// Class is errdefs.Capacity.
func (e *CapacityError) Class() errdefs.Class { return errdefs.Capacity }

// UnavailableError: a mode cannot run here, or refuses to without consent.
type UnavailableError struct {
	Mode   string
	Reason string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("mode %s is unavailable: %s", e.Mode, e.Reason)
}

// Class is errdefs.Unavailable.
func (e *UnavailableError) Class() errdefs.Class { return errdefs.Unavailable }

// UnenforceableError: a policy was asked for that the mode cannot enforce
// here; the neuron is not created (never a silent downgrade).
type UnenforceableError struct {
	Mode   string
	Policy string
	Reason string
}

func (e *UnenforceableError) Error() string {
	return fmt.Sprintf("mode %s cannot enforce %s: %s", e.Mode, e.Policy, e.Reason)
}

// Class is errdefs.Unenforceable.
func (e *UnenforceableError) Class() errdefs.Class { return errdefs.Unenforceable }

// InvalidError: the request itself is wrong (a bad id, a bad option).
type InvalidError struct {
	Reason string
	// Err is the cause where a caller may test for it (errors.Is sees it
	// through Unwrap); Reason says it already.
	Err error
}

func (e *InvalidError) Error() string { return e.Reason }

func (e *InvalidError) Unwrap() error { return e.Err }

// Class is errdefs.Invalid.
func (e *InvalidError) Class() errdefs.Class { return errdefs.Invalid }

// BootError: the agent did not come up.
type BootError struct {
	ID     string
	Reason string
	// Log is the tail of the agent's log, when there is one.
	Log string
}

func (e *BootError) Error() string {
	msg := fmt.Sprintf("neuron %q did not start: %s", e.ID, e.Reason)
	if e.Log != "" {
		msg += "\nlast lines of the agent's log:\n" + e.Log
	}
	return msg
}

// Class is errdefs.BootFailed.
func (e *BootError) Class() errdefs.Class { return errdefs.BootFailed }

// UnsupportedError: the mode does not implement the operation; nothing was
// done.
type UnsupportedError struct {
	Mode string
	// Op names the operation ("pause", "pause --to-disk").
	Op     string
	Reason string
}

func (e *UnsupportedError) Error() string {
	msg := fmt.Sprintf("mode %s does not support %s", e.Mode, e.Op)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Class is errdefs.Unsupported.
func (e *UnsupportedError) Class() errdefs.Class { return errdefs.Unsupported }
