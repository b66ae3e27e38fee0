// Package errdefs is Cortex's one vocabulary of error classes: a small
// closed set (not found, not running, invalid, ...) that every package's
// errors carry and every boundary maps once, in one table of its own — to
// a protocol code on the wire, an HTTP status and API code in the API, an
// errno in /ctx, an exit status and message in the CLI.
//
// A class is recognised by behaviour, as in containerd's errdefs: an
// error says its class with a Class method (the Classed interface), so any
// package can classify an error without importing the package that made
// it. The standard library's errors are classified too: context.Canceled,
// context.DeadlineExceeded, fs.ErrNotExist, fs.ErrExist, fs.ErrPermission
// (and the errnos that match them).
//
// Adding a class: a constant here, its name in names, and one row in each
// boundary's table; each table's test fails until the row is there.
//
// It is a foundation package: standard library only, no other package of
// this module.
package errdefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
)

// Class is the kind of a failure, as every boundary reports it.
type Class uint8

// The classes. The zero Class is Internal: an error no one classified is
// an internal failure.
const (
	// Internal: a failure of Cortex itself, or one nothing classified.
	Internal Class = iota
	// NotFound: no such neuron, file, process, snapshot or session.
	NotFound
	// NotRunning: the neuron exists but its agent is not running (or not
	// answering).
	NotRunning
	// OwnedElsewhere: another live process owns the neuron.
	OwnedElsewhere
	// Busy: the thing serves one request at a time and is serving another
	// (a chat session in a turn).
	Busy
	// Locked: a lock with one holder is held by another (a terminal's
	// writer lock).
	Locked
	// Exists: what the request would create exists already (a snapshot
	// name taken, a neuron running).
	Exists
	// Invalid: the request itself is wrong (a bad id, argument or option).
	Invalid
	// RangeNotSatisfiable: a byte range outside the file (a kind of
	// Invalid).
	RangeNotSatisfiable
	// Unenforceable: a policy the mode cannot enforce here; nothing was
	// done (never a silent downgrade).
	Unenforceable
	// Unsupported: the peer or the mode does not implement the operation.
	Unsupported
	// TooLarge: a body, file, frame or output exceeds a cap.
	TooLarge
	// Timeout: the operation ran past its deadline.
	Timeout
	// Permission: the operating system (or the neuron's rules) refused
	// access.
	Permission
	// PathEscape: the path leaves the neuron's root (a kind of
	// Permission).
	PathEscape
	// PolicyDenied: a policy or the gate refused the request (a kind of
	// Permission).
	PolicyDenied
	// Unauthorized: the caller did not prove who it is (no or a wrong
	// token).
	Unauthorized
	// Unavailable: the service cannot do it now (a mode that cannot run
	// here, a daemon that is stopping, a chat that closed); retry later.
	Unavailable
	// Capacity: no room on the machine or under a configured ceiling (a
	// kind of Unavailable).
	Capacity
	// BootFailed: the neuron's agent did not come up.
	BootFailed
	// Cancelled: the caller went away or asked to stop.
	Cancelled
	// RateLimited: the caller sent more than its limit allows (an API
	// key's request rate or neuron count); retry later (a kind of
	// Unavailable).
	RateLimited

	numClasses
)

var names = [numClasses]string{
	Internal:            "internal",
	NotFound:            "not found",
	NotRunning:          "not running",
	OwnedElsewhere:      "owned elsewhere",
	Busy:                "busy",
	Locked:              "locked",
	Exists:              "exists",
	Invalid:             "invalid",
	RangeNotSatisfiable: "range not satisfiable",
	Unenforceable:       "unenforceable",
	Unsupported:         "unsupported",
	TooLarge:            "too large",
	Timeout:             "timeout",
	Permission:          "permission",
	PathEscape:          "path escape",
	PolicyDenied:        "policy denied",
	Unauthorized:        "unauthorized",
	Unavailable:         "unavailable",
	Capacity:            "capacity",
	BootFailed:          "boot failed",
	Cancelled:           "cancelled",
	RateLimited:         "rate limited",
}

// kindOf names the class a class is a kind of: IsPermission holds for a
// path escape, IsUnavailable for a lack of capacity.
var kindOf = map[Class]Class{
	RangeNotSatisfiable: Invalid,
	PathEscape:          Permission,
	PolicyDenied:        Permission,
	Capacity:            Unavailable,
	RateLimited:         Unavailable,
}

