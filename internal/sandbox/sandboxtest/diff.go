package sandboxtest

import (
	"strings"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
	"github.com/nsys-cortex/cortex/internal/treediff"
)

// RunDiffer runs the conformance suite of diff (sandbox.Differ): what a
// fork changed against its parent, and what a neuron changed since a
// snapshot, at the neuron's own paths, with patches of text files. A mode
// whose files are inside a disk image says it cannot.
func RunDiffer(t *testing.T, cfg Config) {
	f := newFixture(t, cfg)
	m := f.manager()
	d, ok := m.(sandbox.Differ)
	if !ok {
		t.Fatalf("%s mode's manager is no sandbox.Differ", m.Mode())
	}
	f.create(m, "base")
	c := f.connect(m, "base")
	f.shell(c, "printf 'one\\ntwo\\n' > edit.txt && echo bye > gone.txt && echo x > keep.txt && mkdir -p old && echo 1 > old/f && echo m > mode.sh")
	fk, ok := m.(sandbox.Forker)
	if !ok {
		t.Fatal("no sandbox.Forker")
	}
	kids, err := fk.Fork(f.ctx, "base", []string{"kid"}, sandbox.ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.shell(f.connect(m, "kid"), "printf 'one\\n2\\n' > edit.txt && rm gone.txt && rm -r old && mkdir -p new/deep && echo hi > new/deep/f && chmod 755 mode.sh")
	res, err := d.Diff(f.ctx, "kid", sandbox.DiffOptions{Patch: true})
	if errdefs.IsUnsupported(err) {
		t.Skipf("refused, as it must be: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	w := kids[0].Workdir // paths as the neuron compared sees them
	got := map[string]treediff.Change{}
	var lines []string
	for _, ch := range res.Changes {
		got[ch.Path] = ch
		if strings.HasPrefix(ch.Path, w) {
			lines = append(lines, ch.Kind+" "+strings.TrimPrefix(ch.Path, w))
		}
	}
	want := "modified /edit.txt|removed /gone.txt|mode /mode.sh|added /new/|added /new/deep/|added /new/deep/f|removed /old/|removed /old/f"
	if strings.Join(lines, "|") != want || res.Against != "base" {
		t.Fatalf("kid against base (%s):\n%s\nwant\n%s\nall: %+v", res.Against, strings.Join(lines, "|"), want, res.Changes)
	}
	if p := got[w+"/edit.txt"].Patch; !strings.Contains(p, "-two\n+2\n") {
		t.Fatalf("the patch of edit.txt: %q", p)
	}
	// Against a snapshot of its own: what it changed since.
	root, err := m.(sandbox.DataRooter).DataRoot(f.ctx, "kid")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateSnapshot(f.env.Layout.SnapshotsDir("kid"), "s1", "kid", root); err != nil {
		t.Fatal(err)
	}
	f.shell(f.connect(m, "kid"), "echo later > later.txt")
	res, err = d.Diff(f.ctx, "kid", sandbox.DiffOptions{Snapshot: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var since []string
	for _, ch := range res.Changes {
		if strings.HasPrefix(ch.Path, w) {
			since = append(since, ch.Kind+" "+strings.TrimPrefix(ch.Path, w))
		}
	}
	if strings.Join(since, "|") != "added /later.txt" || res.Against != "kid@s1" {
		t.Fatalf("kid since its snapshot (%s): %q", res.Against, since)
	}
	// A neuron that was not forked needs something to compare with.
	if _, err := d.Diff(f.ctx, "base", sandbox.DiffOptions{}); !errdefs.IsInvalid(err) {
		t.Fatalf("diff of an unforked neuron alone: %v", err)
	}
	if _, err := d.Diff(f.ctx, "kid", sandbox.DiffOptions{Against: "nobody"}); !errdefs.IsNotFound(err) {
		t.Fatalf("diff against no neuron: %v", err)
	}
}
