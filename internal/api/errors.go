package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// codes is the API's one table: the code (and so the HTTP status,
// cortex.Code.HTTPStatus) each class of error is answered with.
var codes = map[errdefs.Class]cortex.Code{
	errdefs.Internal:            cortex.CodeInternal,
	errdefs.NotFound:            cortex.CodeNotFound,
	errdefs.NotRunning:          cortex.CodeNotRunning,
	errdefs.OwnedElsewhere:      cortex.CodeOwnedElsewhere,
	errdefs.Busy:                cortex.CodeBusy,
	errdefs.Locked:              cortex.CodeOwnedElsewhere, // the writer of a terminal is elsewhere
	errdefs.Exists:              cortex.CodeExists,
	errdefs.Invalid:             cortex.CodeBadRequest,
	errdefs.RangeNotSatisfiable: cortex.CodeRangeNotSatisfiable,
	errdefs.Unenforceable:       cortex.CodeUnenforceable,
	errdefs.Unsupported:         cortex.CodeUnsupported,
	errdefs.TooLarge:            cortex.CodeTooLarge,
	errdefs.Timeout:             cortex.CodeTimeout,
	errdefs.Permission:          cortex.CodePermission,
	errdefs.PathEscape:          cortex.CodePathEscape,
	errdefs.PolicyDenied:        cortex.CodePolicyDenied,
	errdefs.Unauthorized:        cortex.CodeUnauthorized,
	errdefs.Unavailable:         cortex.CodeUnavailable,
	errdefs.Capacity:            cortex.CodeCapacity,
	errdefs.RateLimited:         cortex.CodeRateLimited,
	errdefs.BootFailed:          cortex.CodeBootFailed,
	errdefs.Cancelled:           cortex.CodeUnavailable, // whoever asked is gone, or the daemon stops
}

// apiError is err as the API answers it: an APIError a handler made is
// answered as it is; any other error with its class's code and its
// message, with what an API client can do about it added (explain).
func apiError(err error) cortex.APIError {
	var ae cortex.APIError
	if errors.As(err, &ae) {
		return ae
	}
	err = explain(err)
	code, ok := codes[errdefs.Of(err)]
	if !ok {
		code = cortex.CodeInternal
	}
	return cortex.APIError{Status: code.HTTPStatus(), Code: code, Message: err.Error()}
}

// explain adds to err what an API client can do about it, where its own
// message speaks to the command line or says too little.
func explain(err error) error {
	var (
		mbe *http.MaxBytesError
		nr  *sandbox.NotRunningError
	)
	switch class := errdefs.Of(err); {
	case errors.As(err, &mbe):
		return errdefs.Errorf(errdefs.TooLarge, "the request body is larger than this route's limit of %d bytes", mbe.Limit)
	case class == errdefs.NotRunning && errors.As(err, &nr):
		return fmt.Errorf("%w; over the API, POST /v1/neurons with {\"id\":%q} starts it again with its data", err, nr.ID)
	case class == errdefs.Cancelled:
		return fmt.Errorf("the request was cancelled (the client went away, or the daemon is stopping): %w", err)
	}
	return err
}

// writeError answers with the error's status and JSON body.
func writeError(w http.ResponseWriter, err error) {
	ae := apiError(err)
	status := ae.Code.HTTPStatus()
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Cortex-Error", string(ae.Code)) // for the metrics middleware
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(cortex.ErrorBody{Error: cortex.APIError{Code: ae.Code, Message: ae.Message}})
}

func badRequest(format string, args ...any) error {
	return cortex.APIError{Code: cortex.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decodeJSON reads a JSON body of at most maxJSONBody bytes into v; an
// unknown field, a wrong type or trailing data is a BAD_REQUEST naming it.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	// application/json is required: a web page cannot send it cross-site
	// without a CORS preflight (never granted), so a page the operator
	// visits cannot drive the daemon (curl: --json).
	if ct := r.Header.Get("Content-Type"); !isMediaType(ct, "application/json") {
		if ct == "" {
			ct = "none"
		}
		return badRequest("the body must be JSON sent as Content-Type: application/json (curl: --json), not %s", ct)
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		return err
	}
	if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var (
			se  *json.SyntaxError
			te  *json.UnmarshalTypeError
			mbe *http.MaxBytesError
		)
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			return badRequest("the request has no JSON body")
		case errors.As(err, &se):
			return badRequest("the body is not valid JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return badRequest("field %q must be a %s, not a JSON %s", jsonField(te.Field), jsonKind(te.Type), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return badRequest("%s (see api/openapi.yaml for the fields)", strings.TrimPrefix(err.Error(), "json: "))
		}
		return badRequest("the body is not valid JSON: %v", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return badRequest("the body has data after its JSON value")
	}
	return nil
}

// isMediaType reports whether a Content-Type header names want.
func isMediaType(header, want string) bool {
	mt, _, err := mime.ParseMediaType(header)
	return err == nil && mt == want
}

// jsonField turns the decoder's field path into the JSON one: the Go
// names of embedded structs ("Command.argv") are not in the JSON.
func jsonField(path string) string {
	var parts []string
	for _, p := range strings.Split(path, ".") {
		if p != "" && (p[0] < 'A' || p[0] > 'Z') {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ".")
}

// jsonKind names a Go type as the JSON value it decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "list of " + jsonKind(t.Elem()) + "s"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "whole number"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.String()
}
