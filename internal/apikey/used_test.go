package apikey_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/layout"
)

// A damaged record of use, in the home's file or the shared store (JSON
// null, a time that is none), neither panics a daemon nor keeps the keys
// from being listed: the keys show as unused, and the next write makes
// the record afresh.
func TestUsedRecordDamaged(t *testing.T) {
	for _, bad := range []string{"null", `{"ci":"yesterday"}`, "{"} {
		t.Run(bad, func(t *testing.T) {
			home := t.TempDir()
			s := apikey.Open(layout.Layout{Home: home})
			sh := &memUsed{}
			shared := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
			for _, st := range []*apikey.Store{s, shared} {
				tok, _, err := st.Create(apikey.Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeRead}})
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(home, "api-keys.used.json"), []byte(bad), 0o600)
				sh.used.data = []byte(bad)
				if list, err := st.List(); err != nil || len(list) != 1 || !list[0].LastUsed.IsZero() {
					t.Fatalf("list over a damaged record: %+v %v", list, err)
				}
				if k, err := st.Lookup(tok); err != nil || k == nil {
					t.Fatalf("lookup: %+v %v", k, err)
				}
				st.Flush()
				if list, err := st.List(); err != nil || list[0].LastUsed.IsZero() {
					t.Fatalf("after a flush over a damaged record: %+v %v", list, err)
				}
			}
		})
	}
}

// A daemon that has not read the keys since one was made (another
// replica made and used it) keeps that key's record of use when it
// writes its own; removing a key removes its record.
func TestUsedOfKeysADaemonDoesNotKnow(t *testing.T) {
	sh := &memUsed{}
	a := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	b := apikey.OpenShared(layout.Layout{Home: t.TempDir()}, sh)
	old, _, _ := a.Create(apikey.Key{Name: "old", Scopes: []gate.Scope{gate.ScopeRead}})
	if k, _ := b.Lookup(old); k == nil { // b reads the keys now, and notes a use
		t.Fatal("b's lookup")
	}
	fresh, _, _ := a.Create(apikey.Key{Name: "new", Scopes: []gate.Scope{gate.ScopeRead}})
	if k, _ := a.Lookup(fresh); k == nil {
		t.Fatal("a's lookup")
	}
	a.Flush()
	b.Flush() // b knows only "old"
	used := func(name string) bool {
		t.Helper()
		list, err := a.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list {
			if l.Name == name {
				return !l.LastUsed.IsZero()
			}
		}
		return false
	}
	if !used("new") || !used("old") {
		t.Fatalf("after both daemons wrote: new used %v, old used %v", used("new"), used("old"))
	}
	if err := a.Remove("new"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(apikey.Key{Name: "new", Scopes: []gate.Scope{gate.ScopeRead}}); err != nil {
		t.Fatal(err)
	}
	if used("new") {
		t.Error("a key made again under a removed one's name shows the removed one's use")
	}
}
