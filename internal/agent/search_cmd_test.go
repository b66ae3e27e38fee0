//go:build linux

package agent

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nsys-cortex/cortex/internal/agent/search"
	"github.com/nsys-cortex/cortex/internal/protocol"
)

// The search command reads through the agent's jail: no path, and no
// symlink met on the way, leads out of the neuron's root.
func TestSearchIsJailed(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must(t, os.MkdirAll(root, 0o755))
	must(t, os.WriteFile(filepath.Join(base, "secret.txt"), []byte("needle\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "in.txt"), []byte("needle\n"), 0o644))
	must(t, os.Symlink("../secret.txt", filepath.Join(root, "out.txt")))
	must(t, os.Symlink("in.txt", filepath.Join(root, "link.txt")))
	a, err := New(Config{ID: "s", Root: root, Version: "test", Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	fsys := jailFS{a.fs}
	res, err := search.Run(context.Background(), fsys, &protocol.SearchArgs{Path: ".", Pattern: "needle", Mode: protocol.SearchModeFiles})
	if err != nil || !slices.Equal(res.Files, []string{"in.txt", "link.txt"}) {
		t.Fatalf("files: %+v %v, want in.txt and link.txt only", res, err)
	}
	for _, p := range []string{"..", "../secret.txt", "out.txt", "/etc"} {
		if _, err := search.Run(context.Background(), fsys, &protocol.SearchArgs{Path: p, Pattern: "x"}); !protocol.HasCode(err, protocol.CodePathEscape) {
			t.Errorf("%s: %v, want PATH_ESCAPE", p, err)
		}
	}
}
