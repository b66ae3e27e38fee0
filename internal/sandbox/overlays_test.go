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

func (o *overlayManager) ListOverlays(_ context.Context, overlays []Overlay) ([]*State, error) {
	o.scans = append(o.scans, overlays)
	var out []*State
	for _, ov := range overlays {
		if ov.Mode == o.mode {
			out = append(out, &State{ID: ov.ID, Mode: o.mode})
		}
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
// built on them: each gets the same scan, with every overlay's mark, and
// takes its own. Entries that are not an overlay (a file, a symbolic
// link to a directory, a name that is not an id) are not in it. A find
// asks the mode an overlay is marked with first.
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
	c := &fakeManager{mode: "c", neurons: map[string]*State{"w1": {ID: "w1", Mode: "c"}}}
	backends := []Backend{
		{Name: "a", New: func(Env) (Manager, error) { return a, nil }},
		{Name: "b", New: func(Env) (Manager, error) { return b, nil }},
		{Name: "c", New: func(Env) (Manager, error) { return c, nil }},
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
	if want := []string{"c:w1", "a:x1", "b:y1"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if len(a.scans) != 1 || len(b.scans) != 1 {
		t.Fatalf("scans handed out: a %d, b %d, want one each", len(a.scans), len(b.scans))
	}
	if &a.scans[0][0] != &b.scans[0][0] {
		t.Errorf("each mode got a scan of its own: the overlays were read twice")
	}
	want := []Overlay{{"x1", "a"}, {"y1", "b"}, {"z1", ""}}
	if !slices.Equal(a.scans[0], want) {
		t.Errorf("scan %v, want %v", a.scans[0], want)
	}

	// A find asks the marked mode first; the others only when it does
	// not have the neuron.
	if _, st, err := set.Find(ctx, "y1"); err != nil || st.Mode != "b" {
		t.Fatalf("find y1: %v %v", st, err)
	}
	if want := []string{"b:y1"}; !slices.Equal(gets, want) {
		t.Errorf("find y1 asked %v, want %v", gets, want)
	}
	gets = nil
	if _, st, err := set.Find(ctx, "w1"); err != nil || st.Mode != "c" {
		t.Fatalf("find w1: %v %v", st, err)
	}
	if want := []string{"a:w1", "b:w1"}; !slices.Equal(gets, want) {
		t.Errorf("find of an unmarked neuron asked %v, want %v in order", gets, want)
	}

	// No overlays directory: nothing, and no error.
	if got, err := ScanOverlays(layout.Layout{Overlays: filepath.Join(lay.Overlays, "none")}); err != nil || got != nil {
		t.Errorf("no overlays: %v %v", got, err)
	}
}

func TestModeFirst(t *testing.T) {
	bs := []Backend{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	names := func(bs []Backend) (out []string) {
		for _, b := range bs {
			out = append(out, b.Name)
		}
		return out
	}
	for mode, want := range map[string][]string{
		"c": {"c", "a", "b"}, "b": {"b", "a", "c"}, "a": {"a", "b", "c"}, "": {"a", "b", "c"}, "zz": {"a", "b", "c"},
	} {
		if got := names(modeFirst(bs, mode)); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", mode, got, want)
		}
	}
	if got := names(bs); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("modeFirst changed the set's order: %v", got)
	}
}
