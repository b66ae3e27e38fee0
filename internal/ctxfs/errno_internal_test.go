package ctxfs

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Every class has a row: a class nobody mapped would otherwise become
// EIO without anyone deciding it.
func TestEveryClassHasAnErrno(t *testing.T) {
	if missing := errdefs.Unmapped(errnos); len(missing) > 0 {
		t.Errorf("classes with no errno: %v", missing)
	}
	for c, en := range errnos {
		if got := Errno(fmt.Errorf("x: %w", errdefs.New(c, "y"))); got != en {
			t.Errorf("an error of class %v is %v, want %v", c, got, en)
		}
	}
}

// The errnos /ctx answered before classes, kept.
func TestErrnos(t *testing.T) {
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{syscall.ENOSPC, syscall.ENOSPC},
		{ErrNotFound, syscall.ENOENT},
		{ErrPermission, syscall.EACCES},
		{ErrDenied, syscall.EPERM},
		{fmt.Errorf("%w: bad", ErrInvalid), syscall.EINVAL},
		{ErrReadOnly, syscall.EROFS},
		{protocol.Errorf(protocol.CodeNotFound, "x"), syscall.ENOENT},
		{protocol.Errorf(protocol.CodePermission, "x"), syscall.EACCES},
		{protocol.Errorf(protocol.CodePathEscape, "x"), syscall.EACCES},
		{protocol.Errorf(protocol.CodeBadRequest, "x"), syscall.EINVAL},
		{protocol.Errorf(protocol.CodeTimeout, "x"), syscall.ETIMEDOUT},
		{protocol.Errorf(protocol.CodeTooLarge, "x"), syscall.EFBIG},
		{protocol.Errorf(protocol.CodeUnsupported, "x"), syscall.ENOTSUP},
		{protocol.Errorf(protocol.CodeNotRunning, "x"), syscall.EHOSTDOWN},
		{protocol.Errorf(protocol.CodeInternal, "x"), syscall.EIO},
		{fmt.Errorf("plain"), syscall.EIO},
	} {
		if got := Errno(c.err); got != c.want {
			t.Errorf("Errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !errdefs.IsPermission(ErrReadOnly) {
		t.Error("read-only is a permission failure")
	}
}
