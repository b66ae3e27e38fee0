package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/link"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

func TestAgentEnvScrubsSecrets(t *testing.T) {
	host := []string{
		"PATH=/usr/bin", "LANG=C.UTF-8", "LC_ALL=C", "TERM=xterm", "HOME=/root", "USER=me",
		"OPENAI_API_KEY=sk-1", "ANTHROPIC_API_KEY=sk-2", "AWS_SECRET_ACCESS_KEY=a", "AWS_REGION=eu",
		"SSH_AUTH_SOCK=/tmp/ssh", "GITHUB_TOKEN=g", "GH_TOKEN=h", "NPM_TOKEN=n", "DATABASE_PASSWORD=p",
		"NSYS_CORTEX_API_TOKEN=t", "KUBECONFIG=/k", "DOCKER_HOST=unix:///x", "MY_SECRET=s", "LC_TOKEN=bad",
	}
	got := AgentEnv(host, "HOME=/neuron", "EXTRA=1")
	want := map[string]bool{"PATH=/usr/bin": true, "LANG=C.UTF-8": true, "LC_ALL=C": true, "TERM=xterm": true,
		"USER=me": true, "HOME=/neuron": true, "EXTRA=1": true}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for _, kv := range got {
		if !want[kv] {
			t.Errorf("leaked or wrong: %s", kv)
		}
	}
}

// fakeManager is an in-memory Manager for the Set's routing.
type fakeManager struct {
	mode    string
	neurons map[string]*State
}

func (f *fakeManager) Mode() string { return f.mode }
func (f *fakeManager) Create(_ context.Context, id string, _ CreateOptions) (*State, error) {
	st := &State{ID: id, Mode: f.mode, Status: StatusRunning}
	f.neurons[id] = st
	return st, nil
}
func (f *fakeManager) Get(_ context.Context, id string) (*State, error) {
	if st, ok := f.neurons[id]; ok {
		return st, nil
	}
	return nil, &NotFoundError{ID: id}
}
func (f *fakeManager) List(context.Context) ([]*State, error) {
	var out []*State
	for _, st := range f.neurons {
		out = append(out, st)
	}
	return out, nil
}
func (f *fakeManager) Destroy(context.Context, string, DestroyOptions) error { return nil }
func (f *fakeManager) Connect(context.Context, string) (*link.Client, error) { return nil, nil }
func (f *fakeManager) Close() error                                          { return nil }

func backend(name string, rank int, isolating, ok bool, m *fakeManager) Backend {
	return Backend{Name: name, Rank: rank, Isolating: isolating,
		New: func(Env) (Manager, error) { return m, nil },
		SelfCheck: func(context.Context, Env) Check {
			return Check{OK: ok, Summary: map[bool]string{true: "ready", false: "missing a piece"}[ok]}
		}}
}

func TestResolveAuto(t *testing.T) {
	ctx := context.Background()
	dev := &fakeManager{mode: "dev", neurons: map[string]*State{}}
	iso := &fakeManager{mode: "iso", neurons: map[string]*State{}}
	broken := &fakeManager{mode: "broken", neurons: map[string]*State{}}
	t.Setenv(EnvMode, "")
	t.Setenv(EnvAllowInsecure, "")
	set := NewSet(Env{}, backend("dev", 0, false, true, dev), backend("iso", 10, true, true, iso), backend("broken", 20, true, false, broken))
	// The reason is one short line: the rule and the modes skipped by name;
	// what their self-checks found is doctor's to print.
	m, why, err := set.Resolve(ctx, "")
	if err != nil || m.Mode() != "iso" || why != "the best isolating mode whose self-check passes; skipped broken" {
		t.Fatalf("%v %q %v", m, why, err)
	}
	// Without an isolating mode, auto refuses unless insecure mode is allowed.
	set = NewSet(Env{}, backend("dev", 0, false, true, dev), backend("broken", 20, true, false, broken))
	var ue *UnavailableError
	// Refusing, it says what each mode lacks: that is the whole answer.
	if _, _, err := set.Resolve(ctx, "auto"); !errors.As(err, &ue) || !strings.Contains(err.Error(), EnvAllowInsecure) ||
		!strings.Contains(err.Error(), "broken: missing a piece") {
		t.Fatalf("%v", err)
	}
	t.Setenv(EnvAllowInsecure, "1")
	if m, why, err := set.Resolve(ctx, "auto"); err != nil || m.Mode() != "dev" ||
		why != EnvAllowInsecure+"=1 allows it and no isolating mode is available; skipped broken" {
		t.Fatalf("%v %q %v", m, why, err)
	}
	// An explicit mode is taken as asked; an unknown one is refused by name.
	if m, _, err := set.Resolve(ctx, "broken"); err != nil || m.Mode() != "broken" {
		t.Fatalf("%v %v", m, err)
	}
	t.Setenv(EnvMode, "nope")
	if _, _, err := set.Resolve(ctx, ""); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("%v", err)
	}
}

// An automatic choice is reused for a while: a daemon's creates that name
// no mode do not run every mode's self-check each.
func TestResolveAutoIsReused(t *testing.T) {
	ctx := context.Background()
	t.Setenv(EnvMode, "")
	t.Setenv(EnvAllowInsecure, "")
	checks := 0
	iso := &fakeManager{mode: "iso", neurons: map[string]*State{}}
	b := backend("iso", 10, true, true, iso)
	check := b.SelfCheck
	b.SelfCheck = func(ctx context.Context, e Env) Check { checks++; return check(ctx, e) }
	set := NewSet(Env{}, b)
	for range 3 {
		if m, _, err := set.Resolve(ctx, ""); err != nil || m.Mode() != "iso" {
			t.Fatalf("%v %v", m, err)
		}
	}
	if checks != 1 {
		t.Fatalf("3 automatic choices ran the self-check %d times, want 1", checks)
	}
	// A change of what is allowed is a new choice.
	t.Setenv(EnvAllowInsecure, "1")
	set.Resolve(ctx, "")
	if checks != 2 {
		t.Fatalf("after %s changed: %d self-checks, want 2", EnvAllowInsecure, checks)
	}
}

