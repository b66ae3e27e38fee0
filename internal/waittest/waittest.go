// Package waittest lets a test wait for a condition instead of for a
// time. A test that sleeps a fixed while and then looks races the
// machine's load: on a busy machine the thing it waits for has not
// happened yet. A test that polls the condition up to a generous deadline
// goes on as soon as it holds and fails only when it never does, so its
// deadline can be long without slowing the test down.
//
// It is imported by tests only; the deadlines are bounds on a hang, not
// measurements (timings belong in Benchmark functions).
package waittest

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// Until polls cond until it returns true or d passes, and returns its last
// answer. Use it where the caller reports the failure itself (with the
// state it saw); For reports it for you.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return cond()
		}
		time.Sleep(pause) // between two looks at the condition
		pause = min(2*pause, 50*time.Millisecond)
	}
	return true
}

// For polls cond until it returns true; if it still does not after d, it
// fails t with "timed out after d waiting for what". Like t.Fatal it must
// be called from the test's goroutine.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Recv waits up to d for a value from ch, or for ch to be closed, and
// returns what it received (the zero value once closed); if neither
// happens it fails t with what it was waiting for. It is how a test checks
// that something does not block: the deadline is the failure, not a
// timing bound the test asserts.
func Recv[T any](t testing.TB, d time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	var zero T // not reached: t.Fatalf does not return
	return zero
}

// Parked reports whether a goroutine is blocked (waiting on a channel, a
// lock, I/O: not running) with fn on its stack, fn as a stack trace
// names it ("client.(*Stream).Next"). It is the condition for "while f
// waits": Until(d, func() bool { return Parked("pkg.f") }) before the
// event f must see while it waits.
func Parked(fn string) bool {
	for _, g := range goroutines() {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if !bytes.Contains(header, []byte("[running]")) && !bytes.Contains(header, []byte("[runnable]")) && bytes.Contains(g, []byte(fn+"(")) {
			return true
		}
	}
	return false
}

// Goroutines counts the goroutines with fn on their stack, whatever they
// are doing ("net/http.(*conn).serve": the server's connections not yet
// ended).
func Goroutines(fn string) int {
	n := 0
	for _, g := range goroutines() {
		if bytes.Contains(g, []byte(fn+"(")) {
			n++
		}
	}
	return n
}

// goroutines returns the stack of every goroutine, one trace each.
func goroutines() [][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Split(buf[:n], []byte("\n\n"))
		}
		buf = make([]byte, 2*len(buf))
	}
}
