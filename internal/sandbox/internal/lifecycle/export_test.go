package lifecycle

import "testing"

// An import onto a disk of its own stages its data on the overlays'
// filesystem and then copies it into the disk's image, on that same
// filesystem: it may take half the free room, and no more than the disk.
func TestImportRoom(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct{ room, disk, want int64 }{
		{10 * gib, 0, 10 * gib},      // no disk: the data is here once
		{10 * gib, 8 * gib, 5 * gib}, // here twice at its peak
		{10 * gib, 2 * gib, 2 * gib}, // never more than the disk holds
		{1, 8 * gib, 0},
	} {
		if got := importRoom(tc.room, tc.disk); got != tc.want {
			t.Errorf("importRoom(%d, %d) = %d, want %d", tc.room, tc.disk, got, tc.want)
		}
	}
}
