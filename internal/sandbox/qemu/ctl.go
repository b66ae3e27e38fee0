package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// ctlSocket is where QEMU listens for the control port (cortex.ctl).
func ctlSocket(dir string) string { return filepath.Join(dir, "ctl.sock") }

// qmpSocket is where QEMU listens for QMP.
func qmpSocket(dir string) string { return filepath.Join(dir, "qmp.sock") }

// ctlConn is a connection to the guest's control port, which serves one
// host at a time.
type ctlConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialCtl(ctx context.Context, dir string) (*ctlConn, error) {
	c, err := protocol.DialUnix(ctx, ctlSocket(dir))
	if err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	return &ctlConn{c: c, r: bufio.NewReader(c)}, nil
}

func (cc *ctlConn) Close() error { return cc.c.Close() }

// do sends one request and returns the guest's answer.
func (cc *ctlConn) do(ctx context.Context, req *boot.CtlRequest) (*boot.CtlReply, error) {
	stop := context.AfterFunc(ctx, func() { cc.c.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := cc.c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control port: %w", ctxErr(ctx, err))
	}
	line, err := boot.ReadCtlLine(cc.r)
	if err != nil {
		return nil, fmt.Errorf("control port: no answer to %s: %w", req.Op, ctxErr(ctx, err))
	}
	var reply boot.CtlReply
	if err := json.Unmarshal(line, &reply); err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	if !reply.OK {
		return &reply, errors.New("control port: the guest refused " + req.Op + ": " + reply.Error)
	}
	return &reply, nil
}

// control sends one request on its own connection.
func control(ctx context.Context, dir string, req *boot.CtlRequest) (*boot.CtlReply, error) {
	cc, err := dialCtl(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	return cc.do(ctx, req)
}

// A guest's clock is set again until it is within maxClockSkew of the
// host's (give or take half a round trip, which no exchange can tell
// apart), in at most maxClockTries exchanges.
const (
	maxClockSkew  = 20 * time.Millisecond
	maxClockTries = 5
)

// clockTimeout bounds setting a booted guest's clock.
const clockTimeout = 10 * time.Second

// setClock sets the clock of the guest whose channel directory is dir.
func setClock(ctx context.Context, dir string) error {
	cc, err := dialCtl(ctx, dir)
	if err != nil {
		return err
	}
	defer cc.Close()
	return cc.setClock(ctx)
}

// setClock sets the guest's clock (syncClock); an offset still past a
// second is an error.
func (cc *ctlConn) setClock(ctx context.Context) error {
	offset, err := cc.syncClock(ctx)
	if err != nil {
		return err
	}
	if offset.Abs() > time.Second {
		return fmt.Errorf("the guest's clock stays %s off", offset)
	}
	return nil
}

// syncClock measures the guest clock's offset from the host's the way NTP
// does (a ping: the guest's time against the middle of the round trip)
// and, while it is off, sets it, ahead by half a round trip for the
// request's own travel. It returns the last offset measured.
//
// A guest just resumed under TCG reads its first requests late (its code
// is translated anew) and then answers at once, so such a round trip is
// long and lopsided: its middle says the clock is ahead when it is not.
// A clock is set only when the guest's time lies outside the round trip
// itself (widened by maxClockSkew); one inside it, but measured by a
// round trip too long to tell, is measured again.
func (cc *ctlConn) syncClock(ctx context.Context) (time.Duration, error) {
	var offset time.Duration
	for i := 0; i < maxClockTries; i++ {
		t0 := time.Now()
		reply, err := cc.do(ctx, &boot.CtlRequest{Op: boot.OpPing})
		if err != nil {
			return 0, err
		}
		rtt := time.Since(t0)
		offset = reply.Time.Sub(t0.Add(rtt / 2))
		switch {
		case offset.Abs() <= maxClockSkew:
			return offset, nil
		case offset.Abs() <= maxClockSkew+rtt/2:
			continue // within the round trip: too long a one to tell
		}
		if _, err := cc.do(ctx, &boot.CtlRequest{Op: boot.OpClock, Time: time.Now().Add(rtt / 2)}); err != nil {
			return 0, err
		}
	}
	return offset, nil
}
