package firecracker

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"
)

// ResyncReport says how a restored guest was brought up to date.
type ResyncReport struct {
	// Clock: the guest's wall clock was set from the host's; Skew is how
	// far the guest's clock was from the host's when it answered.
	Clock bool          `json:"clock"`
	Skew  time.Duration `json:"skewNs"`
	// Seed: fresh host entropy was credited to the guest's kernel, which
	// reseeded its RNG.
	Seed bool `json:"seed"`
}

// Control sends one request to a guest's control port.
type Control func(ctx context.Context, req *CtlRequest) (*CtlReply, error)

// Resyncer brings a restored guest up to date, so that two restores of one
// snapshot share neither a stale clock nor their randomness.
type Resyncer interface {
	Resync(ctx context.Context, ctl Control) (ResyncReport, error)
}

// maxSkew is how far a restored guest's clock may be from the host's
// after the resync.
const maxSkew = time.Second

// CtlResyncer sends the control port's "restored" with the host's clock
// and 32 fresh random bytes: the guest's PID 1 sets CLOCK_REALTIME and
// credits the seed to its kernel (then reseeds the RNG). A guest that
// refuses, or whose clock is still off, fails the restore: a VM whose time
// is off by the snapshot's age breaks TLS and build tools.
type CtlResyncer struct{}

// Resync implements Resyncer.
func (CtlResyncer) Resync(ctx context.Context, ctl Control) (ResyncReport, error) {
	seed := make([]byte, 32)
	rand.Read(seed)
	reply, err := ctl(ctx, &CtlRequest{Op: OpRestored, Time: time.Now(), Seed: seed})
	if err != nil {
		return ResyncReport{}, err
	}
	r := ResyncReport{Clock: true, Seed: true, Skew: time.Since(reply.Time)}
	if r.Skew > maxSkew || r.Skew < -maxSkew {
		return r, fmt.Errorf("the guest's clock is %s off the host's after it was set", r.Skew.Round(time.Millisecond))
	}
	return r, nil
}
