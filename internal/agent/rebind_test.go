package agent

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"testing"
)

// A rebind from PID 1 changes who the agent says it is; anything else on
// that socket is refused with the reason, and changes nothing.
func TestRebind(t *testing.T) {
	pid1, mine := net.Pipe()
	old := strings.Repeat("o", 64)
	a, err := New(Config{ID: "src", Root: t.TempDir(), Secret: old, Rebind: mine, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); a.serveRebind() }()
	defer func() { mine.Close(); <-done }()
	answers := bufio.NewReader(pid1)
	ask := func(line string) string {
		t.Helper()
		if _, err := fmt.Fprintln(pid1, line); err != nil {
			t.Fatal(err)
		}
		got, err := answers.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(got)
	}
	fresh := strings.Repeat("n", 64)
	for _, bad := range []string{
		`not json`,
		`{"neuron":"../etc","secret":"` + fresh + `"}`,
		`{"neuron":"","secret":"` + fresh + `"}`,
		`{"neuron":"kid","secret":"short"}`,
	} {
		if got := ask(bad); !strings.HasPrefix(got, "error: ") {
			t.Errorf("rebind %s: answered %q, want an error", bad, got)
		}
		if w := a.ident.Load(); w.id != "src" || w.secret != old {
			t.Fatalf("a refused rebind changed the identity to %+v", w)
		}
	}
	if got := ask(`{"neuron":"kid","secret":"` + fresh + `"}`); got != "ok" {
		t.Fatalf("rebind: %q", got)
	}
	if w := a.ident.Load(); w.id != "kid" || w.secret != fresh {
		t.Fatalf("after the rebind: %+v", w)
	}
}
