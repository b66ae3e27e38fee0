package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// vmSnapshot lays out a VM mode's snapshot as the qemu and firecracker
// managers do: a record, the overlay disk under data/, the machine under
// vm/. mode "" writes a record from before records named their mode.
func vmSnapshot(t *testing.T, dir, name, mode string) {
	t.Helper()
	root := filepath.Join(dir, name)
	for _, d := range []string{"data", "vm"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"data/overlay.ext4", "vm/state"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("disk image"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := &Snapshot{Name: name, Neuron: "n1", Created: time.Now().UTC(), Files: 1, Bytes: 10, Mode: mode}
	if err := WriteJSON(filepath.Join(root, "snapshot.json"), s, 0o600); err != nil {
		t.Fatal(err)
	}
}

// An overlay directory never receives a VM's disk image: restoring a
// whole-VM snapshot as files fails and leaves the overlay as it was.
func TestRestoreRefusesAVMSnapshot(t *testing.T) {
	for _, tc := range []struct{ name, mode string }{{"recorded", "qemu"}, {"unrecorded", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, overlay := t.TempDir(), t.TempDir()
			vmSnapshot(t, dir, "vm1", tc.mode)
			if err := os.WriteFile(filepath.Join(overlay, "keep.txt"), []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := RestoreSnapshot(dir, "vm1", overlay)
			if !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), "whole-VM snapshot") {
				t.Fatalf("restore of a VM snapshot as files: %v, want ErrSnapshotMismatch", err)
			}
			entries, _ := os.ReadDir(overlay)
			if len(entries) != 1 || entries[0].Name() != "keep.txt" {
				t.Fatalf("the overlay changed: %v", entries)
			}
		})
	}
}

