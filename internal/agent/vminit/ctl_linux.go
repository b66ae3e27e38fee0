package vminit

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// serveCtl serves the control port until the machine goes down (its
// vsock twin, serveCtlVsock, starts once vsock's modules are loaded).
func (g *guest) serveCtl() {
	dev, err := portDevice(boot.CtlPort, 5*time.Second)
	if err != nil {
		return // no control port (Firecracker): vsock only
	}
	f, err := openPort(dev)
	if err != nil {
		g.logf("control port: %v", err)
		return
	}
	defer f.Close()
	for {
		if err := waitHost(f); err != nil {
			g.logf("control port: %v", err)
			return
		}
		g.ctlSession(f)
	}
}

func (g *guest) serveCtlVsock(port uint32) {
	ln, err := listenVsock(port)
	if err != nil {
		return // no vsock device: the virtio port serves
	}
	defer ln.Close()
	for {
		c, err := acceptVsock(ln)
		if err != nil {
			g.logf("control vsock: %v", err)
			return
		}
		go func() {
			defer c.Close()
			g.ctlSession(c)
		}()
	}
}

// ctlSession answers requests, one JSON line each, until EOF.
func (g *guest) ctlSession(rw io.ReadWriter) {
	sc := bufio.NewScanner(rw)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		var req boot.CtlRequest
		reply := boot.CtlReply{OK: true}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			reply = boot.CtlReply{Error: "bad request: " + err.Error()}
		} else if err := g.control(&req); err != nil {
			reply = boot.CtlReply{Error: err.Error()}
		}
		reply.Time = time.Now().UTC() // UTC: no time zone file to load
		b, _ := json.Marshal(&reply)
		if _, err := rw.Write(append(b, '\n')); err != nil {
			return
		}
		switch {
		case reply.OK && req.Op == boot.OpPoweroff:
			g.requestStop("the host asked to power off")
		case reply.OK && req.Op == boot.OpRestored:
			// Logged once the host has its answer: the serial console is
			// slow, and under TCG its code is translated anew.
			g.logf("restored from a snapshot: clock set, RNG reseeded, sessions ended")
		}
	}
}

// primeCtl has the JSON package build its encoders and decoders for the
// control messages at boot: a snapshot then holds them, and the first
// answer after a restore does not build them again (under TCG every
// first run of code costs its translation, and the host waits on that
// answer).
func primeCtl() {
	b, _ := json.Marshal(&boot.CtlRequest{Op: boot.OpPing, Time: time.Now().UTC(), Seed: []byte{0}})
	var req boot.CtlRequest
	json.Unmarshal(b, &req)
	b, _ = json.Marshal(&boot.CtlReply{OK: true, Error: "-", Time: req.Time})
	var reply boot.CtlReply
	json.Unmarshal(b, &reply)
}

func (g *guest) control(req *boot.CtlRequest) error {
	switch req.Op {
	case boot.OpPing, boot.OpPoweroff:
		return nil
	case boot.OpClock:
		if req.Time.IsZero() {
			return errors.New("clock: needs the time")
		}
		return setClock(req.Time)
	case boot.OpRestored:
		if req.Time.IsZero() || len(req.Seed) < 32 {
			return errors.New("restored: needs the time and a seed of at least 32 bytes")
		}
		t := req.Time
		if req.Advance > 0 {
			t = time.Now().Add(req.Advance)
		}
		if err := setClock(t); err != nil {
			return err
		}
		if err := reseed(req.Seed); err != nil {
			return err
		}
		if req.Rebind != nil {
			if err := g.rebindAgent(req.Rebind); err != nil {
				return err
			}
		}
		g.bridge.reset()
		if g.tunnel != nil {
			g.tunnel.Reset() // the host's end is a new process
		}
		return nil
	}
	return fmt.Errorf("unknown operation %q", req.Op)
}

func setClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("setting the clock: %w", err)
	}
	return nil
}

// Ioctls of random(4).
const (
	rndAddEntropy = 0x40085203 // _IOW('R', 0x03, int[2])
	rndReseedCRNG = 0x5207     // _IO('R', 0x07)
)

// reseed mixes seed into the input pool, credited as entropy, and makes
// the kernel's CRNG reseed from it at once: a restored snapshot would
// otherwise hand out the random numbers every other restore of it does.
func reseed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseeding: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+(len(seed)+3)/4*4)
	binary.NativeEndian.PutUint32(buf[0:], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(buf[4:], uint32(len(seed)))
	copy(buf[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fmt.Errorf("reseeding: RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("reseeding: RNDRESEEDCRNG: %w", e)
	}
	return nil
}

// rebindTimeout bounds the agent's answer to a rebind.
const rebindTimeout = 10 * time.Second

// rebindAgent gives the agent a new identity and waits for it to take it,
// before any session of the restored machine starts: a fork of a machine
// serves its own id with a secret of its own.
func (g *guest) rebindAgent(r *boot.Rebind) error {
	g.rebindMu.Lock()
	defer g.rebindMu.Unlock()
	if g.rebind == nil {
		return errors.New("this machine's agent cannot take a new identity (its snapshot was made by an older nsys-cortex)")
	}
	if err := boot.SendRebind(g.rebind, r, rebindTimeout); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(r.Neuron)); err != nil {
		g.logf("hostname %s: %v", r.Neuron, err)
	}
	return nil
}