func TestFindByIDAndPrefix(t *testing.T) {
	ctx := context.Background()
	a := &fakeManager{mode: "a", neurons: map[string]*State{
		"job1": {ID: "job1", Mode: "a"}, "job10": {ID: "job10", Mode: "a"},
		"nabc123456": {ID: "nabc123456", Mode: "a"}, "nabd987654": {ID: "nabd987654", Mode: "a"}}}
	b := &fakeManager{mode: "b", neurons: map[string]*State{"beta": {ID: "beta", Mode: "b"}}}
	set := NewSet(Env{}, backend("a", 1, true, true, a), backend("b", 0, true, true, b))
	for ref, want := range map[string]string{"job1": "job1", "job10": "job10", "beta": "beta", "nabc": "nabc123456", "nabd9": "nabd987654"} {
		m, st, err := set.Find(ctx, ref)
		if err != nil || st.ID != want || m.Mode() != st.Mode {
			t.Errorf("%s: %v %v", ref, st, err)
		}
	}
	// Names are never completed: "job" is not "job1", "bet" is not "beta".
	for _, ref := range []string{"job", "bet", "na", "gamma"} {
		if _, _, err := set.Find(ctx, ref); !errdefs.IsNotFound(err) {
			t.Errorf("%s: %v, want NotFoundError", ref, err)
		}
	}
	if _, _, err := set.Find(ctx, "nab"); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "nabc123456") {
		t.Fatalf("ambiguous: %v", err)
	}
	if _, _, err := set.FindExact(ctx, "nabc"); !errdefs.IsNotFound(err) {
		t.Fatalf("exact: %v", err)
	}
	if _, _, err := set.Find(ctx, "../x"); !errdefs.IsInvalid(err) {
		t.Fatalf("%v", err)
	}
	all, _ := set.List(ctx)
	if len(all) != 5 || all[0].ID != "beta" {
		t.Fatalf("%v", all)
	}
	if missing := set.Missing(); len(missing) != len(PlannedModes) {
		t.Fatalf("%v", missing)
	}
}

// An automatic choice that has stood autoFor is still taken, at once, by
// the create that finds it old, and made again in the background: no
// create but the first waits for the self-checks. A mode that fails its
// self-check then is no longer chosen; when none passes, the next create
// fails saying why.
func TestResolveAutoRefreshes(t *testing.T) {
	ctx := context.Background()
	t.Setenv(EnvMode, "")
	t.Setenv(EnvAllowInsecure, "")
	var mu sync.Mutex
	checks, ok := 0, true
	release := make(chan struct{})
	iso := &fakeManager{mode: "iso", neurons: map[string]*State{}}
	b := backend("iso", 10, true, true, iso)
	b.SelfCheck = func(ctx context.Context, e Env) Check {
		mu.Lock()
		checks++
		n := checks
		mu.Unlock()
		if n > 1 {
			<-release // the refresh's self-check takes its time
		}
		mu.Lock()
		pass := ok
		mu.Unlock()
		if !pass {
			return Check{Summary: "gone"}
		}
		return Check{OK: true, Summary: "ready"}
	}
	set := NewSet(Env{}, b)
	defer set.Close()
	if m, _, err := set.Resolve(ctx, ""); err != nil || m.Mode() != "iso" {
		t.Fatalf("%v %v", m, err)
	}
	age := func() { set.mu.Lock(); set.auto.at = time.Now().Add(-autoFor); set.mu.Unlock() }
	count := func() int { mu.Lock(); defer mu.Unlock(); return checks }
	age()
	for range 3 { // answered while the refresh's self-check is held: one refresh
		if m, _, err := set.Resolve(ctx, ""); err != nil || m.Mode() != "iso" {
			t.Fatalf("an old choice: %v %v", m, err)
		}
	}
	waittest.For(t, 10*time.Second, "the refresh's self-check", func() bool { return count() == 2 })
	mu.Lock()
	ok = false // from the refresh's answer on, the mode fails its check
	mu.Unlock()
	close(release)
	waittest.For(t, 10*time.Second, "the refresh to forget the choice", func() bool {
		set.mu.Lock()
		defer set.mu.Unlock()
		return set.auto.m == nil && !set.refreshing
	})
	var ue *UnavailableError
	if _, _, err := set.Resolve(ctx, ""); !errors.As(err, &ue) || !strings.Contains(err.Error(), "iso: gone") {
		t.Fatalf("after the mode failed its check: %v", err)
	}
	// Close waits for a refresh in flight, which it cancels.
	mu.Lock()
	ok = true
	mu.Unlock()
	if _, _, err := set.Resolve(ctx, ""); err != nil {
		t.Fatal(err)
	}
	age()
	blocked := make(chan struct{})
	b2 := set.backends[0].SelfCheck
	set.backends[0].SelfCheck = func(ctx context.Context, e Env) Check { close(blocked); <-ctx.Done(); return b2(ctx, e) }
	set.Resolve(ctx, "")
	waittest.Recv(t, 10*time.Second, "a refresh in flight", blocked)
	set.Close()
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.refreshing {
		t.Fatal("Close returned with a refresh in flight")
	}
}