// Unmapped returns the classes a boundary's table has no row for: each
// boundary's test asks for none, so a new class cannot fall through to a
// default unnoticed.
func Unmapped[V any](table map[Class]V) []Class {
	var out []Class
	for _, c := range Classes() {
		if _, ok := table[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// Classes returns every class, Internal first.
func Classes() []Class {
	out := make([]Class, numClasses)
	for i := range out {
		out[i] = Class(i)
	}
	return out
}

// String names the class ("not found").
func (c Class) String() string {
	if c < numClasses {
		return names[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass returns the class named s (as String names it), or false.
func ParseClass(s string) (Class, bool) {
	for c, n := range names {
		if n == s {
			return Class(c), true
		}
	}
	return Internal, false
}

// Is reports whether c is target or a kind of it.
func (c Class) Is(target Class) bool {
	k, ok := kindOf[c]
	return c == target || ok && k == target
}

// Classed is an error that says its class. An error type of any package
// implements it to be mapped right by every boundary.
type Classed interface {
	error
	Class() Class
}

// standard classifies the standard library's errors, in this order.
var standard = []struct {
	err   error
	class Class
}{
	{context.DeadlineExceeded, Timeout},
	{context.Canceled, Cancelled},
	{fs.ErrNotExist, NotFound},
	{fs.ErrExist, Exists},
	{fs.ErrPermission, Permission},
}

// Of returns err's class: the class of the first error in its chain that
// says one (so a wrapper that says a class overrides what it wraps), else
// that of a standard error in the chain, else Internal. Of(nil) is
// Internal too: test err for nil first.
func Of(err error) Class {
	if err == nil {
		return Internal
	}
	var c Classed
	if errors.As(err, &c) {
		return c.Class()
	}
	for _, s := range standard {
		if errors.Is(err, s.err) {
			return s.class
		}
	}
	return Internal
}

// is reports whether err is of class c (or a kind of it).
func is(err error, c Class) bool { return err != nil && Of(err).Is(c) }

// IsInternal reports whether err is an internal failure (or unclassified).
func IsInternal(err error) bool { return is(err, Internal) }

// IsNotFound reports whether err means no such thing.
func IsNotFound(err error) bool { return is(err, NotFound) }

// IsNotRunning reports whether err means the neuron's agent is gone.
func IsNotRunning(err error) bool { return is(err, NotRunning) }

// IsConflict reports whether err means the thing is taken: owned
// elsewhere, busy, locked, or existing already.
func IsConflict(err error) bool {
	switch Of(err) {
	case OwnedElsewhere, Busy, Locked, Exists:
		return true
	}
	return false
}

// IsOwnedElsewhere reports whether err means another process owns the
// neuron.
func IsOwnedElsewhere(err error) bool { return is(err, OwnedElsewhere) }

// IsBusy reports whether err means the thing serves another request.
func IsBusy(err error) bool { return is(err, Busy) }

// IsLocked reports whether err means another holder has the lock.
func IsLocked(err error) bool { return is(err, Locked) }

// IsExists reports whether err means what would be created exists.
func IsExists(err error) bool { return is(err, Exists) }

// IsInvalid reports whether err means a bad request (a bad range too).
func IsInvalid(err error) bool { return is(err, Invalid) }

// IsRangeNotSatisfiable reports whether err means a range outside the
// file.
func IsRangeNotSatisfiable(err error) bool { return is(err, RangeNotSatisfiable) }

// IsUnenforceable reports whether err means a policy the mode cannot
// enforce.
func IsUnenforceable(err error) bool { return is(err, Unenforceable) }

// IsUnsupported reports whether err means an operation not implemented.
func IsUnsupported(err error) bool { return is(err, Unsupported) }

// IsTooLarge reports whether err means something exceeds a cap.
func IsTooLarge(err error) bool { return is(err, TooLarge) }

// IsTimeout reports whether err means a deadline passed.
func IsTimeout(err error) bool { return is(err, Timeout) }

// IsPermission reports whether err means access was refused (a path
// escape and a policy's denial too).
func IsPermission(err error) bool { return is(err, Permission) }

// IsPathEscape reports whether err means a path leaves the neuron's root.
func IsPathEscape(err error) bool { return is(err, PathEscape) }

// IsPolicyDenied reports whether err means a policy or the gate refused.
func IsPolicyDenied(err error) bool { return is(err, PolicyDenied) }

// IsUnauthorized reports whether err means the caller is not
// authenticated.
func IsUnauthorized(err error) bool { return is(err, Unauthorized) }

// IsUnavailable reports whether err means "not now" (a lack of capacity
// too).
func IsUnavailable(err error) bool { return is(err, Unavailable) }

// IsCapacity reports whether err means no room.
func IsCapacity(err error) bool { return is(err, Capacity) }

// IsBootFailed reports whether err means the agent did not come up.
func IsBootFailed(err error) bool { return is(err, BootFailed) }

// IsCancelled reports whether err means the caller went away.
func IsCancelled(err error) bool { return is(err, Cancelled) }

// IsRateLimited reports whether err means the caller is over its limits
// and should retry later.
func IsRateLimited(err error) bool { return is(err, RateLimited) }

// classError is an error of a class with a message, and what it wraps.
type classError struct {
	class Class
	err   error
}

func (e *classError) Error() string { return e.err.Error() }
func (e *classError) Class() Class  { return e.class }
func (e *classError) Unwrap() error { return e.err }

// New returns an error of class c saying msg: a package's sentinel error
// (var ErrX = errdefs.New(errdefs.NotFound, "no such x")).
func New(c Class, msg string) error { return &classError{class: c, err: errors.New(msg)} }

// Errorf returns an error of class c with a formatted message; %w wraps
// as fmt.Errorf does (the class given here overrides the wrapped one's).
func Errorf(c Class, format string, args ...any) error {
	return &classError{class: c, err: fmt.Errorf(format, args...)}
}
