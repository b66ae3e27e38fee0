package protocol

import (
	"errors"
	"fmt"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Code is one of the closed set of error codes that cross the channel.
type Code string

// The error codes. Nothing else crosses the wire: an unknown code read from a
// peer is turned into INTERNAL.
const (
	CodeNotFound    Code = "NOT_FOUND"   // no such file, process, terminal or neuron
	CodePermission  Code = "PERMISSION"  // the operating system refused access
	CodePathEscape  Code = "PATH_ESCAPE" // the path leaves the neuron's root
	CodeTimeout     Code = "TIMEOUT"     // the command ran past its deadline
	CodeTooLarge    Code = "TOO_LARGE"   // a frame, file or output exceeds a cap
	CodeBadRequest  Code = "BAD_REQUEST" // arguments are missing or invalid
	CodeUnsupported Code = "UNSUPPORTED" // the peer does not implement the command
	CodeNotRunning  Code = "NOT_RUNNING" // the neuron's agent is gone
	CodeInternal    Code = "INTERNAL"    // anything else
)

// codes is the wire's one table: every code, and the class of the errors
// that carry it (errdefs), which every other boundary maps from.
var codes = []struct {
	code  Code
	class errdefs.Class
}{
	{CodeNotFound, errdefs.NotFound},
	{CodePermission, errdefs.Permission},
	{CodePathEscape, errdefs.PathEscape},
	{CodeTimeout, errdefs.Timeout},
	{CodeTooLarge, errdefs.TooLarge},
	{CodeBadRequest, errdefs.Invalid},
	{CodeUnsupported, errdefs.Unsupported},
	{CodeNotRunning, errdefs.NotRunning},
	{CodeInternal, errdefs.Internal},
}

// Codes returns every error code.
func Codes() []Code {
	out := make([]Code, len(codes))
	for i, c := range codes {
		out[i] = c.code
	}
	return out
}

// ParseCode returns the code named s, or false when s is not one.
func ParseCode(s string) (Code, bool) {
	for _, c := range codes {
		if string(c.code) == s {
			return c.code, true
		}
	}
	return "", false
}

// String returns the code's wire name.
func (c Code) String() string { return string(c) }

// Class returns the class of the errors that carry c (Internal for a code
// not in the closed set).
func (c Code) Class() errdefs.Class {
	for _, r := range codes {
		if r.code == c {
			return r.class
		}
	}
	return errdefs.Internal
}

// Error is a failure that crosses the channel: a code and a message a person
// can act on.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return e.Message
}

// Class returns the class of e's code (errdefs.Classed).
func (e *Error) Class() errdefs.Class { return e.Code.Class() }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &protocol.Error{Code: protocol.CodeNotFound}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Normalize returns e with an unknown code replaced by INTERNAL, so a peer
// cannot widen the closed set.
func (e *Error) Normalize() *Error {
	if _, ok := ParseCode(string(e.Code)); ok {
		return e
	}
	return &Error{Code: CodeInternal, Message: fmt.Sprintf("%s (peer sent unknown error code %q)", e.Message, e.Code)}
}

// CodeOf returns the code of the first *Error in err's chain, or INTERNAL.
func CodeOf(err error) Code {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}

// HasCode reports whether err carries code c.
func HasCode(err error, c Code) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == c
}
