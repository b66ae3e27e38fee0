// Package ctxfstest holds what tests that mount CortexFS share.
package ctxfstest

import (
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/ctxfs"
	"github.com/nsys-cortex/cortex/internal/ctxfs/ctxmount"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// Unmount unmounts srv at the end of a test and waits for its server to
// end. A copy of the mount in another mount namespace (a sandbox that a
// test running beside this one made while it was mounted) keeps the FUSE
// connection open once the mount is gone from here, and the server would
// wait for that copy's last user: once the mount is gone from this
// namespace, the connection is ended (as nsys-cortex mount does on exit).
func Unmount(t testing.TB, srv *ctxfs.Server) {
	t.Helper()
	unmounted := make(chan error, 1)
	go func() { unmounted <- srv.Unmount() }()
	waittest.For(t, time.Minute, "the unmount of "+srv.Dir(), func() bool {
		_, mounted := ctxmount.MountAt(srv.Dir())
		return len(unmounted) > 0 || !mounted
	})
	if len(unmounted) == 0 {
		// Nothing to end if the server ended meanwhile: the error says
		// the connection is gone, which is what is wanted.
		_ = srv.Abort()
	}
	if err := waittest.Recv(t, time.Minute, "the FUSE server to end", unmounted); err != nil {
		t.Errorf("unmount: %v", err)
	}
}
