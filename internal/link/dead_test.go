//go:build linux

package link_test

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/link"
)

// setLoopback brings this thread's network namespace's lo up or down.
func setLoopback(up bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	var flags uint16 = unix.IFF_LOOPBACK
	if up {
		flags |= unix.IFF_UP | unix.IFF_RUNNING
	}
	ifr.SetUint16(flags)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// The channel's heartbeat: a connection from DeadDialer whose peer
// vanishes without closing (its network gone: no FIN, no RST, no
// acknowledgement, as when a node is lost) ends with ETIMEDOUT about d
// later (idle, at the keepalive probe after d: they come a second
// apart), whether the host is waiting for an answer (idle: keepalive) or
// sending (unacknowledged data). The peer here is in a network namespace
// of the test's own whose loopback is taken down.
func TestDeadDialer(t *testing.T) {
	const d = 1500 * time.Millisecond // kube mode's (internal/sandbox/kube: deadAfter)
	for _, sending := range []bool{false, true} {
		name := map[bool]string{false: "idle", true: "sending"}[sending]
		t.Run(name, func(t *testing.T) {
			type result struct {
				took time.Duration
				err  error
			}
			res := make(chan result, 1)
			go func() {
				// This goroutine's thread gets a network namespace of its
				// own and dies with it: the goroutine never unlocks.
				runtime.LockOSThread()
				fail := func(err error) { res <- result{err: err} }
				if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
					fail(err)
					return
				}
				if err := setLoopback(true); err != nil {
					fail(err)
					return
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					fail(err)
					return
				}
				defer ln.Close()
				c, err := link.DeadDialer(d).Dial("tcp", ln.Addr().String())
				if err != nil {
					fail(err)
					return
				}
				defer c.Close()
				peer, err := ln.Accept()
				if err != nil {
					fail(err)
					return
				}
				defer peer.Close()
				if err := setLoopback(false); err != nil {
					fail(err)
					return
				}
				start := time.Now()
				if sending {
					c.Write([]byte("a request the peer never acknowledges"))
				}
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, err = c.Read(make([]byte, 1))
				res <- result{time.Since(start), err}
			}()
			r := <-res
			if errors.Is(r.err, unix.EPERM) {
				t.Skip("a network namespace of the test's own needs CAP_SYS_ADMIN")
			}
			if !errors.Is(r.err, syscall.ETIMEDOUT) {
				t.Fatalf("read on a connection whose peer vanished: %v after %v, want ETIMEDOUT", r.err, r.took)
			}
			t.Logf("dead after %v", r.took.Round(10*time.Millisecond))
			if r.took > 2500*time.Millisecond {
				t.Fatalf("the connection was taken for dead %v after its peer vanished, want within 2.5 s (DeadAfter %v: keepalive probes come a second apart)", r.took, d)
			}
		})
	}
}
