package protocol

import (
	"errors"
	"fmt"
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

var codes = []Code{CodeNotFound, CodePermission, CodePathEscape, CodeTimeout, CodeTooLarge,
	CodeBadRequest, CodeUnsupported, CodeNotRunning, CodeInternal}

// Codes returns every error code.
func Codes() []Code { return append([]Code(nil), codes...) }

// ParseCode returns the code named s, or false when s is not one.
func ParseCode(s string) (Code, bool) {
	for _, c := range codes {
		if string(c) == s {
			return c, true
		}
	}
	return "", false
}

// String returns the code's wire name.
func (c Code) String() string { return string(c) }

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
