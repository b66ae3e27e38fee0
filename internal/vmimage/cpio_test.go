package vmimage

import (
	"bytes"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// newcEntry is one record read back from a newc archive.
type newcEntry struct {
	name         string
	mode         uint32
	data         []byte
	major, minor uint32
}

// readNewc parses a newc archive strictly: magic, hex fields, and the
// four-byte alignment of names and data.
func readNewc(t *testing.T, b []byte) []newcEntry {
	t.Helper()
	var out []newcEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("field %d at %d: %v", i, off, err)
		}
		return uint32(v)
	}
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		mode, size, namesize := field(1), field(6), field(11)
		major, minor := field(9), field(10)
		nameEnd := off + 110 + int(namesize)
		name := string(b[off+110 : nameEnd-1])
		if b[nameEnd-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", name)
		}
		dataAt := (nameEnd + 3) &^ 3
		end := dataAt + int(size)
		if name == "TRAILER!!!" {
			if end%4 != 0 {
				t.Fatalf("archive ends unaligned at %d", end)
			}
			return out
		}
		out = append(out, newcEntry{name: name, mode: mode, data: b[dataAt:end], major: major, minor: minor})
		off = (end + 3) &^ 3
	}
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewCPIOWriter(&buf)
	for _, err := range []error{
		w.Dir("dev", 0o755),
		w.CharDev("dev/console", 0o600, 5, 1),
		w.File("/init", 0o755, []byte("#!/bin/sh\n")),
		w.File("odd", 0o644, []byte("12345")), // unaligned data
		w.Symlink("link", "init"),
		w.File("empty", 0o600, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	want := []newcEntry{
		{name: "dev", mode: 0o040755},
		{name: "dev/console", mode: 0o020600, major: 5, minor: 1},
		{name: "init", mode: 0o100755, data: []byte("#!/bin/sh\n")},
		{name: "odd", mode: 0o100644, data: []byte("12345")},
		{name: "link", mode: 0o120777, data: []byte("init")},
		{name: "empty", mode: 0o100600},
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.name != w.name || g.mode != w.mode || !bytes.Equal(g.data, w.data) || g.major != w.major || g.minor != w.minor {
			t.Errorf("entry %d: %+v, want %+v", i, g, w)
		}
	}
	// Deterministic: the same input gives the same bytes.
	var again bytes.Buffer
	w2 := NewCPIOWriter(&again)
	w2.Dir("dev", 0o755)
	w2.CharDev("dev/console", 0o600, 5, 1)
	w2.File("/init", 0o755, []byte("#!/bin/sh\n"))
	w2.File("odd", 0o644, []byte("12345"))
	w2.Symlink("link", "init")
	w2.File("empty", 0o600, nil)
	w2.Close()
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("the same entries gave different archives")
	}
	// The system's cpio, where installed, reads it too.
	if cpio, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command(cpio, "-it", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil || strings.Fields(string(out))[2] != "init" {
			t.Fatalf("cpio -it: %q %v", out, err)
		}
	}
}

func TestCPIOWriterRefuses(t *testing.T) {
	w := NewCPIOWriter(io.Discard)
	for _, name := range []string{"", "../etc/passwd", "a/../../b", "a/..", "x\x00y"} {
		if err := w.File(name, 0o644, nil); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
	w.Close()
	if err := w.File("late", 0o644, nil); err == nil {
		t.Error("a write after close was accepted")
	}
}
