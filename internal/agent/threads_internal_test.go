package agent

import (
	"os"
	"testing"
)

func threadCount(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

// The threads SpareThreads starts stay: the runtime keeps them idle, so
// they are there when the kernel would refuse new ones.
func TestSpareThreadsStay(t *testing.T) {
	before := threadCount(t)
	n := before + 16
	SpareThreads(n)
	if got := threadCount(t); got < n {
		t.Fatalf("%d threads after SpareThreads(%d) (%d before)", got, n, before)
	}
	// They are reused, not added to: asking again starts none (but for a
	// few, where other goroutines of the test binary took idle ones
	// meanwhile; without reuse it would start n).
	after := threadCount(t)
	SpareThreads(n)
	if got := threadCount(t); got > after+4 {
		t.Fatalf("a second SpareThreads(%d) went from %d threads to %d: the first's were not kept", n, after, got)
	}
}
