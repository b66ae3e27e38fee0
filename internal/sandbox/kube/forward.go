package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	spdystream "k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/nsys-cortex/cortex/internal/link"
)

// Forwarder reaches a port of a pod through the API server's
// port-forward (the pods/portforward subresource, which kubectl
// port-forward uses), for a host outside the cluster that cannot reach
// pod IPs: kube.port_forward, --kube-port-forward. It is for
// development: every byte of a neuron's channel goes through the API
// server and the pod's kubelet.
type Forwarder struct {
	rc   *rest.Config
	core rest.Interface
}

// NewForwarder returns a Forwarder through the API server rc reaches.
func NewForwarder(rc *rest.Config) (*Forwarder, error) {
	rc = rest.CopyConfig(rc)
	rc.Timeout = 0 // a forwarded connection lasts as long as its link
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Forwarder{rc: rc, core: core.CoreV1().RESTClient()}, nil
}

// forwardDeadAfter is how long the TCP connection of a port-forward
// session to the API server may go unacknowledged (its SPDY pings every
// 5 s keep data in flight) before it is taken for dead: a laptop's
// network gone, and the link's pending requests fail NOT_RUNNING.
const forwardDeadAfter = 10 * time.Second

// Dial opens a connection to port of pod namespace/name: a port-forward
// session of its own (SPDY, over a TCP connection this Forwarder dials
// and owns) with one data stream. What it returns is one end of a
// socket pair whose other end is copied to and from that stream;
// closing it ends the session, whatever its copies are blocked on. An
// error the kubelet reports (nothing listens on the port) ends it too,
// and reading the returned connection then says what the kubelet said.
// ctx bounds the dial: when it ends first, what was dialled is closed
// and waited for.
func (f *Forwarder) Dial(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
	fail := func(err error) error { return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, err) }
	u := f.core.Post().Resource("pods").Namespace(namespace).Name(name).SubResource("portforward").URL()
	tlsConfig, err := rest.TLSConfigFor(f.rc)
	if err != nil {
		return nil, fail(err)
	}
	if tlsConfig == nil {
		// The system's roots (an upgrade transport without a TLS
		// configuration would check no certificate at all).
		tlsConfig = &tls.Config{}
	}
	own := &owned{}
	// The upgrade's own transport, for the connection to be this
	// session's to close (and dead after forwardDeadAfter): no proxy.
	tr := &http.Transport{TLSClientConfig: tlsConfig, DialContext: own.dialer(ctx)}
	rt, err := spdystream.NewRoundTripperWithConfig(spdystream.RoundTripperConfig{UpgradeTransport: tr, PingPeriod: 5 * time.Second})
	if err != nil {
		return nil, fail(err)
	}
	wrapped, err := rest.HTTPWrappersForConfig(f.rc, rt) // the credentials
	if err != nil {
		return nil, fail(err)
	}
	d := spdy.NewDialerForStreaming(spdy.NewUpgraderForStreaming(rt), &http.Client{Transport: wrapped}, http.MethodPost, u)
	type dialed struct {
		c     httpstream.Connection
		proto string
		err   error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, proto, err := d.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{c, proto, err}
	}()
	var r dialed
	select {
	case r = <-ch:
	case <-ctx.Done():
		own.close() // what the dial waits on fails now
		if r = <-ch; r.c != nil {
			r.c.Close()
		}
		return nil, fail(ctx.Err())
	}
	if r.err != nil {
		own.close()
		return nil, fail(r.err)
	}
	if r.proto != portforward.PortForwardProtocolV1Name {
		r.c.Close()
		own.close()
		return nil, fail(fmt.Errorf("the API server answered with protocol %.64q, not %s", r.proto, portforward.PortForwardProtocolV1Name))
	}
	local, err := bridge(r.c, own, port)
	if err != nil {
		r.c.Close()
		own.close()
		return nil, fail(err)
	}
	return local, nil
}

