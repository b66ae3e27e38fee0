package kube

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Two replicas' stores over one cluster, with a clock the test moves.
func twoReplicas() (*fake.Clientset, *SecretSessions, *SecretSessions, *time.Time) {
	core := fake.NewClientset()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := &SecretSessions{Core: core, Namespace: "nsys-cortex", Who: "replica-a", now: clock}
	b := &SecretSessions{Core: core, Namespace: "nsys-cortex", Who: "replica-b", now: clock}
	return core, a, b, &now
}

// A session saved through one replica is the other's; a change is held
// by one replica at a time until it saves, releases, or its hold lapses;
// a save over a generation another replica moved on is refused.
func TestChatSessionsShared(t *testing.T) {
	_, a, b, now := twoReplicas()
	file := []byte(`{"type":"session"}` + "\n")
	if _, err := b.Generation(ctx, "s1"); !errdefs.IsNotFound(err) {
		t.Fatalf("a session never saved: %v", err)
	}
	gen, err := a.Save(ctx, "s1", file, []byte(`{"id":"s1","title":"t"}`), 0)
	if err != nil || gen != 1 {
		t.Fatalf("save: %d %v", gen, err)
	}
	got, g, err := b.Load(ctx, "s1")
	if err != nil || g != 1 || !bytes.Equal(got, file) {
		t.Fatalf("load through the other replica: %q %d %v", got, g, err)
	}
	if l, err := b.List(ctx); err != nil || string(l["s1"]) != `{"id":"s1","title":"t"}` {
		t.Fatalf("list: %q %v", l, err)
	}
	if _, err := a.Save(ctx, "s1", file, nil, 0); !errdefs.Of(err).Is(errdefs.Busy) {
		t.Fatalf("a second new save of one id: %v", err)
	}

	// A holds it: B can neither hold, save nor remove it.
	if g, err := a.Hold(ctx, "s1"); err != nil || g != 1 {
		t.Fatalf("hold: %d %v", g, err)
	}
	if _, err := a.Hold(ctx, "s1"); err != nil {
		t.Fatalf("the holder holds again: %v", err)
	}
	for what, err := range map[string]error{
		"hold":   func() error { _, err := b.Hold(ctx, "s1"); return err }(),
		"save":   func() error { _, err := b.Save(ctx, "s1", file, nil, 1); return err }(),
		"delete": b.Delete(ctx, "s1"),
	} {
		if !errdefs.Of(err).Is(errdefs.Busy) || !strings.Contains(err.Error(), "replica-a") {
			t.Errorf("%s while the other replica holds it: %v", what, err)
		}
	}
	// A saves: its hold ends with it.
	file2 := append(bytes.Clone(file), `{"type":"message"}`+"\n"...)
	if gen, err = a.Save(ctx, "s1", file2, nil, 1); err != nil || gen != 2 {
		t.Fatalf("the holder's save: %d %v", gen, err)
	}
	if g, err := b.Hold(ctx, "s1"); err != nil || g != 2 {
		t.Fatalf("hold after the save: %d %v", g, err)
	}
	// B's hold lapses when B is gone (no hold again within a minute).
	*now = now.Add(61 * time.Second)
	if _, err := a.Hold(ctx, "s1"); err != nil {
		t.Fatalf("a lapsed hold still holds: %v", err)
	}
	if err := a.Release(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	// A save over a generation since moved on: refused, nothing lost.
	if _, err := b.Save(ctx, "s1", file, nil, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Save(ctx, "s1", file2, nil, 2); !errdefs.Of(err).Is(errdefs.Busy) || !strings.Contains(err.Error(), "generation 3, not 2") {
		t.Fatalf("a save over a stale generation: %v", err)
	}
	if got, g, _ := a.Load(ctx, "s1"); g != 3 || !bytes.Equal(got, file) {
		t.Fatalf("after the refused save: %d %q", g, got)
	}
	if err := b.Delete(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Load(ctx, "s1"); !errdefs.IsNotFound(err) {
		t.Fatalf("load of a removed session: %v", err)
	}
	if _, err := a.Save(ctx, "s1", file, nil, 3); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("a save of a session removed meanwhile: %v", err)
	}
}

// What a Secret holds is input: a session too large for one is refused
// by name, and a damaged one, or a Secret that is not the session's, is
// refused or passed over, never read as the session.
func TestChatSessionsRefuse(t *testing.T) {
	core, a, _, _ := twoReplicas()
	big := make([]byte, 2<<20)
	rand.Read(big)
	if _, err := a.Save(ctx, "big", big, nil, 0); !errdefs.IsTooLarge(err) || !strings.Contains(err.Error(), "session big") {
		t.Fatalf("a session too large for a Secret: %v", err)
	}
	if _, err := a.Save(ctx, "s2", []byte("x\n"), []byte(strings.Repeat("i", maxChatInfo+1)), 0); !errdefs.IsInvalid(err) {
		t.Fatalf("a description too large: %v", err)
	}
	secrets := core.CoreV1().Secrets("nsys-cortex")
	put := func(id string, ann map[string]string, data []byte) {
		t.Helper()
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ChatSecretName(id), Namespace: "nsys-cortex",
			Labels: map[string]string{LabelChat: "true"}, Annotations: ann}, Data: map[string][]byte{chatFile: data}}
		secrets.Delete(ctx, sec.Name, metav1.DeleteOptions{})
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("d1", map[string]string{AnnotationChatID: "d1", AnnotationChatGeneration: "1"}, []byte("not gzip"))
	if _, _, err := a.Load(ctx, "d1"); !errdefs.Of(err).Is(errdefs.Unavailable) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged file: %v", err)
	}
	put("d2", map[string]string{AnnotationChatID: "d2", AnnotationChatGeneration: "-4"}, nil)
	if _, err := a.Generation(ctx, "d2"); !errdefs.Of(err).Is(errdefs.Unavailable) {
		t.Fatalf("a damaged generation: %v", err)
	}
	// The name of d3's Secret, naming another session.
	put("d3", map[string]string{AnnotationChatID: "other", AnnotationChatGeneration: "1"}, nil)
	if _, err := a.Generation(ctx, "d3"); !errdefs.IsNotFound(err) {
		t.Fatalf("a Secret of another id: %v", err)
	}
	if l, _ := a.List(ctx); len(l) != 2 || l["d3"] != nil || l["other"] != nil {
		t.Fatalf("listed: %v", l)
	}
	// A hold no one can read is no one's.
	put("d4", map[string]string{AnnotationChatID: "d4", AnnotationChatGeneration: "1", AnnotationChatHolder: "{"}, nil)
	if _, err := a.Hold(ctx, "d4"); err != nil {
		t.Fatalf("hold over a damaged holder: %v", err)
	}
}

