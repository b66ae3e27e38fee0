package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol"
)

// qmp is a client of QEMU's machine protocol (docs/interop/qmp-spec):
// one JSON object per line; a greeting, then qmp_capabilities, then
// commands each answered by "return" or "error", with asynchronous
// "event"s in between, which this client skips.
type qmp struct {
	conn net.Conn
	r    *bufio.Reader
}

// QMPError is an error QEMU answered with.
type QMPError struct {
	Command, Class, Desc string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qemu: %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// dialQMP connects to the QMP socket at path and negotiates capabilities.
// QMP serves one client at a time: another one waits (until ctx ends).
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	c, err := protocol.DialUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("qemu: the QMP socket: %w", err)
	}
	q := &qmp{conn: c, r: bufio.NewReaderSize(c, 64<<10)}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	var greeting struct {
		QMP *struct {
			Version json.RawMessage `json:"version"`
		} `json:"QMP"`
	}
	if err := q.readLine(&greeting); err != nil || greeting.QMP == nil {
		c.Close()
		if err == nil {
			err = errors.New("no QMP greeting")
		}
		return nil, fmt.Errorf("qemu: QMP: %w", ctxErr(ctx, err))
	}
	if err := q.run(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) Close() error { return q.conn.Close() }

func (q *qmp) readLine(v any) error {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

// run executes cmd with args and decodes its return value into out (nil:
// ignored).
func (q *qmp) run(ctx context.Context, cmd string, args, out any) error {
	stop := context.AfterFunc(ctx, func() { q.conn.SetDeadline(time.Now()) })
	defer stop()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("qemu: %s: %w", cmd, ctxErr(ctx, err))
	}
	return q.result(ctx, cmd, out)
}

// result reads the answer to cmd, skipping events.
func (q *qmp) result(ctx context.Context, cmd string, out any) error {
	for {
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := q.readLine(&resp); err != nil {
			return fmt.Errorf("qemu: %s: %w", cmd, ctxErr(ctx, err))
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return &QMPError{Command: cmd, Class: resp.Error.Class, Desc: resp.Error.Desc}
		case resp.Return == nil:
			return fmt.Errorf("qemu: %s: an answer with neither return nor error", cmd)
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(resp.Return, out); err != nil {
			return fmt.Errorf("qemu: %s: %w", cmd, err)
		}
		return nil
	}
}

// ctxErr prefers the context's reason over the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// migrationStatus is query-migrate's answer, as far as it is read here.
type migrationStatus struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
	} `json:"ram"`
}

// waitMigration polls query-migrate until the migration completed or
// failed.
func (q *qmp) waitMigration(ctx context.Context) (*migrationStatus, error) {
	for {
		var st migrationStatus
		if err := q.run(ctx, "query-migrate", nil, &st); err != nil {
			return nil, err
		}
		switch st.Status {
		case "completed":
			return &st, nil
		case "failed", "cancelled":
			return nil, fmt.Errorf("qemu: migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sendFD hands f to QEMU under name (getfd: the descriptor travels with
// the command, SCM_RIGHTS on the QMP socket).
func (q *qmp) sendFD(ctx context.Context, name string, f *os.File) error {
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("qemu: QMP is not on a Unix socket: no descriptor can be passed")
	}
	stop := context.AfterFunc(ctx, func() { q.conn.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]string{"fdname": name}})
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("qemu: getfd: %w", ctxErr(ctx, err))
	}
	return q.result(ctx, "getfd", nil)
}

// saveState writes the stopped VM's state (RAM and devices) to f through
// a migration to a descriptor, unthrottled. A descriptor rather than
// QEMU 7's exec: URI: no shell runs, QEMU's seccomp sandbox denies it any
// process, and QEMU writes the file itself, without a pipe.
func (q *qmp) saveState(ctx context.Context, f *os.File) (*migrationStatus, error) {
	if err := q.run(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}, nil); err != nil {
		return nil, err
	}
	if err := q.sendFD(ctx, "state", f); err != nil {
		return nil, err
	}
	if err := q.run(ctx, "migrate", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return nil, err
	}
	return q.waitMigration(ctx)
}

// loadState reads a state saveState wrote into a VM started with
// -incoming defer; the VM stays paused (cont runs it).
func (q *qmp) loadState(ctx context.Context, f *os.File) error {
	if err := q.sendFD(ctx, "state", f); err != nil {
		return err
	}
	if err := q.run(ctx, "migrate-incoming", map[string]any{"uri": "fd:state"}, nil); err != nil {
		return err
	}
	_, err := q.waitMigration(ctx)
	return err
}
