//go:build linux

package agent

import (
	"errors"
	"os"
	"testing"
	"time"
)

// A read whose deadline fired before the reader looked again reports a
// timeout with the pipe full (what lost an exec's output on a busy
// machine, found by the API's soak); rest takes what the pipe holds.
func TestDrainerTakesWhatALateReadMissed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Write([]byte("42\n"))
	defer w.Close() // something left behind holds it open: no EOF
	d := newDrainer(r)
	d.done.Store(true)
	r.SetReadDeadline(time.Now().Add(-time.Second)) // it fired already
	buf := make([]byte, 64)
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %v (the hazard this guards is gone?)", err)
	}
	var got []byte
	if cut := d.rest(buf, func(b []byte) { got = append(got, b...) }, 0); cut || string(got) != "42\n" {
		t.Fatalf("rest took %q (cut %v)", got, cut)
	}
}
