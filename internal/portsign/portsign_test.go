package portsign

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	key := []byte(strings.Repeat("k", KeySize))
	now := time.Unix(1_800_000_000, 0)
	tok := Sign(key, "web", "i1", 8000, now.Add(time.Hour), "")
	if by, err := Verify(key, "web", "i1", 8000, tok, now); err != nil || by != "" {
		t.Fatal(by, err)
	}
	// A key's URL names it, under the MAC: another name does not verify.
	kt := Sign(key, "web", "i1", 8000, now.Add(time.Hour), "team-a")
	if by, err := Verify(key, "web", "i1", 8000, kt, now); err != nil || by != "team-a" || !strings.HasSuffix(kt, "~team-a") {
		t.Fatalf("a key's token %q: %q, %v", kt, by, err)
	}
	km, _, _ := strings.Cut(kt, "~")
	other := []byte(strings.Repeat("o", KeySize))
	e, m, _ := strings.Cut(tok, ".")
	for _, tc := range []struct {
		name string
		key  []byte
		id   string
		inst string
		port int
		tok  string
		at   time.Time
		want error
	}{
		{"another neuron", key, "web2", "i1", 8000, tok, now, ErrWrong},
		{"another port", key, "web", "i1", 8001, tok, now, ErrWrong},
		{"another instance of the id", key, "web", "i2", 8000, tok, now, ErrWrong},
		{"another host's key", other, "web", "i1", 8000, tok, now, ErrWrong},
		{"no key", nil, "web", "i1", 8000, tok, now, ErrWrong},
		{"expired", key, "web", "i1", 8000, tok, now.Add(time.Hour), ErrExpired},
		{"a later expiry, same mac", key, "web", "i1", 8000, "9" + e + "." + m, now, ErrWrong},
		{"no dot", key, "web", "i1", 8000, e + m, now, ErrMalformed},
		{"empty", key, "web", "i1", 8000, "", now, ErrMalformed},
		{"not base64", key, "web", "i1", 8000, e + ".!!", now, ErrMalformed},
		{"huge", key, "web", "i1", 8000, e + "." + strings.Repeat("A", 100), now, ErrMalformed},
		{"a key's token under another key's name", key, "web", "i1", 8000, km + "~team-b", now, ErrWrong},
		{"a key's token with its name taken off", key, "web", "i1", 8000, km, now, ErrWrong},
		{"the operator's token with a name put on", key, "web", "i1", 8000, tok + "~team-a", now, ErrWrong},
		{"a bad name", key, "web", "i1", 8000, km + "~Team A", now, ErrMalformed},
	} {
		if _, err := Verify(tc.key, tc.id, tc.inst, tc.port, tc.tok, tc.at); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// Processes that make the key at once agree on one; it is owner-only.
func TestLoadKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "url.key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := LoadKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if string(k) != string(keys[0]) || len(k) != KeySize {
			t.Fatalf("two keys: %x %x", keys[0], k)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	os.WriteFile(path, []byte("short"), 0o600)
	if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("a truncated key: %v", err)
	}
}