// A session that grew past what a Secret keeps is refused its save and,
// since no later change could be saved, every later change before it
// runs; a file that would not load again is refused its save; a release
// with nothing held writes nothing.
func TestChatSessionsFull(t *testing.T) {
	core, a, b, _ := twoReplicas()
	if _, err := a.Save(ctx, "s1", []byte("{}\n"), nil, 0); err != nil {
		t.Fatal(err)
	}
	rv := func() string {
		sec, err := core.CoreV1().Secrets("nsys-cortex").Get(ctx, ChatSecretName("s1"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sec.ResourceVersion
	}
	before := rv()
	if err := b.Release(ctx, "s1"); err != nil || rv() != before {
		t.Fatalf("a release of nothing held: %v, version %s → %s", err, before, rv())
	}
	if _, err := a.Hold(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20)
	rand.Read(big)
	if _, err := a.Save(ctx, "s1", big, nil, 1); !errdefs.IsTooLarge(err) {
		t.Fatalf("a save too large: %v", err)
	}
	for _, r := range []*SecretSessions{a, b} {
		if _, err := r.Hold(ctx, "s1"); !errdefs.IsTooLarge(err) || !strings.Contains(err.Error(), "start a new session") {
			t.Fatalf("a change of a full session through %s: %v", r.Who, err)
		}
	}
	if got, g, err := b.Load(ctx, "s1"); err != nil || g != 1 || string(got) != "{}\n" {
		t.Fatalf("the full session keeps its last save: %q %d %v", got, g, err)
	}
	// A file that compresses well past what Load takes back.
	defer func(old int) { maxChatFile = old }(maxChatFile)
	maxChatFile = 1 << 20
	if _, err := a.Save(ctx, "s2", make([]byte, 1<<20+1), nil, 0); !errdefs.IsTooLarge(err) {
		t.Fatalf("a file Load would refuse: %v", err)
	}
}
