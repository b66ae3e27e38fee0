package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
)

// texts is what a session's messages say, in order.
func texts(t *testing.T, d *chatDaemon, id string) string {
	t.Helper()
	detail, err := d.c.Session(context.Background(), id)
	if err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	var out []string
	for _, m := range detail.Messages {
		out = append(out, m.Text)
	}
	return strings.Join(out, "|")
}

// Replicas with homes of their own, sharing a store (kube mode's
// Secrets, over the fake clientset), serve the same sessions: a turn
// through one is seen and continued through another; a change through
// one while another's runs is BUSY naming that replica; a replica with a
// new home lists and reads every session; a removal through one is
// seen by the others.
func TestSessionsAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	cluster := fake.NewClientset()
	a := newChatReplica(t, kube.NewSecretSessions(cluster, "nsys-cortex"))
	b := newChatReplica(t, kube.NewSecretSessions(cluster, "nsys-cortex"))
	s, err := a.c.CreateSession(ctx, &cortex.SessionCreate{Title: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Send(ctx, s.ID, "one", nil); err != nil {
		t.Fatal(err)
	}
	if got := texts(t, b, s.ID); got != "one|done: one" {
		t.Fatalf("through the other replica: %q", got)
	}
	if _, err := b.c.Send(ctx, s.ID, "two", nil); err != nil {
		t.Fatal(err)
	}
	// A held the session open since its turn: it takes B's turn too.
	if got := texts(t, a, s.ID); got != "one|done: one|two|done: two" {
		t.Fatalf("back through the first: %q", got)
	}
	if _, err := a.c.Send(ctx, s.ID, "three", nil); err != nil {
		t.Fatal(err)
	}

	// A turn through A waits on its model: B may read, not change.
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := a.c.Send(tctx, s.ID, "four: wait", nil)
		first <- err
	}()
	select {
	case <-a.models["m1"].waiting:
	case err := <-first:
		t.Fatalf("the waiting turn ended: %v", err)
	}
	var ae cortex.APIError
	for what, err := range map[string]error{
		"turn":   func() error { _, err := b.c.Send(ctx, s.ID, "five", nil); return err }(),
		"remove": b.c.CloseSession(ctx, s.ID, true),
	} {
		if !errors.As(err, &ae) || ae.Code != cortex.CodeBusy || !strings.Contains(ae.Message, "replica") {
			t.Errorf("a %s through B while A's turn runs: %v, want BUSY naming the replica", what, err)
		}
	}
	if got := texts(t, b, s.ID); got != "one|done: one|two|done: two|three|done: three" {
		t.Fatalf("read through B during A's turn: %q", got)
	}
	a.models["m1"].release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatalf("the waiting turn: %v", err)
	}
	want := "one|done: one|two|done: two|three|done: three|four: wait|done: four: wait"
	if got := texts(t, b, s.ID); got != want {
		t.Fatalf("through B after A's turn: %q", got)
	}

	// A replica with a new home (a pod started again) has them all.
	c := newChatReplica(t, kube.NewSecretSessions(cluster, "nsys-cortex"))
	list, err := c.c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID || list[0].Title != "shared" || list[0].Open {
		t.Fatalf("listed through a new replica: %+v %v", list, err)
	}
	if got := texts(t, c, s.ID); got != want {
		t.Fatalf("read through a new replica: %q", got)
	}
	// A fork through C is everyone's.
	fork, err := c.c.Fork(ctx, s.ID, &cortex.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(t, a, fork.ID); got != want {
		t.Fatalf("the fork, through A: %q", got)
	}

	// Removed through B: gone through A, which had it open.
	if err := b.c.CloseSession(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Session(ctx, s.ID); !errors.As(err, &ae) || ae.Code != cortex.CodeNotFound {
		t.Fatalf("a removed session through another replica: %v", err)
	}
	if list, err := a.c.Sessions(ctx); err != nil || len(list) != 1 || list[0].ID != fork.ID {
		t.Fatalf("listed after the removal: %+v %v", list, err)
	}
}
