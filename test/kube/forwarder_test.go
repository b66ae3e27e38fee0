package kube_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/waittest"
	"github.com/nsys-cortex/cortex/test/kube/cluster"
)

// forwarding counts the goroutines of the Forwarder's sessions whose
// stacks hold all of also. (spdystream's are not told apart from those
// of the kubelet's side, which runs in this process.)
func forwarding(also ...string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if !bytes.Contains(g, []byte("sandbox/kube/forward.go")) {
			continue
		}
		all := true
		for _, a := range also {
			all = all && bytes.Contains(g, []byte(a))
		}
		if all {
			n++
		}
	}
	return n
}

// A Forwarder's sessions end with either side, whatever the other is
// blocked on, and leave nothing running: a peer in the pod is hostile,
// and a link redials after every end. Over the real API server and the
// kubelet's own port-forward handler, to a listener standing in for the
// agent (the pod's IP is loopback).
func TestForwarderEnds(t *testing.T) {
	cfg := kube.Config{OpenNetwork: true, Image: "registry.example/nsys-cortex-neuron:1"}.Defaults()
	rc := cluster.Start(t, cluster.Options{Quiet: true})
	core := kubernetes.NewForConfigOrDie(rc)
	cluster.Prepare(t, core, cfg)
	cluster.ServePortForward(t, core)
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: cfg.Namespace},
		Spec: corev1.PodSpec{NodeName: cluster.Node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	p, err := core.CoreV1().Pods(cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "127.0.0.1"
	if _, err := core.CoreV1().Pods(cfg.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f, err := kube.NewForwarder(rc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	agent := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			t.Cleanup(func() { c.Close() })
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("the forwarded connection did not reach the agent's port")
			return nil
		}
	}
	dial := func(port int32) net.Conn {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := f.Dial(dctx, cfg.Namespace, "p1", port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	base := forwarding()
	settled := func(what string) {
		t.Helper()
		waittest.For(t, 10*time.Second, what+": the session's goroutines to end", func() bool { return forwarding() <= base })
	}

	// The agent answers and closes: the host reads it all, then the end.
	c := dial(port)
	c.Write([]byte("x"))
	a := agent()
	a.Write([]byte("hi"))
	a.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); string(b) != "hi" || err != nil {
		t.Fatalf("the agent's answer and end: %q %v", b, err)
	}
	c.Close()
	settled("the agent closed")

	// Nothing listens on the port: reading says what the kubelet said.
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	free := int32(l2.Addr().(*net.TCPAddr).Port)
	l2.Close()
	c = dial(free)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err == nil || !strings.Contains(err.Error(), "the pod's kubelet") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a port nothing listens on: %v", err)
	}
	c.Close()
	settled("nothing listened")

	// The host's write is blocked on an agent that does not read; the
	// host closes: the session ends (the agent sees its end) at once.
	c = dial(port)
	c.Write([]byte("x"))
	a = agent()
	wrote := make(chan error, 1)
	go func() { _, err := c.Write(make([]byte, 64<<20)); wrote <- err }()
	waittest.For(t, 20*time.Second, "the session's copy to block writing to the API server", func() bool {
		// Every buffer between is full: the agent's socket, the
		// kubelet's, the API server's, this connection's.
		return forwarding("waitWrite") > 0
	})
	c.Close()
	// Ended while the agent still reads nothing (reading would unblock
	// the write).
	settled("the host closed under a blocked write")
	if err := <-wrote; err == nil {
		t.Error("a 64 MiB write to an agent that never read it succeeded")
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, a); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the agent's end of a session the host closed under a blocked write: %v", err)
	}

	// The agent floods, the host does not read, then closes: the
	// agent's writes fail.
	c = dial(port)
	c.Write([]byte("x"))
	a = agent()
	flooded := make(chan error, 1)
	go func() { _, err := io.Copy(a, zeros{}); flooded <- err }()
	c.Close()
	select {
	case err := <-flooded:
		if err == nil {
			t.Error("the agent's flood ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's writes still go on 10 s after the host closed")
	}
	settled("the host closed under a flood")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A dial to an API server that accepts and never answers ends with its
// context, and leaves nothing behind.
func TestForwarderDialCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Held open, and never a word: not even TLS's.
			t.Cleanup(func() { c.Close() })
		}
	}()
	f, err := kube.NewForwarder(&rest.Config{Host: "https://" + ln.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	base := forwarding()
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := f.Dial(ctx, "ns", "p1", 7070)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("a dial to a server that never answers: %v", err)
		}
	}
	waittest.For(t, 10*time.Second, "the cancelled dials' goroutines to end", func() bool { return forwarding() <= base })
}
