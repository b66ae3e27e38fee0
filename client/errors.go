package cortex

import (
	"fmt"
	"net/http"
)

// Error codes of the API, each with one HTTP status.
const (
	CodeBadRequest     = "BAD_REQUEST"
	CodeUnauthorized   = "UNAUTHORIZED"
	CodePolicyDenied   = "POLICY_DENIED"
	CodePathEscape     = "PATH_ESCAPE"
	CodePermission     = "PERMISSION"
	CodeNotFound       = "NOT_FOUND"
	CodeNotRunning     = "NOT_RUNNING"
	CodeOwnedElsewhere = "OWNED_ELSEWHERE"
	// CodeBusy: a chat session is running another request (one at a time).
	CodeBusy = "BUSY"
	// CodeExists: what a request would create exists already (a snapshot
	// name taken).
	CodeExists              = "EXISTS"
	CodeTooLarge            = "TOO_LARGE"
	CodeRangeNotSatisfiable = "RANGE_NOT_SATISFIABLE"
	CodeUnenforceable       = "UNENFORCEABLE"
	CodeUnsupported         = "UNSUPPORTED"
	CodeCapacity            = "CAPACITY"
	CodeUnavailable         = "UNAVAILABLE"
	CodeTimeout             = "TIMEOUT"
	CodeBootFailed          = "BOOT_FAILED"
	CodeInternal            = "INTERNAL"
)

// Statuses maps every error code to its HTTP status.
var Statuses = map[string]int{
	CodeBadRequest:          http.StatusBadRequest,
	CodeUnauthorized:        http.StatusUnauthorized,
	CodePolicyDenied:        http.StatusForbidden,
	CodePathEscape:          http.StatusForbidden,
	CodePermission:          http.StatusForbidden,
	CodeNotFound:            http.StatusNotFound,
	CodeNotRunning:          http.StatusConflict,
	CodeOwnedElsewhere:      http.StatusConflict,
	CodeBusy:                http.StatusConflict,
	CodeExists:              http.StatusConflict,
	CodeTooLarge:            http.StatusRequestEntityTooLarge,
	CodeRangeNotSatisfiable: http.StatusRequestedRangeNotSatisfiable,
	CodeUnenforceable:       http.StatusUnprocessableEntity,
	CodeUnsupported:         http.StatusNotImplemented,
	CodeCapacity:            http.StatusServiceUnavailable,
	CodeUnavailable:         http.StatusServiceUnavailable,
	CodeTimeout:             http.StatusGatewayTimeout,
	CodeBootFailed:          http.StatusBadGateway,
	CodeInternal:            http.StatusInternalServerError,
}

// ErrorBody is the JSON of every error answer: {"error":{"code","message"}}.
type ErrorBody struct {
	Error APIError `json:"error"`
}

// APIError is an error the daemon answered. Every typed error below wraps
// one, so errors.As(err, &cortex.APIError{}) gives the code of any.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e APIError) Error() string { return fmt.Sprintf("%s (%s)", e.Message, e.Code) }

// The typed errors, one per code a program reacts to.
type (
	BadRequestError     struct{ APIError }
	UnauthorizedError   struct{ APIError }
	PolicyDeniedError   struct{ APIError }
	PathEscapeError     struct{ APIError }
	NotFoundError       struct{ APIError }
	NotRunningError     struct{ APIError }
	OwnedElsewhereError struct{ APIError }
	ExistsError         struct{ APIError }
	TooLargeError       struct{ APIError }
	CapacityError       struct{ APIError }
	TimeoutError        struct{ APIError }
)

func (e BadRequestError) Unwrap() error     { return e.APIError }
func (e UnauthorizedError) Unwrap() error   { return e.APIError }
func (e PolicyDeniedError) Unwrap() error   { return e.APIError }
func (e PathEscapeError) Unwrap() error     { return e.APIError }
func (e NotFoundError) Unwrap() error       { return e.APIError }
func (e NotRunningError) Unwrap() error     { return e.APIError }
func (e OwnedElsewhereError) Unwrap() error { return e.APIError }
func (e ExistsError) Unwrap() error         { return e.APIError }
func (e TooLargeError) Unwrap() error       { return e.APIError }
func (e CapacityError) Unwrap() error       { return e.APIError }
func (e TimeoutError) Unwrap() error        { return e.APIError }

// Typed returns the typed error of e's code (e itself for the others).
func (e APIError) Typed() error {
	switch e.Code {
	case CodeBadRequest:
		return BadRequestError{e}
	case CodeUnauthorized:
		return UnauthorizedError{e}
	case CodePolicyDenied:
		return PolicyDeniedError{e}
	case CodePathEscape:
		return PathEscapeError{e}
	case CodeNotFound:
		return NotFoundError{e}
	case CodeNotRunning:
		return NotRunningError{e}
	case CodeOwnedElsewhere:
		return OwnedElsewhereError{e}
	case CodeExists:
		return ExistsError{e}
	case CodeTooLarge:
		return TooLargeError{e}
	case CodeCapacity:
		return CapacityError{e}
	case CodeTimeout:
		return TimeoutError{e}
	}
	return e
}
