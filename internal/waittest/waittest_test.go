package waittest

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	if !Until(time.Minute, func() bool { return n.Load() == 3 }) {
		t.Fatal("Until gave up on a condition that came to hold")
	}
	if Until(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Until reported a condition that never held")
	}
}

func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if v := Recv(t, time.Minute, "the value", ch); v != 7 {
		t.Fatalf("Recv: %d", v)
	}
	done := make(chan struct{})
	close(done)
	Recv(t, time.Minute, "done", done)
}

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
}

func TestForFails(t *testing.T) {
	f := &fakeT{TB: t}
	For(f, 10*time.Millisecond, "nothing", func() bool { return false })
	if f.failed == "" {
		t.Fatal("For did not fail on a condition that never held")
	}
	f = &fakeT{TB: t}
	Recv(f, 10*time.Millisecond, "nothing", make(chan int))
	if f.failed == "" {
		t.Fatal("Recv did not fail when nothing came")
	}
}

func parkHere(ch chan struct{}) { <-ch }

func TestParked(t *testing.T) {
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() { parkHere(ch); close(done) }()
	For(t, time.Minute, "parkHere to wait", func() bool { return Parked("waittest.parkHere") })
	if n := Goroutines("waittest.parkHere"); n != 1 {
		t.Fatalf("Goroutines: %d in parkHere, want 1", n)
	}
	close(ch)
	Recv(t, time.Minute, "parkHere to return", done)
	if Parked("waittest.parkHere") {
		t.Fatal("a goroutine that returned is still parked")
	}
	if Parked("waittest.noSuchFunction") {
		t.Fatal("parked in a function that does not exist")
	}
}
