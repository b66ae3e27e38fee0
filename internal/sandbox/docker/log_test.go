package docker

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"
)

// Lines docker gives again (--since is inclusive), lines that share one
// stamp (the pieces of a long line), lines that are not the container's,
// and the cap of one sync.
func TestCopyNew(t *testing.T) {
	out := func(lines ...string) string { return strings.Join(lines, "\n") + "\n" }
	run := func(mark logMark, in string) (logMark, string) {
		var b bytes.Buffer
		next, n := copyNew(bufio.NewWriter(&b), strings.NewReader(in), mark)
		if n != b.Len() {
			t.Errorf("copied %d bytes, said %d", b.Len(), n)
		}
		return next, b.String()
	}
	first := out(
		"2026-12-04T10:00:00.000000001Z one",
		"2026-12-04T10:00:00.000000002Z two, first piece",
		"2026-12-04T10:00:00.000000002Z two, second piece",
		"Error: not a line of the container's",
	)
	mark, got := run(parseMark(nil), first)
	if want := out("one", "two, first piece", "two, second piece"); got != want {
		t.Fatalf("first sync: %q, want %q", got, want)
	}
	mark = parseMark(mark.bytes()) // as the next process reads it
	if want := time.Date(2026, 12, 4, 10, 0, 0, 2, time.UTC); !mark.at.Equal(want) || len(mark.seen) != 2 {
		t.Fatalf("mark: %v %d", mark.at, len(mark.seen))
	}
	// The next sync asks --since the mark's stamp: docker gives its lines
	// again, and one more with that stamp, then newer ones.
	_, got = run(mark, out(
		"2026-12-04T10:00:00.000000002Z two, first piece",
		"2026-12-04T10:00:00.000000002Z two, second piece",
		"2026-12-04T10:00:00.000000002Z two, third piece",
		"2026-12-04T10:00:01Z three",
	))
	if want := out("two, third piece", "three"); got != want {
		t.Errorf("second sync: %q, want %q", got, want)
	}
	// One sync copies at most syncCap; a line past bufio's buffer is cut.
	var flood strings.Builder
	for i := 0; flood.Len() < 2*syncCap; i++ {
		flood.WriteString(time.Date(2026, 12, 4, 11, 0, 0, i, time.UTC).Format(time.RFC3339Nano) + " " + strings.Repeat("x", 1000) + "\n")
	}
	flood.WriteString("2026-12-04T12:00:00Z " + strings.Repeat("y", 200<<10) + "\n")
	next, got := run(parseMark(nil), flood.String())
	if len(got) < syncCap || len(got) > syncCap+2000 {
		t.Errorf("a flood copied %d bytes in one sync, cap %d", len(got), syncCap)
	}
	if next.at.Hour() != 11 {
		t.Errorf("the mark after a capped sync: %v", next.at)
	}
	_, got = run(parseMark(nil), "2026-12-04T12:00:00Z "+strings.Repeat("y", 200<<10)+"\nnext\n")
	if len(got) > 70<<10 || !strings.HasSuffix(got, "y\n") {
		t.Errorf("a line longer than the buffer: %d bytes copied", len(got))
	}
}
