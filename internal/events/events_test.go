package events

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/labels"
	"github.com/nsys-cortex/cortex/internal/layout"
)

func newLog(t *testing.T) *Log {
	t.Helper()
	lay, err := layout.New(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	return Open(lay)
}

func TestAppendAndRead(t *testing.T) {
	l := newLog(t)
	t0 := time.Now().Add(-time.Hour)
	for i, ev := range []Event{
		{Time: t0, Type: Created, Neuron: "a", Labels: labels.Set{"team": "x"}},
		{Time: t0.Add(time.Minute), Type: Started, Neuron: "a", Labels: labels.Set{"team": "x"}},
		{Time: t0.Add(2 * time.Minute), Type: Created, Neuron: "b", Labels: labels.Set{"team": "y"}},
		{Type: Paused, Neuron: "b", Labels: labels.Set{"team": "y"}, Reason: "requested"},
	} {
		if err := l.Append(ev); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	all, err := l.Read(Filter{})
	if err != nil || len(all) != 4 {
		t.Fatalf("Read = %d events, %v", len(all), err)
	}
	if all[3].Time.IsZero() || all[3].Time.Location() != time.UTC || all[3].Reason != "requested" {
		t.Errorf("the last event is %+v: want it stamped now, in UTC", all[3])
	}
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{Selector: labels.MustParse("team=x")}, "created a,started a"},
		{Filter{Since: t0.Add(90 * time.Second)}, "created b,paused b"},
		{Filter{Until: t0.Add(90 * time.Second)}, "created a,started a"},
		{Filter{Neurons: []string{"b"}}, "created b,paused b"},
		{Filter{Neurons: []string{"b"}, Selector: labels.MustParse("team!=y")}, ""},
	} {
		evs, err := l.Read(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(evs); got != tc.want {
			t.Errorf("Read(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	st, err := os.Stat(l.path(0))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the log is %v, %v: want it owner-only", st.Mode(), err)
	}
}

func names(evs []Event) string {
	s := ""
	for i, ev := range evs {
		if i > 0 {
			s += ","
		}
		s += string(ev.Type) + " " + ev.Neuron
	}
	return s
}

func TestRotationKeepsOrderAndDropsOnlyTheOldest(t *testing.T) {
	l := newLog(t)
	l.MaxBytes, l.Keep = 1024, 3
	for i := range 200 {
		if err := l.Append(Event{Type: Started, Neuron: fmt.Sprintf("n%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := l.Read(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || len(evs) >= 200 {
		t.Fatalf("%d events kept of 200 with 4 files of 1 KiB", len(evs))
	}
	first := 200 - len(evs)
	for i, ev := range evs {
		if want := fmt.Sprintf("n%03d", first+i); ev.Neuron != want {
			t.Fatalf("event %d is %s, want %s (the newest kept, in order)", i, ev.Neuron, want)
		}
	}
	for n := 0; n <= l.Keep; n++ {
		st, err := os.Stat(l.path(n))
		if err != nil || st.Size() > l.MaxBytes {
			t.Errorf("file %d: %v, %v", n, st, err)
		}
	}
	if _, err := os.Stat(l.path(l.Keep + 1)); err == nil {
		t.Errorf("a file past Keep is there")
	}
}

func TestTornAndForeignLinesAreSkipped(t *testing.T) {
	l := newLog(t)
	if err := l.Append(Event{Type: Created, Neuron: "a"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(l.path(0), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not json\n{\"type\":\"started\",\"neuron\":\"b\"}\n{\"type\":\"cut sh")
	f.Close()
	evs, err := l.Read(Filter{})
	if err != nil || names(evs) != "created a,started b" {
		t.Errorf("Read = %q, %v", names(evs), err)
	}
}

func TestFollowSeesOtherWritersAcrossRotations(t *testing.T) {
	l := newLog(t)
	l.MaxBytes, l.Keep = 2048, 10000
	if err := l.Append(Event{Type: Created, Neuron: "before"}); err != nil {
		t.Fatal(err)
	}
	const total = 400
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	followed := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		followed <- l.Follow(ctx, Filter{}, func(ev Event) error {
			got = append(got, ev.Neuron)
			if len(got) == 1 {
				close(first)
			}
			if len(got) == total+1 {
				return errDone
			}
			return nil
		})
	}()
	<-first
	// Two writers, as two processes would be: their own Log values.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := &Log{dir: l.dir, MaxBytes: l.MaxBytes, Keep: l.Keep}
			for i := range total / 2 {
				if err := other.Append(Event{Type: Started, Neuron: fmt.Sprintf("w%d-%03d", w, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := <-followed; !errors.Is(err, errDone) {
		t.Fatalf("Follow = %v after %d of %d events", err, len(got), total+1)
	}
	if got[0] != "before" {
		t.Errorf("the first event is %s", got[0])
	}
	next := map[int]int{}
	for _, id := range got[1:] {
		var w, i int
		fmt.Sscanf(id, "w%d-%d", &w, &i)
		if i != next[w] {
			t.Fatalf("writer %d's event %d came when %d was due: lost or out of order", w, i, next[w])
		}
		next[w]++
	}
	files, _ := filepath.Glob(l.path(0) + ".*")
	if len(files) < 5 {
		t.Errorf("only %d rotations: the test did not follow across rotations", len(files))
	}
}

var errDone = errors.New("done")

func TestFollowEndsWithItsContext(t *testing.T) {
	l := newLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- l.Follow(ctx, Filter{}, func(Event) error { return nil }) }()
	cancel()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("Follow = %v, want nil when its context ends", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end with its context")
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                         now.Add(-10 * time.Minute),
		"0s":                          now,
		"1h30m":                       now.Add(-90 * time.Minute),
		"2026-01-01T00:00:00Z":        time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		"2026-01-01T01:00:00.5+01:00": time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC),
	} {
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-5m", "10", "2026-01-01"} {
		if _, err := ParseTime(bad, now); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ParseTime(%q) = %v; want an error that quotes it", bad, err)
		}
	}
}
