package protocol

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A probe listener greets, and answers a dial line from its own network:
// reached for a port that listens, blocked (and why) for one that does
// not and for what is not an IP and port; a connection that asks nothing
// gets the greeting alone.
func TestGreetProbesDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- GreetProbes(ln, (&net.Dialer{}).DialContext) }()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	ask := func(line string) string {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if g, err := br.ReadString('\n'); err != nil || g != ProbeGreeting {
			t.Fatalf("greeting %q %v", g, err)
		}
		if line == "" {
			rest, _ := io.ReadAll(br)
			return string(rest)
		}
		io.WriteString(c, line)
		a, _ := br.ReadString('\n')
		return a
	}
	if got := ask(ProbeDial + target.Addr().String() + "\n"); got != ProbeReached {
		t.Errorf("a port that listens: %q", got)
	}
	if got := ask(ProbeDial + closedAddr + "\n"); !strings.HasPrefix(got, ProbeBlocked) {
		t.Errorf("a port that does not: %q", got)
	}
	if got := ask(ProbeDial + "example.com:80\n"); !strings.HasPrefix(got, ProbeBlocked+"not an IP") {
		t.Errorf("a name: %q", got)
	}
	if got := ask(""); got != "" {
		t.Errorf("asked nothing, told %q", got)
	}
	ln.Close()
	if err := <-served; err == nil {
		t.Error("GreetProbes returned no error once its listener closed")
	}
}
