package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox/firecracker/vsock"
	"github.com/nsys-cortex/cortex/internal/vmimage"
)

// The guest's side of the contract, as the image's PID 1
// (internal/agent/vminit) defines it: the disks it finds by their
// virtio serial numbers (Firecracker's drive ids), the configuration it
// reads from the config disk, and the control port.

// Drive ids, which the guest sees as the disks' serial numbers.
const (
	driveRoot    = boot.SerialRoot
	driveOverlay = boot.SerialOverlay
	driveConfig  = boot.SerialConfig
)

// GuestConfig is what the host tells the guest, as JSON on the config
// disk: never on the kernel command line.
type GuestConfig = boot.VMConfig

// configMax bounds the config disk's JSON, and configDiskMin is its least
// size: vmimage.ConfigDisk writes it, as for qemu mode.
const (
	configMax     = boot.VMConfigMax
	configDiskMin = vmimage.ConfigDiskMin
)

// The control port's operations and messages: the guest's own
// (vminit).
const (
	OpRestored = boot.OpRestored
	OpPoweroff = boot.OpPoweroff
	OpPing     = boot.OpPing
)

type (
	CtlRequest = boot.CtlRequest
	CtlReply   = boot.CtlReply
)

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
	line, err := boot.ReadCtlLine(bufio.NewReader(c))
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
