package logging

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// tailPoll is how often Tail looks for growth and rotation.
var tailPoll = 200 * time.Millisecond

// Tail copies the log file at path to w. With follow it then keeps
// copying what is appended until ctx ends (and returns nil then), across
// rotations: when the file at path is replaced by a new one, it finishes
// the old file and goes on from the start of the new; a file truncated in
// place is read again from its start.
func Tail(ctx context.Context, path string, w io.Writer, follow bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the log: %w", err)
	}
	defer func() { f.Close() }() // read-only: closing cannot lose data
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("copying %s: %w", path, err)
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(tailPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("copying %s: %w", path, err)
		}
		now, err := os.Stat(path)
		if err != nil {
			continue // between a rotation's rename and the new file: look again
		}
		cur, err := f.Stat()
		if err != nil {
			return fmt.Errorf("reading the log: %w", err)
		}
		if os.SameFile(cur, now) {
			if off, err := f.Seek(0, io.SeekCurrent); err == nil && now.Size() < off {
				if _, err := f.Seek(0, io.SeekStart); err != nil {
					return fmt.Errorf("reading the log: %w", err)
				}
			}
			continue
		}
		next, err := os.Open(path)
		if err != nil {
			continue // gone again; the next tick looks again
		}
		// What was written to the old file before it moved aside.
		_, err = io.Copy(w, f)
		f.Close() // read-only
		f = next
		if err != nil {
			return fmt.Errorf("copying %s: %w", path, err)
		}
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("copying %s: %w", path, err)
		}
	}
}
