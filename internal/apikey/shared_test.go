package apikey_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/waittest"
)

// memShared is a Shared in memory, as a Secret behaves: a version per
// write, and a write on a version that is not the latest refused. racer,
// when set, writes before each of the next Change's first tries.
type memShared struct {
	mu      sync.Mutex
	data    []byte
	version int
	err     error
	racer   func(*memShared)
}

func (m *memShared) Where() string { return "memory" }

func (m *memShared) Load() ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data, strconv.Itoa(m.version), m.err
}

func (m *memShared) Change(fn func([]byte) ([]byte, error)) error {
	for {
		b, v, err := m.Load()
		if err != nil {
			return err
		}
		if r := m.racer; r != nil {
			m.racer = nil
			r(m)
		}
		nb, err := fn(b)
		if err != nil {
			return err
		}
		m.mu.Lock()
		if strconv.Itoa(m.version) == v {
			m.data, m.version = nb, m.version+1
			m.mu.Unlock()
			return nil
		}
		m.mu.Unlock() // changed meanwhile: again, on the new bytes
	}
}

// memUsed is a memShared that keeps the keys' use too (SharedUse).
type memUsed struct {
	memShared
	used memShared
}

func (m *memUsed) LoadUsed() ([]byte, error) {
	b, _, err := m.used.Load()
	return b, err
}

func (m *memUsed) ChangeUsed(fn func([]byte) ([]byte, error)) error { return m.used.Change(fn) }

// Where the keys' store keeps their use too, a key used through one
// daemon shows as used in a list through the other, a daemon with a new
// home (a replica's restart) loses none of it, and the later of two
// daemons' times is kept.
func TestSharedUse(t *testing.T) {
	sh := &memUsed{}
	a := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	bHome := t.TempDir()
	b := apikey.OpenShared(layout.Layout{Home: bHome}, sh)
	tok, _, err := a.Create(apikey.Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(apikey.Key{Name: "idle", Scopes: []gate.Scope{gate.ScopeRead}}); err != nil {
		t.Fatal(err)
	}
	if k, err := a.Lookup(tok); err != nil || k == nil {
		t.Fatalf("lookup: %+v %v", k, err)
	}
	a.Flush()
	lastUse := func(st *apikey.Store, name string) time.Time {
		t.Helper()
		list, err := st.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list {
			if l.Name == name {
				return l.LastUsed
			}
		}
		t.Fatalf("no key %s in %+v", name, list)
		return time.Time{}
	}
	first := lastUse(b, "ci")
	if first.IsZero() || !lastUse(b, "idle").IsZero() {
		t.Fatalf("through the other daemon: ci used at %v, idle at %v", first, lastUse(b, "idle"))
	}
	restarted := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	if got := lastUse(restarted, "ci"); !got.Equal(first) {
		t.Errorf("a daemon with a new home: ci used at %v, want %v", got, first)
	}
	if _, err := os.Stat(filepath.Join(bHome, "api-keys.used.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the use went to a daemon's home: %v", err)
	}
	// b uses it a second later; a's older time, written after, loses.
	if !waittest.Until(3*time.Second, func() bool { return time.Now().UTC().Truncate(time.Second).After(first) }) {
		t.Fatal("the clock did not move")
	}
	if k, err := b.Lookup(tok); err != nil || k == nil {
		t.Fatalf("b's lookup: %+v %v", k, err)
	}
	b.Flush()
	a.Flush()
	if got := lastUse(a, "ci"); !got.After(first) {
		t.Errorf("after b's later use: %v, want after %v", got, first)
	}
}

// Keys shared by two daemons (each with a home of its own): a key made
// through one works through the other, a removal takes effect on the
// other within a second, a write that races another keeps both, and a
// store that cannot be read refuses every token rather than serve what it
// read before.
func TestShared(t *testing.T) {
	sh := &memShared{}
	a := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	b := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	tok, _, err := a.Create(apikey.Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := b.Lookup(tok); err != nil || k == nil || k.Name != "ci" {
		t.Fatalf("the other daemon's lookup: %+v %v", k, err)
	}
	// Another writer between the read and the write: both keys kept.
	sh.racer = func(m *memShared) {
		c := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, m)
		if _, _, err := c.Create(apikey.Key{Name: "racer", Scopes: []gate.Scope{gate.ScopeRead}}); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := a.Create(apikey.Key{Name: "second", Scopes: []gate.Scope{gate.ScopeRead}}); err != nil {
		t.Fatal(err)
	}
	list, err := b.List()
	if err != nil || len(list) != 3 {
		t.Fatalf("after a raced write: %+v %v, want ci, racer and second", list, err)
	}
	// a holds the key in its cache when b removes it.
	if k, err := a.Lookup(tok); err != nil || k == nil {
		t.Fatalf("a's lookup before the removal: %+v %v", k, err)
	}
	if err := b.Remove("ci"); err != nil {
		t.Fatal(err)
	}
	if !waittest.Until(5*time.Second, func() bool { k, err := a.Lookup(tok); return err == nil && k == nil }) {
		t.Fatal("a key removed through one daemon still works through the other")
	}
	if err := b.Remove("ci"); !errors.Is(err, apikey.ErrNotFound) {
		t.Errorf("removing it again: %v", err)
	}
	tok2, _, err := a.Create(apikey.Key{Name: "third", Scopes: []gate.Scope{gate.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if k, err := b.Lookup(tok2); err != nil || k == nil { // b holds it in its cache
		t.Fatalf("b's lookup before the store fails: %+v %v", k, err)
	}
	sh.mu.Lock()
	sh.err = errors.New("the API server is down")
	sh.mu.Unlock()
	if !waittest.Until(5*time.Second, func() bool { _, err := b.Lookup(tok2); return err != nil }) {
		t.Fatal("an unreadable store kept serving the keys read before")
	}
	if _, err := b.Lookup(tok2); err == nil || !strings.Contains(err.Error(), "the API server is down") {
		t.Errorf("the lookup's error: %v", err)
	}
	sh.mu.Lock()
	sh.err = nil
	sh.mu.Unlock()
	if !waittest.Until(5*time.Second, func() bool { k, err := b.Lookup(tok2); return err == nil && k != nil }) {
		t.Fatal("the store readable again, the key is still refused")
	}
	sh.mu.Lock()
	sh.data = []byte(`{"keys":[{"name":"x","hash":"sha256:short","scopes":["read"]}]}`)
	sh.version++
	sh.mu.Unlock()
	if !waittest.Until(5*time.Second, func() bool {
		_, err := b.Lookup(tok2)
		return err != nil && strings.Contains(err.Error(), "malformed")
	}) {
		t.Fatal("a malformed key in the store was not refused")
	}
}

// A change that would make the keys more than a store takes is refused,
// and the keys stay as they were.
func TestKeysSizeBound(t *testing.T) {
	// Keys up to just under the bound, then one more.
	var b strings.Builder
	b.WriteString(`{"keys":[`)
	for i := 0; b.Len() < 1<<20-400; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name":"k%d","hash":"sha256:%064x","scopes":["read"]}`, i, i)
	}
	b.WriteString(`]}`)
	sh := &memShared{data: []byte(b.String())}
	s := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	before, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Create(apikey.Key{Name: "one-more", Scopes: []gate.Scope{gate.ScopeRead}})
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a key past the bound: %v, want it refused", err)
	}
	if after, err := s.List(); err != nil || len(after) != len(before) {
		t.Fatalf("the keys after the refused create: %d (were %d), %v", len(after), len(before), err)
	}
}
