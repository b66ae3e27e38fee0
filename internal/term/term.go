// Package term is the terminal broker of the host: attaching a person's
// terminal to a terminal that lives in a neuron (seed 003's ctxterm). A
// terminal outlives its clients; any number watch it, one at a time
// writes (a lock on the host), and a newcomer sees its recent output
// replayed first. Detaching (Ctrl-P Ctrl-Q) leaves it running.
package term

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// DetachKeys end an attachment and leave the terminal running: Ctrl-P
// Ctrl-Q, as docker attach has them.
var DetachKeys = []byte{0x10, 0x11}

// Session is one terminal as an attachment uses it: through the channel,
// or through the API's WebSocket.
type Session interface {
	// Follow sends the terminal's output from offset to out until it
	// exits (returning its state) or ctx ends.
	Follow(ctx context.Context, offset int64, out func([]byte) error) (*protocol.ProcInfo, error)
	// Write types p into the terminal.
	Write(ctx context.Context, p []byte) error
	// Resize sets its size.
	Resize(ctx context.Context, cols, rows int) error
}

// Options shape an attachment.
type Options struct {
	In  io.Reader // the person's keys; nil: none
	Out io.Writer // where the terminal's output goes
	// Watch attaches read-only: keys other than the detach keys (or
	// Ctrl-C) are not sent.
	Watch bool
	// Offset is where the replay starts (0: all the terminal still holds).
	Offset int64
}

// Result is how an attachment ended.
type Result struct {
	// Detached: the person left; the terminal runs on.
	Detached bool
	// Exit is the terminal's state when its process exited.
	Exit *protocol.ProcInfo
}

// ErrDetached ends Follow when the person detaches.
var errDetached = errors.New("detached")

// Attach joins the person's terminal to s until the terminal exits, the
// person detaches, or ctx ends. Resizing is the caller's (it knows when
// the person's terminal changes).
func Attach(ctx context.Context, s Session, o Options) (*Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if o.In != nil {
		go func() {
			// Ends with the person's input, or with the attachment (a read
			// blocked on a terminal returns at its next key).
			var d detector
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				n, err := o.In.Read(buf)
				if n > 0 {
					keys, detach := d.scan(buf[:n], o.Watch)
					if len(keys) > 0 && !o.Watch {
						if s.Write(ctx, keys) != nil {
							return
						}
					}
					if detach {
						cancel(errDetached)
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	info, err := s.Follow(ctx, o.Offset, func(p []byte) error {
		_, err := o.Out.Write(p)
		return err
	})
	if errors.Is(context.Cause(ctx), errDetached) {
		return &Result{Detached: true}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Result{Exit: info}, nil
}

// detector finds the detach keys in a stream of keys, across reads.
type detector struct{ pending bool }

// scan returns the keys to forward and whether the person detached. A
// watcher also leaves with Ctrl-C.
func (d *detector) scan(p []byte, watch bool) ([]byte, bool) {
	out := make([]byte, 0, len(p)+1)
	for _, b := range p {
		switch {
		case d.pending && b == DetachKeys[1]:
			return out, true
		case d.pending:
			out = append(out, DetachKeys[0]) // not a detach: Ctrl-P was a key
			d.pending = false
		}
		if b == DetachKeys[0] {
			d.pending = true
			continue
		}
		if watch && b == 0x03 {
			return out, true
		}
		out = append(out, b)
	}
	return out, false
}

// Find returns the terminal named ref (its id, or its pid) among list.
func Find(list []protocol.ProcInfo, ref string) (*protocol.ProcInfo, error) {
	pid, _ := strconv.Atoi(ref)
	var names []string
	for i := range list {
		p := &list[i]
		if !p.Pty {
			continue
		}
		if p.ID == ref || (pid > 0 && p.PID == pid) {
			return p, nil
		}
		names = append(names, p.ID)
	}
	hint := "it has none"
	if len(names) > 0 {
		hint = "it has " + strings.Join(names, ", ")
	}
	return nil, protocol.Errorf(protocol.CodeNotFound, "no terminal %q in this neuron (%s; nsys-cortex term list ID)", ref, hint)
}

// WriterLock is the one-writer rule: held by the attachment that types
// into a terminal, on the host, across processes (a flock, released by the
// kernel if its holder dies).
type WriterLock struct{ f *os.File }

// LockWriter takes the writer lock of terminal id of neuron in dir.
func LockWriter(dir, neuron, id string) (*WriterLock, error) {
	path := filepath.Join(dir, neuron, id+".writer")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 64))
		f.Close()
		who := ""
		if h := string(bytes.TrimSpace(holder)); h != "" {
			who = " (pid " + h + ")"
		}
		return nil, &BusyError{Terminal: id, Holder: who}
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &WriterLock{f: f}, nil
}

// Release gives the lock up.
func (l *WriterLock) Release() {
	if l != nil && l.f != nil {
		l.f.Truncate(0)
		l.f.Close()
		l.f = nil
	}
}

// BusyError: another attachment writes to the terminal.
type BusyError struct{ Terminal, Holder string }

// Class is errdefs.Locked: another holder has the writer lock (the API
// answers OWNED_ELSEWHERE).
func (e *BusyError) Class() errdefs.Class { return errdefs.Locked }

func (e *BusyError) Error() string {
	return fmt.Sprintf("terminal %s already has a writer%s: watch it with attach --watch, or detach the other one first", e.Terminal, e.Holder)
}
