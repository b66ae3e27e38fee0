package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/ids"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/store"
)

// reserve is the free space kept where neurons are, whatever an import or
// a fork would take: 5% of the filesystem, at least this.
const reserve = 1 << 30

// statRoom is the room where dir is (Reserved not counted).
func statRoom(dir string) (Room, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return Room{}, err
	}
	r := Room{
		Free:   int64(fs.Bavail)*fs.Bsize - max(reserve, int64(fs.Blocks)*fs.Bsize/20),
		Shares: fs.Type == unix.BTRFS_SUPER_MAGIC || fs.Type == unix.XFS_SUPER_MAGIC,
		Inodes: -1,
	}
	if fs.Files > 0 && fs.Files < math.MaxInt64 { // btrfs counts none: it has no fixed number
		// The inodes free, keeping 5% and at least 10,000 (as the
		// blocks' reserve), and what the filesystem made one for.
		r.Inodes = max(int64(min(fs.Ffree, math.MaxInt64))-max(int64(fs.Files)/20, 10000), 0)
		r.BytesPerInode = int64(fs.Blocks) * fs.Bsize / int64(fs.Files)
	}
	return r, nil
}

// roomLockName, in the overlays' directory, is the lock under which an
// import or a fork measures the room and claims its ids, recording what
// it reserves of the room in their .forking records.
const roomLockName = ".room.lock"

// Room is the free room where neurons are kept (the reserve kept), less
// what imports and forks in flight have reserved and not yet written.
type Room struct {
	Free     int64 // what the filesystem has free, the reserve kept
	Reserved int64 // what imports and forks in flight have reserved
	Shares   bool  // the filesystem shares copied data (reflinks)
	Inodes   int64 // the inodes free, the reserve kept (-1: no fixed number)
	// BytesPerInode is the filesystem's size over its inodes (0: no fixed
	// number): what an import charges each entry at least, so that the
	// room it is granted bounds its inodes too.
	BytesPerInode int64
}

// Left is the room not reserved: at most Free, and 0 where the
// reservations take it all.
func (r Room) Left() int64 {
	if r.Free <= 0 || r.Reserved >= r.Free {
		return min(r.Free, 0)
	}
	return r.Free - r.Reserved
}

// withRoom runs claim with the room as it is now (less what the imports
// and forks in flight reserved, but except's own), under the room lock
// (across processes and modes sharing the overlays' directory): claim
// claims the ids it makes, or renews an import's reservation, each
// .forking record saying what it reserves, so that the next import or
// fork measures the room less that. An import's data streams in for as
// long as its upload takes, so nothing waits for it: the lock is held
// only while the room is measured and the records written. A
// reservation ends with its record: when the data is in place (its space
// then counted as used), or when its process is gone (a crash: the
// partial data is on disk, counted as used).
func (m *Manager) withRoom(ctx context.Context, except string, claim func(Room) error) error {
	if err := os.MkdirAll(m.lay.Overlays, 0o700); err != nil {
		return err
	}
	unlock, err := store.NewLock(filepath.Join(m.lay.Overlays, roomLockName)).Wait(ctx, 10*time.Millisecond)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("waiting to measure the room where neurons are kept (%s): %w", m.lay.Overlays, context.Cause(ctx))
		}
		return err
	}
	defer unlock()
	r, err := statRoom(m.lay.Overlays)
	if err != nil {
		return err
	}
	r.Reserved = m.reserved(except)
	return claim(r)
}

// reserved sums what the imports and forks in flight reserved (but
// neuron except's own: its reservation being renewed): the .forking
// records of live processes in the overlays. Each is read as a record
// (bounded, no link followed); one that is not is no reservation.
func (m *Manager) reserved(except string) int64 {
	entries, err := os.ReadDir(m.lay.Overlays)
	if err != nil {
		return 0
	}
	var sum int64
	for _, e := range entries {
		if !e.IsDir() || e.Name() == except || ids.Validate(e.Name()) != nil {
			continue
		}
		b, err := store.ReadRecord(m.forkingFile(e.Name()), 4096)
		if err != nil {
			continue
		}
		var f forkRecord
		if json.Unmarshal(b, &f) != nil || f.Reserve <= 0 || !store.Alive(f.PID, f.PIDStart) {
			continue
		}
		sum = min(sum, math.MaxInt64-f.Reserve) + f.Reserve // saturating
	}
	return sum
}

// describe says what room there is, for a CAPACITY error.
func (r Room) describe(where string) string {
	s := fmt.Sprintf("%s has room for %d MiB (keeping 5%% and at least 1 GiB free)", where, max(r.Free, 0)>>20)
	if r.Reserved > 0 {
		s += fmt.Sprintf(", %d MiB of it reserved by imports and forks in flight", r.Reserved>>20)
	}
	return s
}

// importStep is how far ahead of its data an import reserves room: it
// asks again each time its data passes what it was granted.
const importStep = 64 << 20

// An importRoom is an import's share of the room, reserved as its data
// arrives (archive.ExtractOptions.Grant): a step ahead of what it has
// written, while the room left (the others' reservations taken off)
// holds it. So a slow or stalled upload reserves a step, not the room it
// might come to fill, and an import may fill the room (the reserve kept)
// when nothing else is in flight.
type importRoom struct {
	m   *Manager
	id  string
	rec forkRecord // its .forking record, whose Reserve each grant renews
	// copies is how many times its data is on the filesystem at its
	// peak: twice onto a disk of its own (staged here, then copied into
	// the disk's image, on this filesystem too), else once.
	copies int64
}

// grant lets the import write need bytes and up to a step more in all,
// within the room left, and reserves what it has not written of that
// (and, with a disk of its own, the copy of all of it).
func (r *importRoom) grant(ctx context.Context) func(written, need int64) (int64, error) {
	return func(written, need int64) (int64, error) {
		var upTo int64
		err := r.m.withRoom(ctx, r.id, func(room Room) error {
			upTo = r.upTo(room.Left(), written, need)
			if upTo < need {
				return &sandbox.CapacityError{Reason: fmt.Sprintf("the archive's data passes the room there is for it: %d MiB written, %d MiB more to come at least; %s",
					written>>20, (need-written+(1<<20)-1)>>20, room.describe(r.m.lay.Overlays))}
			}
			r.rec.Reserve = r.reserve(written, upTo)
			return store.WriteJSON(r.m.forkingFile(r.id), &r.rec, 0o600)
		})
		return upTo, err
	}
}

// reserve is what an import that wrote written bytes and may write upTo
// in all has yet to take of the room: the rest of upTo, and with a disk
// of its own the copy of all of it into the disk's image.
func (r *importRoom) reserve(written, upTo int64) int64 {
	return upTo - written + (r.copies-1)*upTo
}

// upTo is how much an import that wrote written bytes and needs need in
// all may write in all: a step past need, but no more than left (the
// room less the others' reservations) holds (reserve(upTo) <= left).
// Less than need: there is no room for it. (What a disk of its own
// holds bounds the data alone: ExtractOptions.MaxBytes.)
func (r *importRoom) upTo(left, written, need int64) int64 {
	fits := written + max(left, 0) // reserve(fits) == left with one copy
	if r.copies > 1 {
		fits = (written + max(left, 0)) / r.copies
	}
	return min(need+importStep, fits)
}
