package protocol

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// MaxSocketPath is the longest path bind(2) and connect(2) take for a Unix socket.
const MaxSocketPath = 107

// ListenUnix listens on the Unix socket path. A path longer than the kernel
// allows is reached through its directory's /proc/self/fd entry, so a deep
// home directory or a long neuron id never breaks the channel.
func ListenUnix(path string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := viaShortPath(path, func(p string) (err error) {
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	return ln, err
}

// DialUnix dials the Unix socket path, of any length (see ListenUnix).
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
	var c net.Conn
	err := viaShortPath(path, func(p string) (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "unix", p)
		return err
	})
	return c, err
}

func viaShortPath(path string, f func(string) error) error {
	if len(path) <= MaxSocketPath {
		return f(path)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), filepath.Base(path))
	if len(short) > MaxSocketPath {
		return fmt.Errorf("socket name %s is too long", filepath.Base(path))
	}
	return f(short)
}

// SocketBuffer is the send and receive buffer the channel asks for: big
// enough that a whole chunk moves with few wakeups (the kernel caps it at
// net.core.wmem_max / rmem_max).
const SocketBuffer = 4 << 20

// TuneConn sizes a channel connection's socket buffers.
func TuneConn(c net.Conn) {
	type buffered interface {
		SetReadBuffer(int) error
		SetWriteBuffer(int) error
	}
	if b, ok := c.(buffered); ok {
		b.SetReadBuffer(SocketBuffer)  // a refusal leaves the default, which works, only slower
		b.SetWriteBuffer(SocketBuffer) // likewise
	}
}

// Doorbell is a FIFO the host makes in a channel directory and writes a
// byte to each time it places a socket there. An agent that has no
// inotify instance to spare (they are counted per user, and every nsbox
// neuron's count goes to the owner of its user namespace) waits on it
// instead of scanning the directory every second.
const Doorbell = ".doorbell"

// ProbeGreeting is what `cortex-agent probe-listen` says to every
// connection: kube mode's network probe dials it (see kube.ProbeNetwork).
const ProbeGreeting = "nsys-cortex network probe\n"

// The network probe's egress check: after the greeting, the probe's host
// may send ProbeDial and an address (an IP and a port); the listener dials
// it from its pod and answers ProbeReached, or ProbeBlocked and why.
const (
	ProbeDial    = "dial "
	ProbeReached = "reached\n"
	ProbeBlocked = "blocked: "
	// probeDialTimeout bounds the listener's dial; probeAsk, how long it
	// waits for the host's line after its greeting.
	probeDialTimeout = 3 * time.Second
	probeAsk         = 2 * time.Second
)

// GreetProbes says ProbeGreeting to every connection ln accepts, answers
// a ProbeDial line that follows (dialling with dial), and closes it,
// until ln fails (or is closed); it returns why, once the connections it
// took are done (each within a few seconds).
func GreetProbes(ln net.Listener, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(probeAsk))
			if _, err := c.Write([]byte(ProbeGreeting)); err != nil {
				return
			}
			line, err := bufio.NewReaderSize(c, 128).ReadString('\n')
			addr, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), ProbeDial)
			if err != nil || !ok {
				return // a dial of the ingress check: the greeting was all
			}
			answer := ProbeReached
			if ap, perr := netip.ParseAddrPort(addr); perr != nil {
				answer = ProbeBlocked + "not an IP address and port\n"
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), probeDialTimeout)
				out, derr := dial(ctx, "tcp", ap.String())
				cancel()
				if derr != nil {
					answer = ProbeBlocked + strings.ReplaceAll(derr.Error(), "\n", " ") + "\n"
				} else {
					out.Close()
				}
			}
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write([]byte(answer))
		}()
	}
}
