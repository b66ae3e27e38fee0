package store

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRecoverRestore: whatever point of its swap a restore was killed at,
// RecoverRestore leaves the overlay exactly the snapshot's (never a mix),
// host records kept, and no staging directory behind.
func TestRecoverRestore(t *testing.T) {
	write := func(dir, name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The snapshot has a and d; the overlay had a, b and c. Each case is
	// where the kill left each entry.
	for name, c := range map[string]struct{ overlay, old, stage []string }{
		"nothing moved yet":      {overlay: []string{"a", "b", "c"}, stage: []string{"a", "d"}},
		"a and b aside":          {overlay: []string{"c"}, old: []string{"a", "b"}, stage: []string{"a", "d"}},
		"all aside":              {old: []string{"a", "b", "c"}, stage: []string{"a", "d"}},
		"a in":                   {overlay: []string{"a"}, old: []string{"a", "b", "c"}, stage: []string{"d"}},
		"all in, not cleaned up": {overlay: []string{"a", "d"}, old: []string{"a", "b", "c"}},
	} {
		t.Run(name, func(t *testing.T) {
			ov := t.TempDir()
			stage, old := filepath.Join(ov, ".restore-x1"), filepath.Join(ov, ".old-x2")
			os.Mkdir(stage, 0o700)
			os.Mkdir(old, 0o700)
			write(ov, ".owner", "host record")
			for _, n := range c.overlay {
				body := "old" // still here: not yet aside
				if slices.Contains(c.old, n) || !slices.Contains([]string{"a", "b", "c"}, n) {
					body = "new" // aside already, or never here: it came in
				}
				write(ov, n, body)
			}
			for _, n := range c.old {
				write(old, n, "old")
			}
			for _, n := range c.stage {
				write(stage, n, "new")
			}
			if err := WriteJSON(filepath.Join(ov, restoreJournal), &journal{Stage: ".restore-x1", Old: ".old-x2",
				Aside: []string{"a", "b", "c"}, In: []string{"a", "d"}}, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := RecoverRestore(ov); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, n := range entryNames(ov) {
				b, _ := os.ReadFile(filepath.Join(ov, n))
				got[n] = string(b)
			}
			want := map[string]string{".owner": "host record", "a": "new", "d": "new"}
			if len(got) != len(want) || got["a"] != "new" || got["d"] != "new" || got[".owner"] != "host record" {
				t.Errorf("after recovery: %v, want %v", got, want)
			}
		})
	}
	// Without a journal the swap had not begun: staging is removed, the
	// overlay kept.
	ov := t.TempDir()
	os.Mkdir(filepath.Join(ov, ".restore-y"), 0o700)
	write(ov, "a", "old")
	if err := RecoverRestore(ov); err != nil {
		t.Fatal(err)
	}
	if names := entryNames(ov); !slices.Equal(names, []string{"a"}) {
		t.Errorf("without a journal: %v", names)
	}
}
