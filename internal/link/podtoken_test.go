package link_test

import (
	"context"
	"crypto/ed25519"
	"io"
	"log"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent"
	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/podtoken"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// kube mode's channel: an agent that listens takes a host whose pod
// token its trust key verifies for its own pod, signed afresh for every
// dial (Options.TokenFunc); a token for another pod, one signed by
// another key, or an expired one is refused before the agent says
// anything.
func TestPodTokenDial(t *testing.T) {
	priv, _ := podtoken.NewKey()
	pub := priv.Public().(ed25519.PublicKey)
	self := podtoken.Identity{Namespace: "nsys-cortex", Pod: "n-t1", UID: "uid-1"}
	addr := freeAddr(t)
	a, err := agent.New(agent.Config{ID: "t1", Root: t.TempDir(), Listen: addr, Version: "test", Logger: log.New(io.Discard, "", 0),
		TokenCheck: func(tok string) error { _, err := podtoken.Verify(pub, tok, self, time.Now()); return err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	dial := func(sign func() (string, error)) (*link.Link, error) {
		l := link.Dial(func(context.Context) (string, error) { return addr, nil }, link.Options{Neuron: "t1", TokenFunc: sign, Software: "test"})
		t.Cleanup(func() { l.Close() })
		wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := l.WaitConnected(wctx)
		return l, err
	}
	signs := 0
	l, err := dial(func() (string, error) { signs++; return podtoken.Sign(priv, self, time.Minute, time.Now()) })
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Client().Exec(context.Background(), &link.ExecRequest{Command: protocol.Command{Shell: "echo pod"}})
	if err != nil || string(res.Stdout) != "pod\n" || signs < 1 {
		t.Fatalf("exec: %v %+v (%d tokens signed)", err, res, signs)
	}
	other, _ := podtoken.NewKey()
	for name, sign := range map[string]func() (string, error){
		"another pod": func() (string, error) {
			return podtoken.Sign(priv, podtoken.Identity{Namespace: "nsys-cortex", Pod: "n-t2", UID: "uid-2"}, time.Minute, time.Now())
		},
		"another key": func() (string, error) { return podtoken.Sign(other, self, time.Minute, time.Now()) },
		"expired":     func() (string, error) { return podtoken.Sign(priv, self, time.Minute, time.Now().Add(-2*time.Minute)) },
		"no token":    func() (string, error) { return "", nil },
	} {
		if _, err := dial(sign); err == nil {
			t.Errorf("%s: connected", name)
		}
	}
}
