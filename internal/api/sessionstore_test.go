package api_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/sandbox/kube"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// storeOf is a replica's store of chat sessions in cluster (kube mode's
// Secrets, over the fake clientset).
func storeOf(cluster *fake.Clientset) api.SessionStore {
	return kube.NewSecretSessions(cluster, "nsys-cortex")
}

// twoChatReplicas are two daemons with homes of their own, sharing the
// chat sessions of one cluster.
func twoChatReplicas(t *testing.T) (*fake.Clientset, *chatDaemon, *chatDaemon) {
	cluster := fake.NewClientset()
	return cluster, newChatReplica(t, storeOf(cluster)), newChatReplica(t, storeOf(cluster))
}

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
	cluster, a, b := twoChatReplicas(t)
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
	c := newChatReplica(t, storeOf(cluster))
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

// The review's findings, each a way two replicas changed one session at
// once, or a removed session came back.
func TestSessionsAcrossReplicasReview(t *testing.T) {
	ctx := context.Background()
	var ae cortex.APIError
	busy := func(err error) bool { return errors.As(err, &ae) && ae.Code == cortex.CodeBusy }

	// A read, and a refused change, through the replica whose turn runs
	// end nothing of that turn's hold.
	t.Run("read during a turn", func(t *testing.T) {
		_, a, b := twoChatReplicas(t)
		s, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { _, err := a.c.Send(ctx, s.ID, "one: wait", nil); first <- err }()
		<-a.models["m1"].waiting
		if _, err := a.c.Session(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.c.UpdateSession(ctx, s.ID, &cortex.SessionUpdate{Model: "m2"}); !busy(err) {
			t.Fatalf("a second change through A during its turn: %v", err)
		}
		if _, err := b.c.Send(ctx, s.ID, "two", nil); !busy(err) {
			t.Fatalf("a turn through B during A's, after a read and a refused change through A: %v", err)
		}
		a.models["m1"].release <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if got := texts(t, b, s.ID); got != "one: wait|done: one: wait" {
			t.Fatalf("after A's turn, through B: %q", got)
		}
	})

	// A turn on X ending while a turn on Y runs, both through A, saves
	// nothing of Y and ends none of Y's hold.
	t.Run("another session's turn", func(t *testing.T) {
		_, a, b := twoChatReplicas(t)
		x, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		y, err := a.c.CreateSession(ctx, &cortex.SessionCreate{Model: "m2"})
		if err != nil {
			t.Fatal(err)
		}
		xd, yd := make(chan error, 1), make(chan error, 1)
		go func() { _, err := a.c.Send(ctx, x.ID, "x: wait", nil); xd <- err }()
		<-a.models["m1"].waiting
		go func() { _, err := a.c.Send(ctx, y.ID, "y: wait", nil); yd <- err }()
		<-a.models["m2"].waiting
		a.models["m1"].release <- struct{}{}
		if err := <-xd; err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.Send(ctx, y.ID, "five", nil); !busy(err) {
			t.Fatalf("a turn on Y through B while A's runs: %v", err)
		}
		a.models["m2"].release <- struct{}{}
		if err := <-yd; err != nil {
			t.Fatal(err)
		}
		if got := texts(t, b, y.ID); got != "y: wait|done: y: wait" {
			t.Fatalf("Y through B: %q", got)
		}
	})

	// A session removed through B stays removed for A, listed or asked
	// for, and for A started again on its home.
	t.Run("removed", func(t *testing.T) {
		cluster := fake.NewClientset()
		b := newChatReplica(t, storeOf(cluster))
		lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
		if err != nil {
			t.Fatal(err)
		}
		var s, kept *cortex.Session
		t.Run("before", func(t *testing.T) {
			a := newChatReplicaAt(t, storeOf(cluster), lay)
			var err error
			if s, err = a.c.CreateSession(ctx, &cortex.SessionCreate{Title: "removed"}); err != nil {
				t.Fatal(err)
			}
			if kept, err = a.c.CreateSession(ctx, &cortex.SessionCreate{Title: "kept"}); err != nil {
				t.Fatal(err)
			}
			if err := b.c.CloseSession(ctx, s.ID, true); err != nil {
				t.Fatal(err)
			}
			if l, err := a.c.Sessions(ctx); err != nil || len(l) != 1 || l[0].ID != kept.ID {
				t.Fatalf("listed through A: %+v %v", l, err)
			}
		})
		a := newChatReplicaAt(t, storeOf(cluster), lay)
		if _, err := a.c.Send(ctx, s.ID, "hello", nil); !errors.As(err, &ae) || ae.Code != cortex.CodeNotFound {
			t.Fatalf("a turn through A started again, on a session removed through B: %v", err)
		}
		if l, err := b.c.Sessions(ctx); err != nil || len(l) != 1 || l[0].ID != kept.ID {
			t.Fatalf("listed through B: %+v %v", l, err)
		}
	})
}

// A turn whose hold another replica took (it lapsed: the turn's replica
// stalled past a minute) is ended, not run on to a save that cannot be.
func TestSessionHoldLost(t *testing.T) {
	defer api.SetRenewHold(20 * time.Millisecond)()
	ctx := context.Background()
	cluster := fake.NewClientset()
	a := newChatReplica(t, storeOf(cluster))
	s, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := a.c.Send(ctx, s.ID, "one: wait", nil); done <- err }()
	<-a.models["m1"].waiting
	secrets := cluster.CoreV1().Secrets("nsys-cortex")
	sec, err := secrets.Get(ctx, kube.ChatSecretName(s.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Annotations[kube.AnnotationChatHolder] = `{"who":"replica-b","until":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "lost its hold") {
			t.Fatalf("the turn whose hold was taken: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the turn whose hold was taken ran on")
	}
}

// A session another session's agent talks to (sessions_spawn keeps it
// open) is saved with that session's turn; changed since through another
// replica, or through a client here, it is read again before that agent
// writes to it, and before a client's change here.
func TestSessionsRoutedAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	_, a, b := twoChatReplicas(t)
	p, z := spawnedSession(t, a)
	if got := texts(t, b, z); got != "sub task|done: sub task" {
		t.Fatalf("the spawned session through B: %q", got)
	}
	if _, err := b.c.Send(ctx, z, "more", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Send(ctx, z, "again", nil); err != nil {
		t.Fatal(err)
	}
	if err := sendRouted(a, p, z); err != nil {
		t.Fatal(err)
	}
	want := "sub task|done: sub task|more|done: more|again|done: again|wait now|done: wait now"
	for _, d := range []*chatDaemon{a, b} {
		if got := texts(t, d, z); got != want {
			t.Fatalf("Z: %q, want %q", got, want)
		}
	}
}

// spawnedSession makes a session on d whose agent spawns another, and
// returns both ids.
func spawnedSession(t *testing.T, d *chatDaemon) (p, z string) {
	t.Helper()
	ctx := context.Background()
	s, err := d.c.CreateSession(ctx, &cortex.SessionCreate{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := d.c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Send(ctx, s.ID, "spawn one", nil); err != nil {
		t.Fatal(err)
	}
	list, err := d.c.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	had := map[string]bool{s.ID: true}
	for _, b := range before {
		had[b.ID] = true
	}
	for _, l := range list {
		if !had[l.ID] {
			z = l.ID
		}
	}
	if z == "" {
		t.Fatalf("no spawned session: %+v", list)
	}
	return s.ID, z
}

// sendRouted runs a turn of session p whose agent tells session z's
// "wait now" (sessions_send), and lets z's turn go on.
func sendRouted(d *chatDaemon, p, z string) error {
	done := make(chan error, 1)
	go func() { _, err := d.c.Send(context.Background(), p, "send "+z, nil); done <- err }()
	select {
	case <-d.models["m1"].waiting:
		d.models["m1"].release <- struct{}{}
	case err := <-done:
		return err
	}
	return <-done
}

// The third review's findings: an agent's or a runner's copy of a
// session made stale by another writer on the same replica, which then
// wrote from where it was (the other's entries dropped from the
// conversation); an agent sending to its own session; a send bringing a
// removed session back where the record of generations is damaged.
func TestSessionsAcrossReplicasReview3(t *testing.T) {
	ctx := context.Background()
	t.Run("two agents", func(t *testing.T) {
		_, a, b := twoChatReplicas(t)
		p1, z := spawnedSession(t, a)
		p2, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{p2.ID, p1} {
			if err := sendRouted(a, p, z); err != nil {
				t.Fatal(err)
			}
		}
		if got := texts(t, b, z); got != "sub task|done: sub task|wait now|done: wait now|wait now|done: wait now" {
			t.Fatalf("Z through B: %q", got)
		}
	})
	t.Run("an idle runner", func(t *testing.T) {
		_, a, b := twoChatReplicas(t)
		p, z := spawnedSession(t, a)
		if got := texts(t, a, z); got != "sub task|done: sub task" { // Z's runner, open
			t.Fatal(got)
		}
		if err := sendRouted(a, p, z); err != nil {
			t.Fatal(err)
		}
		if _, err := a.c.Send(ctx, z, "more", nil); err != nil {
			t.Fatal(err)
		}
		if got := texts(t, b, z); got != "sub task|done: sub task|wait now|done: wait now|more|done: more" {
			t.Fatalf("Z through B: %q", got)
		}
	})
	t.Run("its own session", func(t *testing.T) {
		_, a, _ := twoChatReplicas(t)
		s, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.c.Send(ctx, s.ID, "send "+s.ID, nil); err != nil {
			t.Fatal(err) // the tool's refusal goes to the model, not the client
		}
		if got := texts(t, a, s.ID); strings.Contains(got, "wait now") {
			t.Fatalf("the agent wrote its own session through sessions_send: %q", got)
		}
	})
	t.Run("damaged record", func(t *testing.T) {
		cluster := fake.NewClientset()
		b := newChatReplica(t, storeOf(cluster))
		lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
		if err != nil {
			t.Fatal(err)
		}
		var p, z string
		t.Run("before", func(t *testing.T) {
			p, z = spawnedSession(t, newChatReplicaAt(t, storeOf(cluster), lay))
		})
		if err := b.c.CloseSession(ctx, z, true); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lay.SessionsDir(), ".store-generations.json"), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run("after", func(t *testing.T) {
			sendRouted(newChatReplicaAt(t, storeOf(cluster), lay), p, z)
		})
		if l, _ := b.c.Sessions(ctx); len(l) != 1 || l[0].ID != p {
			t.Fatalf("listed through B: %+v (the removed session is back)", l)
		}
	})
}

// The second review's findings: a session another session's agent
// writes to (sessions_send) changed at once through a client; a session
// removed while a request used it served again; a damaged record of
// generations bringing removed sessions back; a hold whose answer was
// lost never released.
func TestSessionsAcrossReplicasReview2(t *testing.T) {
	ctx := context.Background()
	var ae cortex.APIError
	busy := func(err error) bool { return errors.As(err, &ae) && ae.Code == cortex.CodeBusy }
	spawned := func(t *testing.T, d *chatDaemon) (p, z string) {
		t.Helper()
		s, err := d.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.Send(ctx, s.ID, "spawn one", nil); err != nil {
			t.Fatal(err)
		}
		list, err := d.c.Sessions(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("after the spawn: %+v %v", list, err)
		}
		z = list[0].ID
		if z == s.ID {
			z = list[1].ID
		}
		return s.ID, z
	}

	t.Run("routed, another replica", func(t *testing.T) {
		_, a, b := twoChatReplicas(t)
		p, z := spawned(t, a)
		done := make(chan error, 1)
		go func() { _, err := a.c.Send(ctx, p, "send "+z, nil); done <- err }()
		<-a.models["m1"].waiting // Z's agent, mid-turn
		if _, err := b.c.Send(ctx, z, "more", nil); !busy(err) {
			t.Fatalf("a turn on Z through B while A's agent writes Z: %v", err)
		}
		a.models["m1"].release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := texts(t, b, z); got != "sub task|done: sub task|wait now|done: wait now" {
			t.Fatalf("Z through B: %q", got)
		}
		// Changed through B: A's agent, which holds Z open, reads it again
		// before it writes.
		if _, err := b.c.Send(ctx, z, "more", nil); err != nil {
			t.Fatal(err)
		}
		go func() { _, err := a.c.Send(ctx, p, "send "+z, nil); done <- err }()
		<-a.models["m1"].waiting
		a.models["m1"].release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := "sub task|done: sub task|wait now|done: wait now|more|done: more|wait now|done: wait now"
		if got := texts(t, b, z); got != want {
			t.Fatalf("Z through B after A's agent wrote it again: %q", got)
		}
	})

	t.Run("routed, the same replica", func(t *testing.T) {
		cluster := fake.NewClientset()
		a := newChatReplica(t, storeOf(cluster))
		p, z := spawned(t, a)
		done := make(chan error, 1)
		go func() { _, err := a.c.Send(ctx, p, "send "+z, nil); done <- err }()
		<-a.models["m1"].waiting
		if _, err := a.c.Send(ctx, z, "more", nil); !busy(err) {
			t.Fatalf("a turn on Z through A while A's agent writes Z: %v", err)
		}
		a.models["m1"].release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("removed while in use", func(t *testing.T) {
		defer api.SetRenewHold(time.Hour)() // the hold lapses, as in a stall
		cluster, a, b := twoChatReplicas(t)
		s, err := a.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := a.c.Send(ctx, s.ID, "one: wait", nil); done <- err }()
		<-a.models["m1"].waiting
		secrets := cluster.CoreV1().Secrets("nsys-cortex")
		sec, err := secrets.Get(ctx, kube.ChatSecretName(s.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(sec.Annotations, kube.AnnotationChatHolder)
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b.c.CloseSession(ctx, s.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := a.c.Session(ctx, s.ID); !errors.As(err, &ae) || ae.Code != cortex.CodeNotFound {
			t.Fatalf("read through A of a session removed through B: %v", err)
		}
		a.models["m1"].release <- struct{}{}
		if err := <-done; err == nil {
			t.Fatal("the turn on a session removed under it answered success")
		}
		if _, err := a.c.Session(ctx, s.ID); err == nil {
			t.Fatal("a removed session is served again through A")
		}
		if _, err := a.c.Send(ctx, s.ID, "two", nil); err == nil {
			t.Fatal("a turn on a removed session answered success")
		}
		if l, _ := b.c.Sessions(ctx); len(l) != 0 {
			t.Fatalf("the removed session is back: %+v", l)
		}
	})

	t.Run("damaged generations", func(t *testing.T) {
		cluster := fake.NewClientset()
		b := newChatReplica(t, storeOf(cluster))
		lay, err := layout.New(filepath.Join(sandboxtest.ShortTempDir(t), "h"), "")
		if err != nil {
			t.Fatal(err)
		}
		var s *cortex.Session
		t.Run("before", func(t *testing.T) {
			a := newChatReplicaAt(t, storeOf(cluster), lay)
			if s, err = a.c.CreateSession(ctx, &cortex.SessionCreate{}); err != nil {
				t.Fatal(err)
			}
		})
		if err := b.c.CloseSession(ctx, s.ID, true); err != nil {
			t.Fatal(err)
		}
		gf := filepath.Join(lay.SessionsDir(), ".store-generations.json")
		if err := os.WriteFile(gf, []byte("{"), 0o600); err != nil { // torn
			t.Fatal(err)
		}
		for range 2 { // and a daemon started again after the first knows
			t.Run("after", func(t *testing.T) {
				a := newChatReplicaAt(t, storeOf(cluster), lay)
				if _, err := a.c.Send(ctx, s.ID, "hello", nil); !errors.As(err, &ae) || ae.Code != cortex.CodeUnavailable || !strings.Contains(ae.Message, "cannot be told") {
					t.Fatalf("a turn on a session removed through B, with the record damaged: %v", err)
				}
				if l, _ := a.c.Sessions(ctx); len(l) != 0 {
					t.Fatalf("listed through A: %+v", l)
				}
			})
		}
		if l, _ := b.c.Sessions(ctx); len(l) != 0 {
			t.Fatalf("the removed session is back: %+v", l)
		}
	})

	t.Run("hold answered with an error", func(t *testing.T) {
		cluster := fake.NewClientset()
		a := newChatReplica(t, &lostReply{SessionStore: storeOf(cluster)})
		b := newChatReplica(t, storeOf(cluster))
		s, err := b.c.CreateSession(ctx, &cortex.SessionCreate{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.c.Send(ctx, s.ID, "one", nil); err == nil {
			t.Fatal("the turn whose hold answered an error ran")
		}
		if _, err := b.c.Send(ctx, s.ID, "two", nil); err != nil {
			t.Fatalf("B, once A's refused request is over: %v", err)
		}
	})
}

// lostReply is a store whose first Hold is written but answered with an
// error (the request's client went away, or the reply timed out).
type lostReply struct {
	api.SessionStore
	n atomic.Int32
}

func (l *lostReply) Hold(ctx context.Context, id string) (int64, error) {
	gen, err := l.SessionStore.Hold(ctx, id)
	if l.n.Add(1) == 1 && err == nil {
		return 0, context.Canceled
	}
	return gen, err
}
