package nsbox_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/archive"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/nsbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/sandboxtest"
)

// An archive whose upper layer is a symbolic link to a host directory
// is refused, and that directory is left alone: a create would have
// written the neuron's /etc/hosts there, as root, and made the neuron's
// home in it, given to the neuron's uid. Nor may a layer be a file.
func TestImportRefusesLinkedLayers(t *testing.T) {
	requireNsbox(t)
	ctx := context.Background()
	e := envInNewHome(t)
	m := nsbox.New(e)
	t.Cleanup(func() { sandboxtest.DestroyAll(m); m.Close() })
	set := sandbox.NewSet(e, nsbox.Backend())
	write := func(rec archive.Record, dir string) *bytes.Buffer {
		var ar bytes.Buffer
		if _, err := archive.Write(ctx, &ar, rec, []archive.Tree{{Name: "data", Dir: dir}}); err != nil {
			t.Fatal(err)
		}
		return &ar
	}
	// A good archive first: an import may be a home's first neuron.
	good := t.TempDir()
	os.MkdirAll(filepath.Join(good, "upper", "root", "data"), 0o755)
	os.WriteFile(filepath.Join(good, "upper", "root", "data", "f.txt"), []byte("kept\n"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(good, "upper", "root", "data", "link")) // the neuron's own, below its layer
	if _, err := set.Import(ctx, write(archive.Record{ID: "x", Mode: "nsbox"}, good), "first", nil); err != nil {
		t.Fatalf("an import into a fresh home: %v", err)
	}
	victim := t.TempDir()
	for name, files := range map[string]func(dir string){
		"upper/root a link": func(dir string) {
			os.MkdirAll(filepath.Join(dir, "upper"), 0o755)
			os.Symlink(victim, filepath.Join(dir, "upper", "root"))
		},
		"upper a link": func(dir string) { os.Symlink(victim, filepath.Join(dir, "upper")) },
		"upper/usr a file": func(dir string) {
			os.MkdirAll(filepath.Join(dir, "upper"), 0o755)
			os.WriteFile(filepath.Join(dir, "upper", "usr"), nil, 0o644)
		},
	} {
		dir := t.TempDir()
		files(dir)
		if _, err := set.Import(ctx, write(archive.Record{ID: "x", Mode: "nsbox"}, dir), "linked", nil); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "not an export of nsys-cortex") {
			t.Errorf("%s: %v, want the import refused", name, err)
		}
		if _, err := os.Lstat(e.Layout.OverlayDir("linked")); err == nil {
			t.Errorf("%s: the refused import left its directory", name)
		}
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the directory an archive pointed at was written: %v", ents)
	}
}
