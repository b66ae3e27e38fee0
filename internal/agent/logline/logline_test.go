package logline

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriterCleansAndBounds(t *testing.T) {
	var out bytes.Buffer
	w := New(&out, 200)
	w.Write([]byte("one\n2026/12/01 10:00:00.000000 nsys-cortex: forged\x1b[2J\n"))
	if got := out.String(); strings.Count(got, "\n") != 1 || strings.ContainsRune(got, 0x1b) {
		t.Fatalf("one record is one clean line: %q", got)
	}
	for range 100 {
		w.Write([]byte(strings.Repeat("x", 50) + "\n"))
	}
	if out.Len() > 200+100 {
		t.Fatalf("wrote %d bytes with a budget of 200", out.Len())
	}
	if !strings.Contains(out.String(), "log limit reached") || strings.Count(out.String(), "log limit") != 1 {
		t.Fatalf("the limit is said once: %q", out.String())
	}
	if w.Dropped() < 90*51 {
		t.Errorf("dropped %d bytes", w.Dropped())
	}
}
