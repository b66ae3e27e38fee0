package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// apiError maps an error of the layers below to the API's code.
func apiError(err error) cortex.APIError {
	var (
		ae  cortex.APIError
		pe  *protocol.Error
		nf  *sandbox.NotFoundError
		nr  *sandbox.NotRunningError
		oe  *sandbox.OwnedElsewhereError
		ce  *sandbox.CapacityError
		ue  *sandbox.UnavailableError
		ee  *sandbox.UnenforceableError
		ie  *sandbox.InvalidError
		be  *sandbox.BootError
		mbe *http.MaxBytesError
	)
	code := cortex.CodeInternal
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		code = cortex.CodeTooLarge
		err = fmt.Errorf("the request body is larger than this route's limit of %d bytes", mbe.Limit)
	case errors.Is(err, store.ErrSnapshotExists):
		code = cortex.CodeExists
	case errors.Is(err, store.ErrSnapshotNotFound):
		code = cortex.CodeNotFound
	case errors.Is(err, store.ErrSnapshotMismatch):
		code = cortex.CodeBadRequest
	case errors.As(err, &nf):
		code = cortex.CodeNotFound
	case errors.As(err, &nr):
		code = cortex.CodeNotRunning
	case errors.As(err, &oe):
		code = cortex.CodeOwnedElsewhere
	case errors.As(err, &ce):
		code = cortex.CodeCapacity
	case errors.As(err, &ue):
		code = cortex.CodeUnavailable
	case errors.As(err, &ee):
		code = cortex.CodeUnenforceable
	case errors.As(err, &ie):
		code = cortex.CodeBadRequest
	case errors.As(err, &be):
		code = cortex.CodeBootFailed
	case errors.As(err, &pe):
		switch pe.Code {
		case protocol.CodeNotFound:
			code = cortex.CodeNotFound
		case protocol.CodePermission:
			code = cortex.CodePermission
		case protocol.CodePathEscape:
			code = cortex.CodePathEscape
		case protocol.CodeTimeout:
			code = cortex.CodeTimeout
		case protocol.CodeTooLarge:
			code = cortex.CodeTooLarge
		case protocol.CodeBadRequest:
			code = cortex.CodeBadRequest
		case protocol.CodeUnsupported:
			code = cortex.CodeUnsupported
		case protocol.CodeNotRunning:
			code = cortex.CodeNotRunning
		}
	case errors.Is(err, errStopping):
		code = cortex.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = cortex.CodeTimeout
	case errors.Is(err, context.Canceled):
		code = cortex.CodeUnavailable
		err = fmt.Errorf("the request was cancelled (the client went away, or the daemon is stopping): %w", err)
	}
	if code == cortex.CodeNotRunning && nr != nil {
		err = fmt.Errorf("%w; over the API, POST /v1/neurons with {\"id\":%q} starts it again with its data", err, nr.ID)
	}
	return cortex.APIError{Status: cortex.Statuses[code], Code: code, Message: err.Error()}
}

// writeError answers with the error's status and JSON body.
func writeError(w http.ResponseWriter, err error) {
	ae := apiError(err)
	status := cortex.Statuses[ae.Code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Cortex-Error", ae.Code) // for the metrics middleware
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
