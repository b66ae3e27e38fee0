package apikey

import (
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// sharedUse is a Shared and SharedUse store in memory, without versions.
type sharedUse struct {
	mu         sync.Mutex
	keys, used []byte
}

func (m *sharedUse) Where() string { return "memory" }

func (m *sharedUse) Load() ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys, string(m.keys), nil
}

func (m *sharedUse) Change(fn func([]byte) ([]byte, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := fn(m.keys)
	if err == nil {
		m.keys = b
	}
	return err
}

func (m *sharedUse) LoadUsed() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used, nil
}

func (m *sharedUse) ChangeUsed(fn func([]byte) ([]byte, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := fn(m.used)
	if err == nil {
		m.used = b
	}
	return err
}

// Lookups that would flush (as if 10 s had passed each time) while
// Flush runs, again and again: no write starts after a Flush, and none
// is left running when it returns.
func TestFlushWhileLookups(t *testing.T) {
	s := OpenShared(layout.Layout{Home: t.TempDir()}, &sharedUse{})
	tok, _, err := s.Create(Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.mu.Lock()
				s.flushed = time.Time{}
				s.mu.Unlock()
				s.Lookup(tok)
			}
		})
	}
	for range 200 {
		s.Flush()
		s.mu.Lock()
		inflight, closed := s.inflight, s.closed
		s.mu.Unlock()
		if inflight != nil || !closed {
			t.Fatalf("after Flush: a write in flight %v, closed %v", inflight != nil, closed)
		}
	}
	close(stop)
	wg.Wait()
}
