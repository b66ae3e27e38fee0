package kube

import (
	"context"
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
)

// Forwarder reaches a port of a pod through the API server's
// port-forward (the pods/portforward subresource, what kubectl
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

// Dial opens a connection to port of pod namespace/name: a port-forward
// session of its own (websockets, else SPDY, as kubectl tries them) with
// one data stream. What it returns is one end of a socket pair whose
// other end is copied to and from that stream; closing it ends the
// session. An error the kubelet reports (nothing listens on the port)
// ends it too.
func (f *Forwarder) Dial(ctx context.Context, namespace, name string, port int32) (net.Conn, error) {
	u := f.core.Post().Resource("pods").Namespace(namespace).Name(name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(f.rc)
	if err != nil {
		return nil, err
	}
	d := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, f.rc); err == nil {
		d = portforward.NewFallbackDialerForStreaming(ws, d, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	type dialed struct {
		c   httpstream.Connection
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, _, err := d.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{c, err}
	}()
	var conn httpstream.Connection
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, r.err)
		}
		conn = r.c
	case <-ctx.Done():
		go func() { // the dial's own timeouts end it
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, ctx.Err())
	}
	local, err := bridge(conn, port)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, err)
	}
	return local, nil
}

// bridge opens the error and data streams of one forwarded connection to
// port on conn and copies the data stream to and from a socket pair,
// returning the pair's other end. Whichever side ends first ends both,
// and the session with them.
func bridge(conn httpstream.Connection, port int32) (net.Conn, error) {
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
	var once sync.Once
	end := func() {
		once.Do(func() {
			remote.Close()
			conn.Close()
		})
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
		// What the kubelet said, if it did, before the host reads the end.
		select {
		case <-errDone:
		case <-time.After(time.Second):
		}
		end()
	}()
	go func() {
		io.Copy(data, remote)
		end()
	}()
	return &forwardedConn{Conn: local, said: said}, nil
}

// forwardedConn is the host's end of a forwarded connection: reading
// past its end gives what the kubelet said, when it said why.
type forwardedConn struct {
	net.Conn
	said *atomic.Pointer[string]
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