// owned holds the TCP connections a session dialled, to close them
// whatever holds their locks (a write blocked on a peer that does not
// read).
type owned struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// dialer dials as ctx allows, with forwardDeadAfter's keepalive, and
// keeps what it dials.
func (o *owned) dialer(ctx context.Context) func(context.Context, string, string) (net.Conn, error) {
	return func(_ context.Context, network, addr string) (net.Conn, error) {
		c, err := link.DeadDialer(forwardDeadAfter).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.closed {
			c.Close()
			return nil, net.ErrClosed
		}
		o.conns = append(o.conns, c)
		return c, nil
	}
}

func (o *owned) close() {
	o.mu.Lock()
	cs := o.conns
	o.conns, o.closed = nil, true
	o.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// bridge opens the error and data streams of one forwarded connection to
// port on conn and copies the data stream to and from a socket pair,
// returning the pair's other end. Whichever side ends first ends the
// session (own's connections closed first, so that no copy stays
// blocked); the host's end reads what came before the end.
func bridge(conn httpstream.Connection, own *owned, port int32) (net.Conn, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errs, err := conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("its error stream: %w", err)
	}
	errs.Close() // nothing is written to it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("its data stream: %w", err)
	}
	local, remote, err := socketPair()
	if err != nil {
		return nil, err
	}
	var sessionOnce, remoteOnce sync.Once
	endSession := func() {
		sessionOnce.Do(func() {
			own.close()
			conn.Close()
		})
	}
	end := func() {
		remoteOnce.Do(func() { remote.Close() })
		endSession()
	}
	said := &atomic.Pointer[string]{}
	errDone := make(chan struct{})
	go func() {
		// The kubelet writes here when it cannot reach the port (and
		// then ends the data stream); the stream ends with the session.
		msg, _ := io.ReadAll(io.LimitReader(errs, 4096))
		if len(msg) > 0 {
			m := strings.TrimSpace(string(msg))
			said.Store(&m)
			end()
		}
		close(errDone)
	}()
	go func() {
		io.Copy(remote, data)
		// Done with the stream: the kubelet ends the pair, and the
		// error stream with it, once both sides have (as kubectl).
		data.Reset()
		select {
		case <-errDone: // what the kubelet said, if it did, first
		case <-time.After(time.Second):
		}
		// The agent's side ended: the host reads all it sent, then the
		// end (not a reset: remote is closed by the copy below, once the
		// host closes or writes again).
		if u, ok := remote.(*net.UnixConn); ok {
			u.CloseWrite()
		}
		endSession()
	}()
	go func() {
		io.Copy(data, remote)
		end()
	}()
	return &forwardedConn{Conn: local, said: said, end: end}, nil
}

// forwardedConn is the host's end of a forwarded connection: reading
// past its end gives what the kubelet said, when it said why; closing it
// ends the session at once.
type forwardedConn struct {
	net.Conn
	said *atomic.Pointer[string]
	end  func()
}

func (c *forwardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		if m := c.said.Load(); m != nil {
			err = fmt.Errorf("the pod's kubelet: %.300q", *m)
		}
	}
	return n, err
}

func (c *forwardedConn) Close() error {
	err := c.Conn.Close()
	c.end()
	return err
}

// socketPair returns the two ends of a connected Unix stream socket pair.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "port-forward")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				unix.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// forwardAddress is the address a port-forwarding link's dialer gives
// for pod: its namespace and name, which Forwarder.Dial takes apart.
func forwardAddress(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// dialForwarded is link.Options.DialConn for a port-forwarding Manager.
func (m *Manager) dialForwarded(ctx context.Context, addr string) (net.Conn, error) {
	ns, name, ok := strings.Cut(addr, "/")
	if !ok {
		return nil, errors.New("not a pod's namespace/name: " + addr)
	}
	return m.Forward.Dial(ctx, ns, name, m.Cluster.Config.Defaults().AgentPort)
}
