package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/chatrun"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/session"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/term"
)

// Every class has a row: a class nobody mapped would otherwise be
// answered INTERNAL without anyone deciding it.
func TestEveryClassHasACode(t *testing.T) {
	if missing := errdefs.Unmapped(codes); len(missing) > 0 {
		t.Errorf("classes with no API code: %v", missing)
	}
	for c, code := range codes {
		if ae := apiError(fmt.Errorf("x: %w", errdefs.New(c, "y"))); ae.Code != code || ae.Status == 0 || ae.Status != code.HTTPStatus() {
			t.Errorf("an error of class %v is answered %s %d, want %s", c, ae.Code, ae.Status, code)
		}
	}
}

// Every code of the SDK is answered for the class the SDK reads it as:
// an error read back from the daemon is classed as the daemon classed it.
func TestEveryCodeRoundTrips(t *testing.T) {
	for _, code := range cortex.Codes() {
		c := cortex.APIError{Code: code}.Class()
		if got := codes[c]; got != code {
			t.Errorf("the SDK reads %s as %v, which the daemon answers %s", code, c, got)
		}
	}
}

// The codes every error was answered with before classes, kept (and the
// messages the API adds).
func TestAPIErrors(t *testing.T) {
	running := &sandbox.State{ID: "n1", Mode: "process", PID: 1}
	for _, c := range []struct {
		err  error
		code cortex.Code
		msg  string // what the message holds
	}{
		{badRequest("no %s", "x"), cortex.CodeBadRequest, "no x"},
		{cortex.APIError{Code: cortex.CodePolicyDenied, Message: "no"}, cortex.CodePolicyDenied, "no"},
		{fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 10}), cortex.CodeTooLarge, "limit of 10 bytes"},
		{fmt.Errorf("x: %w", store.ErrSnapshotExists), cortex.CodeExists, "snapshot exists"},
		{fmt.Errorf("x: %w", store.ErrSnapshotNotFound), cortex.CodeNotFound, "no such snapshot"},
		{&sandbox.InvalidError{Reason: "r", Err: store.ErrSnapshotMismatch}, cortex.CodeBadRequest, "r"},
		{&sandbox.NotFoundError{ID: "n1"}, cortex.CodeNotFound, `"n1" not found`},
		{&sandbox.NotRunningError{ID: "n1"}, cortex.CodeNotRunning, `POST /v1/neurons with {"id":"n1"}`},
		{&sandbox.OwnedElsewhereError{ID: "n1"}, cortex.CodeOwnedElsewhere, "owned by another process"},
		{&sandbox.CapacityError{Reason: "full"}, cortex.CodeCapacity, "full"},
		{&sandbox.UnavailableError{Mode: "kvm", Reason: "no"}, cortex.CodeUnavailable, "unavailable"},
		{&sandbox.UnenforceableError{Mode: "process", Policy: "net", Reason: "no"}, cortex.CodeUnenforceable, "cannot enforce"},
		{&sandbox.BootError{ID: "n1", Reason: "gone"}, cortex.CodeBootFailed, "did not start"},
		{protocol.Errorf(protocol.CodeNotFound, "f"), cortex.CodeNotFound, "f"},
		{protocol.Errorf(protocol.CodePermission, "f"), cortex.CodePermission, "f"},
		{protocol.Errorf(protocol.CodePathEscape, "f"), cortex.CodePathEscape, "f"},
		{protocol.Errorf(protocol.CodeTimeout, "f"), cortex.CodeTimeout, "f"},
		{protocol.Errorf(protocol.CodeTooLarge, "f"), cortex.CodeTooLarge, "f"},
		{protocol.Errorf(protocol.CodeBadRequest, "f"), cortex.CodeBadRequest, "f"},
		{protocol.Errorf(protocol.CodeUnsupported, "f"), cortex.CodeUnsupported, "f"},
		{protocol.Errorf(protocol.CodeNotRunning, "f"), cortex.CodeNotRunning, "f"},
		{protocol.Errorf(protocol.CodeInternal, "f"), cortex.CodeInternal, "f"},
		{fmt.Errorf("attach: %w", errStopping), cortex.CodeUnavailable, "shutting down"},
		{fmt.Errorf("exec: %w", context.DeadlineExceeded), cortex.CodeTimeout, "deadline"},
		{fmt.Errorf("exec: %w", context.Canceled), cortex.CodeUnavailable, "the request was cancelled"},
		{errors.New("plain"), cortex.CodeInternal, "plain"},
		// The chat's refusals, with their hints.
		{chatError(chatrun.ErrBusy), cortex.CodeBusy, "one request at a time"},
		{chatError(chatrun.ErrClosed), cortex.CodeUnavailable, "closed: retry"},
		{chatError(fmt.Errorf("rewind: %w", chatrun.ErrFilesLost)), cortex.CodeBadRequest, `"keepFiles": true`},
		{chatError(fmt.Errorf("s1: %w", session.ErrNotFound)), cortex.CodeNotFound, "s1: not found"},
		// Classed now, where they fell through to INTERNAL.
		{&term.BusyError{Terminal: "t1"}, cortex.CodeOwnedElsewhere, "already has a writer"},
		{&sandbox.AlreadyRunningError{State: running}, cortex.CodeExists, "already running"},
		{&gate.DeniedError{Request: gate.Request{Action: gate.Exec}}, cortex.CodePolicyDenied, "may not"},
	} {
		ae := apiError(c.err)
		if ae.Code != c.code || !strings.Contains(ae.Message, c.msg) {
			t.Errorf("%T %q: answered %s %q; want %s with %q", c.err, c.err, ae.Code, ae.Message, c.code, c.msg)
		}
	}
}
