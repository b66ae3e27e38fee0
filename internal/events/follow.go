package events

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/store"
)

// pollEvery bounds how late a follower sees an append when the directory
// watch misses it (or cannot be made).
const pollEvery = time.Second

// Follow calls fn for every event that passes f: those recorded, oldest
// first, then each new one as it is appended by any process, until ctx
// ends (it returns nil then) or fn fails (it returns fn's error).
func (l *Log) Follow(ctx context.Context, f Filter, fn func(Event) error) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	wake, stop := l.watch()
	defer stop()
	files, err := l.openFrom(nil)
	if err != nil {
		return err
	}
	var cur *os.File // the newest file, followed
	var off int64
	defer func() {
		for _, file := range files {
			file.Close()
		}
		if cur != nil {
			cur.Close()
		}
	}()
	for {
		// Files rotated before they were followed are whole: read each,
		// and follow the newest.
		for len(files) > 0 {
			file := files[0]
			files = files[1:]
			n, err := readLines(file, 0, f, fn)
			if len(files) == 0 {
				cur, off = file, n
			} else {
				file.Close()
			}
			if err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(pollEvery):
		}
		if cur != nil {
			if off, err = readLines(cur, off, f, fn); err != nil {
				return err
			}
		}
		if !rotated(cur, l.path(0)) {
			continue
		}
		if files, err = l.openFrom(cur); err != nil {
			return err
		}
		if cur != nil {
			// What was appended to cur before it moved is read now; nothing
			// is appended to it after.
			_, err = readLines(cur, off, f, fn)
			cur.Close()
			cur = nil
			if err != nil {
				return err
			}
		}
	}
}

// rotated reports whether the file at path is not cur any more (cur nil:
// whether a file is there now).
func rotated(cur *os.File, path string) bool {
	st, err := os.Stat(path)
	if cur == nil || err != nil {
		return err == nil || cur != nil
	}
	cst, err := cur.Stat()
	return err != nil || !os.SameFile(st, cst)
}

// openFrom opens, under the log's lock so no rotation moves them meanwhile,
// the files newer than after (all of them when after is nil, or when after
// was rotated away altogether), oldest first.
func (l *Log) openFrom(after *os.File) ([]*os.File, error) {
	unlock, err := l.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var ast fs.FileInfo
	if after != nil {
		ast, _ = after.Stat()
	}
	var out []*os.File
	for n := l.Keep; n >= 0; n-- {
		file, err := os.Open(l.path(n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, fmt.Errorf("event log: %w", err)
		}
		if st, err := file.Stat(); err == nil && ast != nil && os.SameFile(st, ast) {
			// after itself: only the files made later are wanted.
			file.Close()
			for _, f := range out {
				f.Close()
			}
			out = nil
			continue
		}
		out = append(out, file)
	}
	return out, nil
}

// watch returns a channel that is sent to when the log's directory
// changes, and a function that stops the watch.
func (l *Log) watch() (<-chan struct{}, func()) {
	return store.Watch(l.dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO)
}
