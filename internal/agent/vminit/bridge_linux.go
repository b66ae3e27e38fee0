package vminit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// The bridge joins host connections to the agent. The agent watches
// boot.VMChannelDir for host sockets, as in every other mode; for each host that
// connects (on a virtio-serial port, or over vsock) the bridge places a
// socket there, takes the agent's connection to it, removes it, and copies
// bytes both ways until one side ends. A fresh name per connection lets
// the agent dial at once, with no back-off from an earlier session.
type bridge struct {
	logf func(string, ...any)
	seq  atomic.Int64
	// agent is the agent's pid now, and uid the user it runs as: a socket
	// is the agent's to dial, and a connection from anyone else is dropped.
	agent func() int
	uid   int

	mu       sync.Mutex
	ports    map[string]bool       // devices served
	sessions map[net.Conn]hostSide // the agent's end of each joined session
}

// hostSide is the host's end: a virtio port or a vsock connection.
type hostSide interface {
	io.ReadWriter
	SetReadDeadline(time.Time) error
}

// exposeTimeout bounds the wait for the agent to dial a new socket.
const exposeTimeout = 30 * time.Second

// expose places a socket named for the connection in the channel
// directory and returns the agent's connection to it.
func (b *bridge) expose(kind string) (net.Conn, error) {
	name := fmt.Sprintf("%s-%d", kind, b.seq.Add(1))
	tmp := filepath.Join(boot.VMChannelDir, "."+name)
	final := filepath.Join(boot.VMChannelDir, name+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	// Only the agent's user may connect (0600, its own); and of that
	// user's processes, only the agent is taken.
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Chown(tmp, b.uid, b.uid); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	defer os.Remove(final)
	ln.SetDeadline(time.Now().Add(exposeTimeout))
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return nil, fmt.Errorf("the agent did not dial %s: %w", name, err)
		}
		pid, err := peerPID(c)
		if err == nil && b.agent != nil && pid == b.agent() {
			return c, nil
		}
		b.logf("%s: dropped a connection from pid %d, which is not the agent (%v)", name, pid, err)
		c.Close()
	}
}

// peerPID is the pid of the process at the other end of c.
func peerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return int(cred.Pid), nil
}

// reset ends every session: after a snapshot is restored the hosts the
// guest was talking to are gone, whatever the ports' state says (QEMU
// tells the guest of a port's host only if it changed across the restore,
// and a new host may have connected first), so each host starts afresh
// with the agent's hello.
func (b *bridge) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for agent, host := range b.sessions {
		agent.Close()
		host.SetReadDeadline(time.Now())
	}
}

// join copies between the host's end and the agent's connection until
// either ends (or reset ends it).
func (b *bridge) join(host hostSide, agent net.Conn) {
	b.mu.Lock()
	if b.sessions == nil {
		b.sessions = map[net.Conn]hostSide{}
	}
	b.sessions[agent] = host
	b.mu.Unlock()
	join(host, agent)
	b.mu.Lock()
	delete(b.sessions, agent)
	b.mu.Unlock()
}

// join copies between the host's end and the agent's connection until
// either ends; the agent's connection is closed, the host's end left open
// (a virtio port stays the port; the caller closes a vsock connection).
func join(host hostSide, agent net.Conn) {
	hideAgent := struct{ io.ReadWriter }{agent} // plain copies: no splice into a char device
	hideHost := struct{ io.ReadWriter }{host}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.CopyBuffer(hideAgent, hideHost, make([]byte, 64<<10)) // the host left (EOF), or the agent did
		agent.Close()
	}()
	io.CopyBuffer(hideHost, hideAgent, make([]byte, 64<<10)) // the agent ended the session, or is closed
	agent.Close()
	host.SetReadDeadline(time.Now()) // ends the other copy if the host is still there
	<-done
	host.SetReadDeadline(time.Time{})
}

// servePorts serves every virtio-serial port named boot.PortPrefix+N. The
// ports a VM boots with appear as virtio_console probes them: the first
// second is watched closely. Once the want ports the host made are there
// it stops looking; with want 0 (unknown) it looks on, rarely, as long as
// the guest runs.
func (b *bridge) servePorts(want int) {
	for i := 0; ; i++ {
		found := 0
		for dev, name := range virtioPorts() {
			if !strings.HasPrefix(name, boot.PortPrefix) || name == boot.CtlPort || name == boot.EgressPort {
				continue
			}
			found++
			b.mu.Lock()
			seen := b.ports[dev]
			if b.ports == nil {
				b.ports = map[string]bool{}
			}
			b.ports[dev] = true
			b.mu.Unlock()
			if !seen {
				go b.servePort(dev, name)
			}
		}
		if want > 0 && found >= want {
			return
		}
		if i < 10 {
			time.Sleep(100 * time.Millisecond)
		} else {
			time.Sleep(portScan)
		}
	}
}

