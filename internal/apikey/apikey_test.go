package apikey_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/apikey"
	"github.com/nsys-cortex/cortex/internal/gate"
	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
)

func newStore(t *testing.T) (*apikey.Store, string) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "h")
	lay, err := layout.New(home, "")
	if err != nil {
		t.Fatal(err)
	}
	return apikey.Open(lay), home
}

// A key's token is shown once and kept only as its hash; the store finds
// the key by its token, another process's changes are seen at once, and
// a removed key is found no more.
func TestStore(t *testing.T) {
	s, home := newStore(t)
	tok, k, err := s.Create(apikey.Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeExec}, Selector: labels.Set{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, apikey.Prefix) || len(tok) != len(apikey.Prefix)+43 || k.Hash != apikey.HashOf(tok) {
		t.Fatalf("token %q, key %+v", tok, k)
	}
	b, err := os.ReadFile(filepath.Join(home, "api-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), strings.TrimPrefix(tok, apikey.Prefix)) {
		t.Fatalf("the keys file holds the token: %s", b)
	}
	if fi, _ := os.Stat(filepath.Join(home, "api-keys.json")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the keys file's mode: %v", fi.Mode())
	}
	if _, _, err := s.Create(apikey.Key{Name: "ci", Scopes: []gate.Scope{gate.ScopeRead}}); !errors.Is(err, apikey.ErrExists) {
		t.Fatalf("a second key named ci: %v", err)
	}
	for _, bad := range []apikey.Key{{Name: "Bad Name", Scopes: []gate.Scope{gate.ScopeRead}}, {Name: "none"}, {Name: "neg", Scopes: []gate.Scope{gate.ScopeRead}, Rate: -1}} {
		if _, _, err := s.Create(bad); err == nil {
			t.Errorf("%+v was made", bad)
		}
	}
	got, err := s.Lookup(tok)
	if err != nil || got == nil || got.Name != "ci" || got.Principal().String() != "api:ci" || !got.Principal().Allows(gate.Exec) || got.Principal().Allows(gate.FileWrite) {
		t.Fatalf("lookup: %+v, %v", got, err)
	}
	for _, wrong := range []string{"", tok + "x", apikey.Prefix, strings.ToUpper(tok), "Bearer " + tok} {
		if k, err := s.Lookup(wrong); k != nil || err != nil {
			t.Errorf("lookup of %q: %+v, %v", wrong, k, err)
		}
	}
	// Another process (the CLI) removes it: this store sees it at once.
	other := apikey.Open(layout.Layout{Home: home})
	if err := other.Remove("ci"); err != nil {
		t.Fatal(err)
	}
	if k, err := s.Lookup(tok); k != nil || err != nil {
		t.Fatalf("a removed key: %+v, %v", k, err)
	}
	if err := other.Remove("ci"); !errors.Is(err, apikey.ErrNotFound) {
		t.Fatalf("removing it twice: %v", err)
	}
}

// A key made for E2B's SDKs has their form (e2b_ and 64 hex digits) and
// is found by it like any other; the form is no way around a key.
func TestE2BForm(t *testing.T) {
	s, _ := newStore(t)
	tok, k, err := s.Create(apikey.Key{Name: "sdk", Scopes: []gate.Scope{gate.ScopeAdmin}, E2B: true})
	if err != nil {
		t.Fatal(err)
	}
	hexPart, ok := strings.CutPrefix(tok, apikey.E2BPrefix)
	if !ok || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" || k.Hash != apikey.HashOf(tok) {
		t.Fatalf("token %q, key %+v", tok, k)
	}
	if got, err := s.Lookup(tok); err != nil || got == nil || got.Name != "sdk" {
		t.Fatalf("lookup: %+v, %v", got, err)
	}
	for _, wrong := range []string{apikey.E2BPrefix, apikey.E2BPrefix + strings.Repeat("0", 64), apikey.Prefix + hexPart} {
		if k, err := s.Lookup(wrong); k != nil || err != nil {
			t.Errorf("lookup of %q: %+v, %v", wrong, k, err)
		}
	}
}

// The daemon records when each key was last used, and list shows it; a
// keys file others could write is refused rather than trusted.
func TestLastUsedAndFileMode(t *testing.T) {
	s, home := newStore(t)
	tok, _, err := s.Create(apikey.Key{Name: "k", Scopes: []gate.Scope{gate.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := s.List(); len(l) != 1 || !l[0].LastUsed.IsZero() {
		t.Fatalf("before any use: %+v", l)
	}
	if k, _ := s.Lookup(tok); k == nil {
		t.Fatal("not found")
	}
	s.Flush()
	if l, _ := s.List(); len(l) != 1 || l[0].LastUsed.IsZero() {
		t.Fatalf("after a use: %+v", l)
	}
	path := filepath.Join(home, "api-keys.json")
	os.Chmod(path, 0o666)
	if _, err := apikey.Open(layout.Layout{Home: home}).Lookup(tok); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a world-writable keys file: %v", err)
	}
}

func TestParseSelector(t *testing.T) {
	for in, want := range map[string]string{"team=a": "team=a", " team=a , env=dev ": "env=dev,team=a", "": ""} {
		got, err := apikey.ParseSelector(in)
		if err != nil || got.String() != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"team", "team!=a", "team in (a)", "Team Name=a"} {
		if _, err := apikey.ParseSelector(bad); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
