package cortex_test

import (
	"errors"
	"net/http"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Each code has one status and a class of its own, and reads back as its
// typed error where it has one.
func TestCodes(t *testing.T) {
	classes := map[errdefs.Class]cortex.Code{}
	for _, c := range cortex.Codes() {
		if c.HTTPStatus() < 400 {
			t.Errorf("%s has status %d", c, c.HTTPStatus())
		}
		e := cortex.APIError{Code: c, Message: "m"}
		if prev, dup := classes[e.Class()]; dup {
			t.Errorf("%s and %s are both %v", prev, c, e.Class())
		}
		classes[e.Class()] = c
		var ae cortex.APIError
		if !errors.As(e.Typed(), &ae) || ae != e || errdefs.Of(e.Typed()) != e.Class() {
			t.Errorf("%s: Typed() = %#v", c, e.Typed())
		}
	}
	if cortex.CodeOwnedElsewhere.HTTPStatus() != http.StatusConflict || cortex.Code("NEWER").HTTPStatus() != 0 {
		t.Error("statuses")
	}
	if !errdefs.IsNotFound(cortex.APIError{Code: cortex.CodeNotFound}.Typed()) || !errors.As(cortex.APIError{Code: cortex.CodeNotFound}.Typed(), &cortex.NotFoundError{}) {
		t.Error("a NOT_FOUND answer is not found, and a NotFoundError")
	}
	if errdefs.Of(cortex.APIError{Code: "NEWER"}) != errdefs.Internal {
		t.Error("an unknown code is internal")
	}
}
