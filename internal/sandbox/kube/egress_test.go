package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// A hostile agent that grants the egress tunnel and ends it at once,
// again and again, sets no pace for its host: the host asks again only
// after egressRetry (it spun at 9,000 asks in 2 s). The holder ends with
// its link.
func TestHoldEgressPacesAHostileAgent(t *testing.T) {
	old := egressRetry
	egressRetry = 50 * time.Millisecond
	defer func() { egressRetry = old }()
	l, err := link.Listen(filepath.Join(t.TempDir(), "ch", "h.sock"), link.Options{Neuron: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := protocol.DialUnix(context.Background(), l.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello, _ := json.Marshal(protocol.Hello{Protocol: protocol.Version(), Role: protocol.RoleAgent, Neuron: "n1",
		Caps: []string{string(protocol.CmdEgress)}, MaxBody: protocol.MaxBody, Window: protocol.DefaultWindow})
	protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindHello, Data: hello}, nil)
	var mu sync.Mutex
	var asked []time.Time
	go func() { // the agent: every tunnel granted, and ended at once
		r := protocol.NewReader(conn, 0)
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			if f.Kind != protocol.KindRequest || f.Cmd != protocol.CmdEgress {
				continue
			}
			mu.Lock()
			asked = append(asked, time.Now())
			mu.Unlock()
			protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindEvent, ID: f.ID, Stream: protocol.StreamConnected, Data: []byte("{}")}, nil)
			protocol.WriteFrame(conn, &protocol.Header{Kind: protocol.KindResponse, ID: f.ID, Data: []byte(`{"sent":0,"received":0}`)}, nil)
		}
	}()
	m := &Manager{Logf: t.Logf, tunnel: func(ctx context.Context, conn net.Conn) error {
		io.Copy(io.Discard, conn) // until the agent ends it
		return nil
	}}
	m.egress.Add(1)
	go m.holdEgress("n1", l, []string{"example.com"}, nil)
	waittest.For(t, 10*time.Second, "five asks for the tunnel", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) >= 5
	})
	l.Close()
	m.egress.Wait() // the holder ended with its link
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(asked); i++ {
		if gap := asked[i].Sub(asked[i-1]); gap < egressRetry {
			t.Errorf("ask %d came %v after the one before, sooner than %v", i, gap, egressRetry)
		}
	}
}

// tunnelRig is a real cortex-agent and a pipe for its log, closed when
// the test ends.
func tunnelRig(t *testing.T) (bin string, logR, logW *os.File) {
	t.Helper()
	bin, err := sandboxtest.BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	if logR, logW, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logR.Close(); logW.Close() })
	return bin, logR, logW
}

// runTunnel serves a tunnel with a real "cortex-agent egress-tunnel": it
// answers the guest's hello, and returns, its process gone, when the
// guest's end closes and when its context ends.
func TestRunTunnel(t *testing.T) {
	bin, logR, logW := tunnelRig(t)
	go io.Copy(io.Discard, logR)
	for _, end := range []string{"the guest closes", "the context ends"} {
		guest, host := net.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- runTunnel(ctx, bin, logW, []string{"run-tunnel.example.com"}, nil, host) }()
		guest.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(guest, "nsys-cortex egress hello v1 0123456789abcdef\n")
		line, err := bufio.NewReader(guest).ReadString('\n')
		if err != nil || line != "nsys-cortex egress ready v1 0123456789abcdef\n" {
			t.Fatalf("%s: the proxy's answer: %q %v", end, line, err)
		}
		rule := "run-tunnel.example.com"
		if n := len(sandboxtest.Processes(func(argv []string) bool {
			return len(argv) > 1 && argv[1] == "egress-tunnel" && slices.Contains(argv, rule) && slices.Contains(argv, "--max-conns")
		})); n != 1 {
			t.Errorf("%s: %d egress-tunnel processes for the rule, with --max-conns", end, n)
		}
		if end == "the guest closes" {
			guest.Close()
		} else {
			cancel()
		}
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("%s: %v", end, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: runTunnel did not return", end)
		}
		cancel()
		guest.Close()
		waittest.For(t, 10*time.Second, "the tunnel's process to end", func() bool { return len(sandboxtest.TunnelProcesses("run-tunnel.example.com")) == 0 })
	}
	logW.Close()
}

// A neuron's proxy that writes a line longer than any the host logs (a
// request whose method was 60 KB once made one) does not stop the host
// reading its log: the line is cut, the lines after it logged, and the
// pump reads on to the end (else the proxies writing to it would block).
func TestPumpLogCutsLongLines(t *testing.T) {
	var mu sync.Mutex
	var got []string
	m := &Manager{Logf: func(format string, args ...any) {
		mu.Lock()
		got = append(got, fmt.Sprintf(format, args...))
		mu.Unlock()
	}}
	r, w := io.Pipe()
	pumped := make(chan struct{})
	go func() { defer close(pumped); m.pumpLog("n1", r) }()
	io.WriteString(w, "egress deny "+strings.Repeat("M", 60000)+" http://x.test/\nafter the long one\nno newline at the end")
	w.Close()
	<-pumped
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || !strings.HasSuffix(got[0], "...(cut)") || len(got[0]) > 2*maxLogLine ||
		got[1] != "neuron n1: after the long one" || got[2] != "neuron n1: no newline at the end" {
		t.Fatalf("logged %d lines: %.200q", len(got), got)
	}
}

// A tunnel's process that is stuck (here on its log, whose pipe is full)
// does not outlive its tunnel: runTunnel kills it.
func TestRunTunnelEndsAStuckProcess(t *testing.T) {
	bin, _, logW := tunnelRig(t)
	// Fill the pipe, then make it blocking again for the process.
	fd := int(logW.Fd()) // Fd makes it blocking: once, before
	syscall.SetNonblock(fd, true)
	for {
		if _, err := syscall.Write(fd, make([]byte, 4096)); err != nil {
			break
		}
	}
	syscall.SetNonblock(fd, false)
	const rule = "stuck-tunnel.example.com"
	guest, host := net.Pipe()
	ran := make(chan error, 1)
	go func() { ran <- runTunnel(context.Background(), bin, logW, []string{rule}, nil, host) }()
	waittest.For(t, 10*time.Second, "the tunnel's process to start", func() bool { return len(sandboxtest.TunnelProcesses(rule)) == 1 })
	guest.Close() // the agent ends the tunnel; the process, stuck, never reads its EOF
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("runTunnel did not return")
	}
	if n := len(sandboxtest.TunnelProcesses(rule)); n != 0 {
		t.Fatalf("%d tunnel processes outlived their tunnel", n)
	}
}
