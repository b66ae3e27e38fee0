package fakefc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Muxer fakes the host side of Firecracker's hybrid vsock device: it
// listens on the device's uds_path, reads "CONNECT <port>\n" from each
// host connection and, when the guest listens on that port, answers
// "OK <host port>\n" and hands the connection to the guest's listener;
// otherwise it closes the connection without a word, as Firecracker does
// when the guest resets it. Guest-initiated connections go to
// "<uds_path>_<port>".
type Muxer struct {
	uds string
	ln  *net.UnixListener

	mu       sync.Mutex
	ports    map[uint32]func(net.Conn) // the guest's listeners
	live     map[net.Conn]struct{}     // connections up now (both directions)
	nextPort uint32
	paused   bool
	closed   bool
	running  *sync.Cond // signalled when paused or closed changes
	refused  int        // CONNECTs to a port nothing listened on
	wg       sync.WaitGroup
}

// NewMuxer binds uds (which must not exist: Firecracker fails with
// "address in use") and starts serving it.
func NewMuxer(uds string) (*Muxer, error) {
	if _, err := os.Lstat(uds); err == nil {
		return nil, fmt.Errorf("cannot bind %s: Address in use (os error 98)", uds)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: uds, Net: "unix"})
	if err != nil {
		return nil, err
	}
	m := &Muxer{uds: uds, ln: ln, ports: map[uint32]func(net.Conn){}, live: map[net.Conn]struct{}{}, nextPort: 1 << 30}
	m.running = sync.NewCond(&m.mu)
	m.wg.Add(1)
	go m.accept()
	return m, nil
}

func (m *Muxer) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.hostConn(c)
		}()
	}
}

// hostConn reads the CONNECT line a byte at a time (nothing past it may
// be consumed) and connects the host to the guest's port.
func (m *Muxer) hostConn(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var line []byte
	b := make([]byte, 1)
	for len(line) < 32 {
		if _, err := c.Read(b); err != nil {
			c.Close()
			return
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	c.SetReadDeadline(time.Time{})
	rest, ok := strings.CutPrefix(string(line), "CONNECT ")
	port, err := strconv.ParseUint(rest, 10, 32)
	if !ok || err != nil {
		c.Close() // Firecracker drops a malformed request
		return
	}
	m.mu.Lock()
	serve := m.ports[uint32(port)]
	if m.closed || m.paused || serve == nil {
		m.refused++
		m.mu.Unlock()
		c.Close() // the guest answers RST: no OK
		return
	}
	m.nextPort++
	hp := m.nextPort
	m.live[c] = struct{}{}
	m.mu.Unlock()
	if _, err := fmt.Fprintf(c, "OK %d\n", hp); err != nil {
		m.forget(c)
		c.Close()
		return
	}
	serve(&tracked{Conn: c, m: m})
}

// tracked removes itself from the live set when closed, and carries
// nothing while the guest is paused: its vCPUs read and write nothing.
type tracked struct {
	net.Conn
	m *Muxer
}

func (t *tracked) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.m.waitRunning()
	return n, err
}

func (t *tracked) Write(p []byte) (int, error) {
	t.m.waitRunning()
	return t.Conn.Write(p)
}

// waitRunning returns once the guest is not paused (or the device is gone).
func (m *Muxer) waitRunning() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.paused && !m.closed {
		m.running.Wait()
	}
}

func (t *tracked) Close() error {
	t.m.forget(t.Conn)
	return t.Conn.Close()
}

func (m *Muxer) forget(c net.Conn) {
	m.mu.Lock()
	delete(m.live, c)
	m.mu.Unlock()
}

// Refused says how many host connections were closed without an OK
// because nothing listened on their port (or the VM was paused).
func (m *Muxer) Refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
}

// GuestListen makes the guest listen on port: serve gets each connection
// (and owns it).
func (m *Muxer) GuestListen(port uint32, serve func(net.Conn)) {
	m.mu.Lock()
	m.ports[port] = serve
	m.mu.Unlock()
}

// GuestDial connects the guest to host port (CID 2): Firecracker dials
// <uds_path>_<port>, where the host must listen.
func (m *Muxer) GuestDial(ctx context.Context, port uint32) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", m.uds+"_"+strconv.FormatUint(uint64(port), 10))
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.Close()
		return nil, errors.New("vsock device is gone")
	}
	m.live[c] = struct{}{}
	m.mu.Unlock()
	return &tracked{Conn: c, m: m}, nil
}

// SetPaused stops (or restarts) the guest answering: a paused guest's
// vCPUs do not run, so no CONNECT gets an OK.
func (m *Muxer) SetPaused(p bool) {
	m.mu.Lock()
	m.paused = p
	m.running.Broadcast()
	m.mu.Unlock()
}

// Reset closes every connection, as the transport reset event Firecracker
// sends the guest around a snapshot does.
func (m *Muxer) Reset() {
	m.mu.Lock()
	live := m.live
	m.live = map[net.Conn]struct{}{}
	m.mu.Unlock()
	for c := range live {
		c.Close()
	}
}

// Close stops the device and ends every connection.
func (m *Muxer) Close() {
	m.mu.Lock()
	m.closed = true
	m.running.Broadcast()
	m.mu.Unlock()
	m.ln.Close()
	m.Reset()
	m.wg.Wait()
}
