package nsbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nsys-cortex/cortex/internal/layout"
	"github.com/nsys-cortex/cortex/internal/protocol/boot"
	"github.com/nsys-cortex/cortex/internal/sandbox/internal/lifecycle"
	"github.com/nsys-cortex/cortex/internal/store"
)

var _ lifecycle.Claimer = (*runtime)(nil)

// Renamed renames the neuron's cgroups (named for the id: cgroupName) and
// their record.
func (r *runtime) Renamed(lay layout.Layout, from, to string) error {
	f := filepath.Join(lay.OverlayDir(to), ".cgroups")
	var dirs []string
	if err := store.ReadJSON(f, &dirs); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no cgroups here (rlimits only)
		}
		return err
	}
	for i, d := range dirs {
		if filepath.Base(d) != cgroupName(lay, from) {
			continue
		}
		nd := filepath.Join(filepath.Dir(d), cgroupName(lay, to))
		os.Remove(nd) // a leftover of a neuron that died uncleanly
		if err := os.Rename(d, nd); err != nil {
			return fmt.Errorf("renaming the cgroup %s: %w", d, err)
		}
		dirs[i] = nd
	}
	return store.WriteJSON(f, dirs, 0o600)
}

// claimWait bounds PID 1's answer to a claim (a variable: tests shorten it).
var claimWait = 15 * time.Second

// Claim hands PID 1 the neuron's identity (boot.NsboxClaim); wait reads
// its answer: PID 1 rebinds the agent, sets the hostname and /etc.
func (r *runtime) Claim(control *os.File, rb *boot.Rebind) (wait func() error, err error) {
	b, err := json.Marshal(&boot.NsboxClaim{Rebind: *rb})
	if err != nil {
		return nil, err
	}
	control.SetDeadline(time.Now().Add(claimWait))
	if _, err := control.Write(append(b, '\n')); err != nil {
		control.SetDeadline(time.Time{})
		return nil, fmt.Errorf("sending the sandbox its claim: %w", err)
	}
	return func() error {
		defer control.SetDeadline(time.Time{})
		// One line of JSON, bounded: PID 1 is the host's, but its answer
		// is read as any answer from a neuron is.
		line, err := bufio.NewReaderSize(control, 4096).ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("the sandbox's answer to its claim: %w", err)
		}
		var ans boot.NsboxClaimed
		if err := json.Unmarshal(line, &ans); err != nil {
			return fmt.Errorf("the sandbox's answer to its claim: %w", err)
		}
		if ans.Error != "" {
			return fmt.Errorf("the sandbox refused its claim: %.200s", ans.Error)
		}
		return nil
	}, nil
}
