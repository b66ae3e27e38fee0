package qemu

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// The channel of a VM neuron. QEMU listens on one Unix socket per
// virtio-serial port (vm-N.sock in the channel directory); the guest sees
// a host connect or disconnect on a port as the port opening or reaching
// EOF. A host process takes one free port (an flock on port-N.lock), and
// its link listens on a socket of its own as in every other mode; a relay
// joins the two. The relay connects to the port first and connects to the
// link only once the guest says its agent is ready for this session
// (boot.PortReady, which the relay keeps to itself), so the link's
// handshake clock does not run while the guest boots (under TCG that takes
// seconds); then the host's hello goes first, as on every channel. One port per host process lets several processes use one
// neuron at once, as the conformance suite requires.

// portSocket and portLock are port n's files in the channel directory.
func portSocket(dir string, n int) string { return filepath.Join(dir, fmt.Sprintf("vm-%d.sock", n)) }
func portLock(dir string, n int) string   { return filepath.Join(dir, fmt.Sprintf("port-%d.lock", n)) }

// claimPort takes the first free port of the VM (of ports), returning it
// and its lock, held until the file is closed.
func claimPort(dir string, ports int) (int, *os.File, error) {
	for n := 0; n < ports; n++ {
		f, err := os.OpenFile(portLock(dir, n), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return n, f, nil
		}
		f.Close()
	}
	return 0, nil, fmt.Errorf("all %d channel ports are in use by other host processes", ports)
}

// portLinger is how long a port stays claimed after its relay let go of
// it: long enough for the guest to see the disconnect before the next host
// connects, so a new session never inherits the last one's.
const portLinger = 250 * time.Millisecond

// relay joins one link (its socket at linkPath) to one port of the VM.
// It runs until the link's socket is gone (the link was closed).
type relay struct {
	linkPath, vmPath string
	lock             *os.File
	// after, when set, is closed once the VM may be dialled (a restored
	// guest has ended its snapshot's sessions).
	after <-chan struct{}
	// silence is the first wait for the guest on a port connection
	// (minSilence when zero; a restore's relay and tests shorten it).
	silence time.Duration
	// note, when set, records a silent port's redial in the neuron's log.
	note func(format string, args ...any)
}

func (r *relay) run() {
	defer func() {
		time.Sleep(portLinger)
		r.lock.Close()
	}()
	for wait := r.after; wait != nil; {
		select {
		case <-wait:
			wait = nil
		case <-time.After(200 * time.Millisecond):
			if !r.linkAlive() {
				return // the start failed before the guest resumed
			}
		}
	}
	backoff := 10 * time.Millisecond
	first := cmp.Or(r.silence, minSilence)
	silence := first
	for r.linkAlive() {
		vm, err := protocol.DialUnix(context.Background(), r.vmPath)
		if err != nil {
			// No VM (yet, or any more): the lifecycle closes the link
			// when the VM is gone for good.
			time.Sleep(backoff)
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		backoff = 10 * time.Millisecond
		said, err := r.guestSpeaks(vm, silence)
		if err != nil {
			vm.Close()
			if errors.Is(err, errSilent) {
				if r.note != nil {
					r.note("the guest said nothing on port %s for %s: dialling it again", filepath.Base(r.vmPath), silence)
				}
				silence = min(2*silence, maxSilence)
			}
			continue
		}
		silence = first
		host, err := protocol.DialUnix(context.Background(), r.linkPath)
		if err != nil {
			vm.Close()
			return // the link is gone
		}
		if len(said) == 0 {
			pipe(vm, host)
		} else if _, err := host.Write(said); err == nil {
			pipe(vm, host)
		}
		vm.Close()
		host.Close()
	}
}

// linkAlive reports whether the link still listens (its socket exists).
func (r *relay) linkAlive() bool {
	_, err := os.Lstat(r.linkPath)
	return err == nil
}

// A port connection on which the guest says nothing for minSilence is
// hung up and dialled again, and the wait doubles each time up to
// maxSilence: QEMU serves one host per port and leaves a second in its
// listen queue, where it would wait for as long as the first stays, and a
// guest that missed the host's arrival hears it again. A guest that boots
// or restores slowly (TCG) only sees its host come and go meanwhile.
// A restored guest has answered on its control port before its relay
// dials (restoreJob.resume), so it runs: silence there is a missed
// arrival, not a slow boot, and its first wait is restoredSilence.
const (
	minSilence      = 15 * time.Second
	restoredSilence = 2 * time.Second
	maxSilence      = time.Minute
)

// errSilent is why guestSpeaks gave up on a port connection.
var errSilent = errors.New("the guest said nothing on its port")

// guestSpeaks waits for the guest's readiness on a port connection
// (boot.PortReady), looking every 200 ms whether the link is still
// there, and returns what came after it (nothing, from a sound guest). It
// gives up with errSilent after silence without a byte.
func (r *relay) guestSpeaks(vm net.Conn, silence time.Duration) ([]byte, error) {
	buf := make([]byte, 64<<10)
	got := 0
	quiet := time.Now().Add(silence)
	for {
		vm.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := vm.Read(buf[got:])
		got += n
		// Every session the guest opens on the port starts with its
		// readiness; sessions it ended before this relay came (a guest
		// just restored ends those of its snapshot) leave theirs first.
		ready := []byte(boot.PortReady)
		rest := buf[:got]
		seen := false
		for bytes.HasPrefix(rest, ready) {
			rest, seen = rest[len(ready):], true
		}
		switch {
		case seen && (len(rest) == 0 || !bytes.HasPrefix(ready, rest)): // not another readiness, cut short
			vm.SetReadDeadline(time.Time{})
			return rest, nil
		case !seen && !bytes.HasPrefix(ready, rest):
			return nil, fmt.Errorf("the guest opened the port with %q, not its readiness", buf[:min(got, 64)])
		}
		if got == len(buf) {
			return nil, errors.New("the guest sent nothing but readiness")
		}
		if n > 0 && err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if !r.linkAlive() {
				return nil, errors.New("the link is gone")
			}
			if got == 0 && time.Now().After(quiet) {
				return nil, errSilent
			}
			continue
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.CopyBuffer(a, b, make([]byte, 256<<10))
		a.Close()
		b.Close()
	}()
	io.CopyBuffer(b, a, make([]byte, 256<<10))
	a.Close()
	b.Close()
	<-done
}