// virtioPorts maps /dev/vportNpM to its name.
func virtioPorts() map[string]string {
	out := map[string]string{}
	entries, _ := os.ReadDir("/sys/class/virtio-ports")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
		if err == nil {
			out["/dev/"+e.Name()] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// portDevice returns the device of the port called name, waiting up to d.
func portDevice(name string, d time.Duration) (string, error) {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		for dev, n := range virtioPorts() {
			if n == name {
				return dev, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no virtio-serial port named %s", name)
		}
	}
}

// servePort serves one port: each time a host connects, one session.
func (b *bridge) servePort(dev, name string) {
	f, err := openPort(dev)
	if err != nil {
		b.logf("port %s: %v", name, err)
		return
	}
	defer f.Close()
	kind := "port" + strings.TrimPrefix(name, boot.PortPrefix)
	for {
		if err := waitHost(f); err != nil {
			b.logf("port %s: %v", name, err)
			return
		}
		c, err := b.expose(kind)
		if err != nil {
			b.logf("port %s: %v", name, err)
			time.Sleep(time.Second)
			continue
		}
		if _, err := f.Write([]byte(boot.PortReady)); err != nil {
			c.Close()
			continue
		}
		b.join(f, c)
	}
}

// openPort opens a virtio port for the runtime's poller (deadlines work).
func openPort(dev string) (*os.File, error) {
	return os.OpenFile(dev, os.O_RDWR|unix.O_NONBLOCK, 0)
}

// waitHostCheck is how often waitHost looks at a port without being woken,
// and portScan how often ports not yet there are looked for: an idle
// guest's only timers, so they are rare.
const (
	waitHostCheck = 5 * time.Second
	portScan      = 5 * time.Second
)

// waitHost returns once a host is connected to the port. A port without
// a host polls ready at once, with POLLHUP (and reads give EOF), so a plain
// poll would spin; but the runtime's poller is edge-triggered, and the
// port's wait queue is woken when the host's state changes: waiting for
// the next edge blocks until then. A port whose host just connected polls
// POLLOUT alone, which the poller reports to writers, so this waits as a
// writer. A look every waitHostCheck guards against a missed wakeup.
func waitHost(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	defer f.SetWriteDeadline(time.Time{})
	for {
		var perr error
		f.SetWriteDeadline(time.Now().Add(waitHostCheck))
		err := raw.Write(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLOUT}}
			if _, perr = unix.Poll(fds, 0); perr != nil {
				return !errors.Is(perr, unix.EINTR)
			}
			return fds[0].Revents&unix.POLLHUP == 0 // connected: done; else wait for an edge
		})
		if perr != nil && !errors.Is(perr, unix.EINTR) {
			return perr
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// listenVsock listens on a vsock port for connections from the host.
func listenVsock(port uint32) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock: binding port %d: %w", port, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock: %w", err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("vsock:%d", port)), nil
}

// acceptVsock accepts the next connection from the host (CID 2); others
// are closed.
func acceptVsock(ln *os.File) (*os.File, error) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	for {
		var nfd int
		var sa unix.Sockaddr
		var aerr error
		if err := raw.Read(func(fd uintptr) bool {
			nfd, sa, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
			return !errors.Is(aerr, unix.EAGAIN)
		}); err != nil {
			return nil, err
		}
		if aerr != nil {
			if errors.Is(aerr, unix.EINTR) || errors.Is(aerr, unix.ECONNABORTED) {
				continue
			}
			return nil, aerr
		}
		if vm, ok := sa.(*unix.SockaddrVM); !ok || vm.CID != unix.VMADDR_CID_HOST {
			unix.Close(nfd)
			continue
		}
		return os.NewFile(uintptr(nfd), "vsock-conn"), nil
	}
}

// serveVsock bridges every connection the host opens to port.
func (b *bridge) serveVsock(port uint32) {
	ln, err := listenVsock(port)
	if err != nil {
		b.logf("%v (no vsock channel; virtio-serial ports still serve)", err)
		return
	}
	defer ln.Close()
	for {
		c, err := acceptVsock(ln)
		if err != nil {
			b.logf("vsock: %v", err)
			return
		}
		go func() {
			defer c.Close()
			a, err := b.expose("vsock")
			if err != nil {
				b.logf("vsock: %v", err)
				return
			}
			b.join(c, a)
		}()
	}
}
