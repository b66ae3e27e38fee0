package cortex

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Code is an error code of the API. Each has one HTTP status
// (HTTPStatus); the set is closed, and a code this SDK does not know (from
// a newer daemon) is treated as INTERNAL.
type Code string

// Error codes of the API.
const (
	CodeBadRequest     Code = "BAD_REQUEST"
	CodeUnauthorized   Code = "UNAUTHORIZED"
	CodePolicyDenied   Code = "POLICY_DENIED"
	CodePathEscape     Code = "PATH_ESCAPE"
	CodePermission     Code = "PERMISSION"
	CodeNotFound       Code = "NOT_FOUND"
	CodeNotRunning     Code = "NOT_RUNNING"
	CodeOwnedElsewhere Code = "OWNED_ELSEWHERE"
	// CodeBusy: a chat session is running another request (one at a time).
	CodeBusy Code = "BUSY"
	// CodeExists: what a request would create exists already (a snapshot
	// name taken).
	CodeExists              Code = "EXISTS"
	CodeTooLarge            Code = "TOO_LARGE"
	CodeRangeNotSatisfiable Code = "RANGE_NOT_SATISFIABLE"
	CodeUnenforceable       Code = "UNENFORCEABLE"
	CodeUnsupported         Code = "UNSUPPORTED"
	CodeCapacity            Code = "CAPACITY"
	// CodeRateLimited: the API key sent more requests, or holds more
	// neurons, than its limits allow; APIError.RetryAfter says when to
	// try again.
	CodeRateLimited Code = "RATE_LIMITED"
	CodeUnavailable Code = "UNAVAILABLE"
	CodeTimeout     Code = "TIMEOUT"
	CodeBootFailed  Code = "BOOT_FAILED"
	CodeInternal    Code = "INTERNAL"
)

// codes is the SDK's one table of the codes: each one's HTTP status, the
// class (errdefs) of the errors that carry it, which the daemon maps from,
// and its typed error where a program reacts to it.
var codes = []codeRow{
	{CodeBadRequest, http.StatusBadRequest, errdefs.Invalid, func(e APIError) error { return BadRequestError{e} }},
	{CodeUnauthorized, http.StatusUnauthorized, errdefs.Unauthorized, func(e APIError) error { return UnauthorizedError{e} }},
	{CodePolicyDenied, http.StatusForbidden, errdefs.PolicyDenied, func(e APIError) error { return PolicyDeniedError{e} }},
	{CodePathEscape, http.StatusForbidden, errdefs.PathEscape, func(e APIError) error { return PathEscapeError{e} }},
	{CodePermission, http.StatusForbidden, errdefs.Permission, nil},
	{CodeNotFound, http.StatusNotFound, errdefs.NotFound, func(e APIError) error { return NotFoundError{e} }},
	{CodeNotRunning, http.StatusConflict, errdefs.NotRunning, func(e APIError) error { return NotRunningError{e} }},
	{CodeOwnedElsewhere, http.StatusConflict, errdefs.OwnedElsewhere, func(e APIError) error { return OwnedElsewhereError{e} }},
	{CodeBusy, http.StatusConflict, errdefs.Busy, nil},
	{CodeExists, http.StatusConflict, errdefs.Exists, func(e APIError) error { return ExistsError{e} }},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, errdefs.TooLarge, func(e APIError) error { return TooLargeError{e} }},
	{CodeRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable, errdefs.RangeNotSatisfiable, nil},
	{CodeUnenforceable, http.StatusUnprocessableEntity, errdefs.Unenforceable, nil},
	{CodeUnsupported, http.StatusNotImplemented, errdefs.Unsupported, nil},
	{CodeCapacity, http.StatusServiceUnavailable, errdefs.Capacity, func(e APIError) error { return CapacityError{e} }},
	{CodeRateLimited, http.StatusTooManyRequests, errdefs.RateLimited, func(e APIError) error { return RateLimitedError{e} }},
	{CodeUnavailable, http.StatusServiceUnavailable, errdefs.Unavailable, nil},
	{CodeTimeout, http.StatusGatewayTimeout, errdefs.Timeout, func(e APIError) error { return TimeoutError{e} }},
	{CodeBootFailed, http.StatusBadGateway, errdefs.BootFailed, nil},
	{CodeInternal, http.StatusInternalServerError, errdefs.Internal, nil},
}

type codeRow struct {
	code   Code
	status int
	class  errdefs.Class
	typed  func(APIError) error
}

// rowOf returns c's row; a code this SDK does not know has INTERNAL's
// class and no status.
func rowOf(c Code) codeRow {
	for _, r := range codes {
		if r.code == c {
			return r
		}
	}
	return codeRow{code: c, class: errdefs.Internal}
}

// Codes returns every error code of the API.
func Codes() []Code {
	out := make([]Code, len(codes))
	for i, c := range codes {
		out[i] = c.code
	}
	return out
}

// HTTPStatus returns the HTTP status of code c, 0 for a code this SDK does
// not know.
func (c Code) HTTPStatus() int { return rowOf(c).status }

// String returns the code as the API writes it.
func (c Code) String() string { return string(c) }

// ErrorBody is the JSON of every error answer: {"error":{"code","message"}}.
type ErrorBody struct {
	Error APIError `json:"error"`
}

// APIError is an error the daemon answered. Every typed error below wraps
// one, so errors.As(err, &cortex.APIError{}) gives the code of any.
type APIError struct {
	Status  int    `json:"-"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// RetryAfter is the answer's Retry-After (a RATE_LIMITED one's), 0
	// when it had none.
	RetryAfter time.Duration `json:"-"`
}

func (e APIError) Error() string { return fmt.Sprintf("%s (%s)", e.Message, e.Code) }

// Class returns the class of e's code, so that Cortex's own code
// classifies the daemon's answers as it does its local errors.
func (e APIError) Class() errdefs.Class { return rowOf(e.Code).class }

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
	RateLimitedError    struct{ APIError }
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
func (e RateLimitedError) Unwrap() error    { return e.APIError }

// Typed returns the typed error of e's code (e itself for the others).
func (e APIError) Typed() error {
	if r := rowOf(e.Code); r.typed != nil {
		return r.typed(e)
	}
	return e
}
