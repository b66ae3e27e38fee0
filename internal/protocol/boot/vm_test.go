package boot

import (
	"bufio"
	"strings"
	"testing"
)

// A control line is read whole up to MaxCtlLine, and one without end is
// refused there instead of filling the host's memory.
func TestReadCtlLine(t *testing.T) {
	r := bufio.NewReader(strings.NewReader(`{"ok":true}` + "\n" + strings.Repeat("x", MaxCtlLine-1) + "\n" + strings.Repeat("y", 10*MaxCtlLine)))
	if l, err := ReadCtlLine(r); err != nil || string(l) != `{"ok":true}` {
		t.Fatalf("%q, %v", l, err)
	}
	if l, err := ReadCtlLine(r); err != nil || len(l) != MaxCtlLine-1 {
		t.Fatalf("a line just under the bound: %d, %v", len(l), err)
	}
	if _, err := ReadCtlLine(r); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an endless line: %v", err)
	}
}