func TestCheckRestore(t *testing.T) {
	dir, overlay := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(overlay, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateSnapshot(dir, "files", "n1", overlay); err != nil {
		t.Fatal(err)
	}
	vmSnapshot(t, dir, "qemu1", "qemu")
	vmSnapshot(t, dir, "old", "")
	read := func(name string) *Snapshot {
		t.Helper()
		s, err := ReadSnapshot(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		snap  string
		mode  string
		whole bool
		fits  bool
	}{
		{"files", "process", false, true},
		{"files", "qemu", true, false},     // files into a VM
		{"qemu1", "process", false, false}, // a VM into files
		{"qemu1", "qemu", true, true},
		{"qemu1", "firecracker", true, false}, // another VM mode's
		{"old", "nsbox", false, false},        // a VM snapshot from before Mode
		{"old", "firecracker", true, true},    // left to the mode to check
	} {
		err := CheckRestore(read(tc.snap), tc.mode, tc.whole)
		if tc.fits != (err == nil) || (err != nil && !errors.Is(err, ErrSnapshotMismatch)) {
			t.Errorf("%s into a %s neuron (whole %v): %v, want fits=%v", tc.snap, tc.mode, tc.whole, err, tc.fits)
		}
	}
	all, err := ListSnapshots(dir)
	if err != nil || len(all) != 3 {
		t.Fatalf("list: %+v %v", all, err)
	}
	kinds := map[string]string{}
	for _, s := range all {
		kinds[s.Name] = s.Kind()
	}
	if kinds["files"] != "files" || kinds["qemu1"] != "vm" || kinds["old"] != "vm" {
		t.Errorf("kinds %v", kinds)
	}
	if _, err := ReadSnapshot(dir, "nope"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Errorf("read of an unknown snapshot: %v", err)
	}
}

func TestRemoveSnapshot(t *testing.T) {
	dir := t.TempDir()
	vmSnapshot(t, dir, "s1", "qemu")
	if err := RemoveSnapshot(dir, "s1"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
	if err := RemoveSnapshot(dir, "s1"); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if err := RemoveSnapshot(dir, "../x"); err == nil || !strings.Contains(err.Error(), "snapshot name") {
		t.Fatalf("a bad name: %v", err)
	}
}

// One snapshot operation at a time per neuron, across lock holders (each
// LockSnapshots is its own open file, as another process's would be): the
// second waits for the first, or gives up when its context ends.
func TestLockSnapshots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots", "n1")
	unlock, err := LockSnapshots(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := LockSnapshots(ctx, dir); err == nil || !strings.Contains(err.Error(), "waiting for another snapshot operation") {
		t.Fatalf("a second holder while the first holds it: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := LockSnapshots(context.Background(), dir)
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the second holder did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second holder still waits after the first let go")
	}
	if all, err := ListSnapshots(dir); err != nil || len(all) != 0 {
		t.Fatalf("the lock file lists as a snapshot: %v %v", all, err)
	}
}

// Host records are the host's: a snapshot neither saves nor restores them,
// so receipts made after a snapshot survive its restore, and a snapshot's
// old records never come back.
func TestSnapshotsLeaveHostRecords(t *testing.T) {
	dir, overlay := t.TempDir(), t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(overlay, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("upper/data.txt", "before")
	write("receipts/r1.json", "{}")
	write(".uid", "2000000001")
	if _, err := CreateSnapshot(dir, "s1", "n1", overlay); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"receipts", ".uid"} {
		if _, err := os.Lstat(filepath.Join(dir, "s1", "data", rel)); err == nil {
			t.Errorf("the snapshot holds the host record %s", rel)
		}
	}
	write("upper/data.txt", "after")
	write("receipts/r2.json", "{}")
	write(".uid", "2000000002")
	if _, err := RestoreSnapshot(dir, "s1", overlay); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(overlay, "upper/data.txt")); string(b) != "before" {
		t.Errorf("data = %q, want the snapshot's", b)
	}
	for rel, want := range map[string]string{"receipts/r2.json": "{}", ".uid": "2000000002"} {
		if b, err := os.ReadFile(filepath.Join(overlay, rel)); err != nil || string(b) != want {
			t.Errorf("%s = %q %v after the restore, want the host's %q", rel, b, err, want)
		}
	}
}

// A sparse file costs a snapshot what it costs the neuron: its holes stay
// holes, in the snapshot and after a restore, and the data between them
// is copied exactly. (A neuron with a 64 MiB disk made 2 GiB of host disk
// per snapshot with truncate -s 2G before.)
func TestSnapshotsKeepHoles(t *testing.T) {
	overlay := t.TempDir()
	f, err := os.Create(filepath.Join(overlay, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 30
	chunks := map[int64]string{0: "head", 300 << 20: "middle", size - 5: "tail\n"}
	for off, s := range chunks {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	dir := t.TempDir()
	snap, err := CreateSnapshot(dir, "s", "n", overlay)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "s", "data", "sparse")
	check := func(path string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != size || st.Blocks*512 > 16<<20 {
			t.Fatalf("%s: %d bytes long, %d allocated: want 1 GiB long and its holes kept", path, st.Size, st.Blocks*512)
		}
		g, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for off, s := range chunks {
			buf := make([]byte, len(s))
			if _, err := g.ReadAt(buf, off); err != nil || string(buf) != s {
				t.Fatalf("%s at %d: %q %v, want %q", path, off, buf, err, s)
			}
		}
	}
	check(copied)
	if snap.Bytes > 16<<20 {
		t.Errorf("the snapshot says it holds %d bytes of a file of 15 bytes of data", snap.Bytes)
	}
	into := t.TempDir()
	if _, err := RestoreSnapshot(dir, "s", into); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(into, "sparse"))
}

// A copy that passes its limit fails as Capacity and leaves nothing.
func TestSnapshotLimit(t *testing.T) {
	overlay := t.TempDir()
	if err := os.WriteFile(filepath.Join(overlay, "big"), bytes.Repeat([]byte("x"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := CreateSnapshotWithin(dir, "s", "n", overlay, 1<<20)
	if !errors.Is(err, ErrSnapshotTooLarge) || !errdefs.IsCapacity(err) {
		t.Fatalf("a 3 MiB copy within 1 MiB: %v, want ErrSnapshotTooLarge", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a refused snapshot left %v", ents)
	}
	if _, err := CreateSnapshotWithin(dir, "s", "n", overlay, 4<<20); err != nil {
		t.Fatalf("within its limit: %v", err)
	}
}
