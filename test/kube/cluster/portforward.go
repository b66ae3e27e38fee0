package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/kubernetes"
	kubeletpf "k8s.io/cri-streaming/pkg/streaming/portforward"
)

// Node is the node kubesim binds every pod to.
const Node = "node-1"

// ServePortForward serves the kubelet's port-forward for the pods of
// Node (the handler a kubelet's streaming server runs, from
// k8s.io/cri-streaming), on loopback over TLS, and registers Node with
// that address, which the API server's pods/portforward goes to (it
// does not check a kubelet's certificate unless told its authority). A
// forwarded connection is dialled to the pod's IP at the port asked:
// where kubesim's agents listen. It returns the count of connections
// forwarded. It ends with t.
func ServePortForward(t T, core kubernetes.Interface) *atomic.Int64 {
	t.Helper()
	f := &forwarder{core: core}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /portForward/{namespace}/{pod}
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if len(parts) != 3 || parts[0] != "portForward" {
			http.NotFound(w, r)
			return
		}
		kubeletpf.ServePortForward(w, r, f, parts[1]+"/"+parts[2], "", &kubeletpf.V4Options{},
			time.Hour, remotecommand.DefaultStreamCreationTimeout, []string{kubeletpf.ProtocolV1Name})
	}))
	srv.StartTLS()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		f.wg.Wait()
	})
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: Node},
		Status: corev1.NodeStatus{
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: u.Hostname()}},
		},
	}
	ctx := context.Background()
	got, err := core.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = core.CoreV1().Nodes().Get(ctx, Node, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("node %s: %v", Node, err)
	}
	// The status is the kubelet's to write, through its subresource.
	got.Status = node.Status
	if _, err := core.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s's status: %v", Node, err)
	}
	return &f.n
}

// forwarder is the kubelet side of a port-forward: it connects a stream
// to a port of the pod, as a kubelet does in the pod's network.
type forwarder struct {
	core kubernetes.Interface
	n    atomic.Int64
	wg   sync.WaitGroup
}

func (f *forwarder) PortForward(ctx context.Context, name, _ string, port int32, stream io.ReadWriteCloser) error {
	f.wg.Add(1)
	defer f.wg.Done()
	defer stream.Close()
	ns, pod, _ := strings.Cut(name, "/")
	p, err := f.core.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p.Spec.NodeName != Node || p.Status.PodIP == "" {
		return fmt.Errorf("pod %s is not running on %s", name, Node)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("failed to connect to port %d of pod %s: %w", port, name, err)
	}
	defer c.Close()
	f.n.Add(1)
	ended := make(chan struct{}, 2)
	go func() { io.Copy(c, stream); ended <- struct{}{} }()
	go func() { io.Copy(stream, c); ended <- struct{}{} }()
	n := 0
	select {
	case <-ended:
		n++
	case <-ctx.Done():
		// The session ended: its stream goes with it.
		if r, ok := stream.(interface{ Reset() error }); ok {
			r.Reset()
		}
	}
	// Either side ended: end both (the client ends its session once
	// its data stream is closed), and wait for the other copy, so that
	// nothing outlives the stream.
	c.Close()
	stream.Close()
	for ; n < 2; n++ {
		<-ended
	}
	return nil
}
