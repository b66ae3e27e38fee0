package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nsys-cortex/cortex/internal/agent/guestinit"
	"github.com/nsys-cortex/cortex/internal/sandbox"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/vsock"
)

// The guest's side of the contract, as the image's PID 1
// (internal/agent/guestinit) defines it: the disks it finds by their
// virtio serial numbers (Firecracker's drive ids), the configuration it
// reads from the config disk, and the control port.

// Drive ids, which the guest sees as the disks' serial numbers.
const (
	driveRoot    = guestinit.SerialRoot
	driveOverlay = guestinit.SerialOverlay
	driveConfig  = guestinit.SerialConfig
)

// GuestConfig is what the host tells the guest, as JSON on the config
// disk: never on the kernel command line.
type GuestConfig = guestinit.Config

// configMax bounds the config disk's JSON (guestinit.ConfigMax), and
// configDiskMin is its least size (vmimage.ConfigDisk's: the kernel's
// partition scan complains about tinier disks).
const (
	configMax     = guestinit.ConfigMax
	configDiskMin = 64 << 10
)

// writeConfigDisk writes cfg as the guest reads it: JSON, NUL-padded to
// whole 4 KiB blocks (vmimage.ConfigDisk's format).
func writeConfigDisk(path string, cfg *GuestConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if len(b) >= configMax {
		return &sandbox.InvalidError{Reason: fmt.Sprintf("the neuron's configuration is %d bytes (limit %d): the environment is too large", len(b), configMax)}
	}
	padded := make([]byte, max(configDiskMin, (len(b)+1+4095)&^4095))
	copy(padded, b)
	return os.WriteFile(path, padded, 0o400)
}

// Control operations (guestinit.OpRestored, OpPoweroff, OpPing).
const (
	OpRestored = "restored"
	OpPoweroff = "poweroff"
	OpPing     = "ping"
)

// CtlRequest is one line of JSON on the control port (guestinit.CtlRequest).
type CtlRequest struct {
	Op   string    `json:"op"`
	Time time.Time `json:"time,omitzero"`
	Seed []byte    `json:"seed,omitempty"`
}

// CtlReply is the guest's one-line answer (guestinit.CtlReply).
type CtlReply struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Time  time.Time `json:"time"`
}

// control sends one request to the guest's control port through the VM's
// hybrid vsock socket uds and returns its answer.
func control(ctx context.Context, uds string, req *CtlRequest) (*CtlReply, error) {
	c, err := vsock.Dial(ctx, uds, CtlVsockPort)
	if err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("control port: no answer to %s: %w", req.Op, err)
	}
	var reply CtlReply
	if err := json.Unmarshal(line, &reply); err != nil {
		return nil, fmt.Errorf("control port: %w", err)
	}
	if !reply.OK {
		return &reply, errors.New("control port: the guest refused " + req.Op + ": " + reply.Error)
	}
	return &reply, nil
}
