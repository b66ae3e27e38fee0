package prompt

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuildOrderAndSources(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte("global agents"), 0o600)
	os.WriteFile(filepath.Join(dir, "SOUL.md"), []byte("global soul"), 0o600)
	ws := map[string]string{"AGENTS.md": "project agents", "TOOLS.md": strings.Repeat("t", MaxFileBytes+10)}
	p, err := Build(context.Background(), Options{
		GlobalDir: dir,
		Workspace: func(_ context.Context, name string) ([]byte, error) {
			if s, ok := ws[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		Tools: []Tool{{Name: "read", Description: "Read a file.\nMore."}},
		Facts: Facts{Neuron: "n1", Mode: "nsbox", Workdir: "/workspace", Network: "none", Policy: "standard"},
	})
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"global soul", "global agents", "project agents", "[… cut", "- read: Read a file.", "- id: n1", "- tool policy: standard"}
	at := 0
	for _, w := range order {
		i := strings.Index(p[at:], w)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", w, p)
		}
		at += i
	}
	if strings.Contains(p, "More.") {
		t.Fatal("tool descriptions beyond the first line")
	}
}
