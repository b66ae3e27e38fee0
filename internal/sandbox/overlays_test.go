package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nsys-cortex/cortex/internal/layout"
)

// overlayManager is a fakeManager whose neurons are the overlays marked
// with its mode, as the lifecycle's are; it records what the Set asks.
type overlayManager struct {
	fakeManager
	scans [][]Overlay
	gets  *[]string
}

func (o *overlayManager) OwnsMark(mode string) bool { return mode == o.mode }

func (o *overlayManager) ListOverlays(_ context.Context, overlays []Overlay) ([]*State, error) {
	o.scans = append(o.scans, overlays)
	var out []*State
	for _, ov := range overlays {
		out = append(out, &State{ID: ov.ID, Mode: o.mode})
	}
	return out, nil
}

func (o *overlayManager) List(context.Context) ([]*State, error) {
	panic("the Set lists an OverlayLister with ListOverlays")
}

func (o *overlayManager) Get(ctx context.Context, id string) (*State, error) {
	*o.gets = append(*o.gets, o.mode+":"+id)
	return o.fakeManager.Get(ctx, id)
}

// A list reads the home's overlays and their marks once, for every mode
// built on them: each is handed the overlays marked as its own. Entries
// that are not an overlay (a file, a symbolic link to a directory, a
// name that is not an id) are not in the scan. A find does not ask the
// modes whose mark an overlay does not bear, and asks the others in the
// set's order.
func TestListScansOverlaysOnce(t *testing.T) {
	ctx := context.Background()
	lay := layout.Layout{Overlays: t.TempDir()}
	mark := func(id, mode string) {
		if err := os.MkdirAll(lay.OverlayDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		if mode != "" {
			if err := os.WriteFile(filepath.Join(lay.OverlayDir(id), ".mode"), []byte(mode+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mark("x1", "a")
	mark("y1", "b")
	mark("z1", "")
	os.WriteFile(filepath.Join(lay.Overlays, "file"), nil, 0o600)
	os.Symlink(lay.OverlayDir("y1"), filepath.Join(lay.Overlays, "link"))
	os.Mkdir(filepath.Join(lay.Overlays, ".hidden"), 0o700)

	var gets []string
	a := &overlayManager{fakeManager: fakeManager{mode: "a", neurons: map[string]*State{"x1": {ID: "x1", Mode: "a"}}}, gets: &gets}
	b := &overlayManager{fakeManager: fakeManager{mode: "b", neurons: map[string]*State{"y1": {ID: "y1", Mode: "b"}}}, gets: &gets}
	c := &fakeManager{mode: "c", neurons: map[string]*State{"w1": {ID: "w1", Mode: "c"}, "y1": {ID: "y1", Mode: "c"}}}
	backends := []Backend{
		{Name: "c", Rank: 5, New: func(Env) (Manager, error) { return c, nil }},
		{Name: "a", Rank: 1, New: func(Env) (Manager, error) { return a, nil }},
		{Name: "b", New: func(Env) (Manager, error) { return b, nil }},
	}
	set := NewSet(Env{Layout: lay}, backends...)

	all, err := set.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range all {
		got = append(got, st.Mode+":"+st.ID)
	}
	slices.Sort(got) // a list is sorted by id only
	if want := []string{"a:x1", "b:y1", "c:w1", "c:y1"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if len(a.scans) != 1 || len(b.scans) != 1 {
		t.Fatalf("scans handed out: a %d, b %d, want one each", len(a.scans), len(b.scans))
	}
	if !slices.Equal(a.scans[0], []Overlay{{"x1", "a"}}) || !slices.Equal(b.scans[0], []Overlay{{"y1", "b"}}) {
		t.Errorf("handed a %v and b %v: each should have its own overlays only", a.scans[0], b.scans[0])
	}

	// A find skips the modes the mark is not, and keeps the set's order
	// for the rest: c (no overlays of its own, first by rank) still
	// answers first for y1, as it did before marks were read here.
	if _, st, err := set.Find(ctx, "y1"); err != nil || st.Mode != "c" {
		t.Fatalf("find y1: %v %v", st, err)
	}
	if len(gets) != 0 {
		t.Errorf("find y1 asked %v after c had it", gets)
	}
	delete(c.neurons, "y1")
	if _, st, err := set.Find(ctx, "y1"); err != nil || st.Mode != "b" {
		t.Fatalf("find y1: %v %v", st, err)
	}
	if want := []string{"b:y1"}; !slices.Equal(gets, want) {
		t.Errorf("find y1 asked %v, want %v: a's mark is not on it", gets, want)
	}
	gets = nil
	if _, _, err := set.Find(ctx, "z1"); err == nil {
		t.Fatalf("find of an unmarked overlay no mode has: found")
	}
	if len(gets) != 0 {
		t.Errorf("find of an overlay marked by none asked %v", gets)
	}

	// No overlays directory: nothing, and no error.
	if got, err := ScanOverlays(layout.Layout{Overlays: filepath.Join(lay.Overlays, "none")}); err != nil || got != nil {
		t.Errorf("no overlays: %v %v", got, err)
	}
}
