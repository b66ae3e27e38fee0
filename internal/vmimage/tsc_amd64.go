package vmimage

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func rdtsc() uint64

var tscOnce = sync.OnceValues(measureTSC)

// HostTSCkHz is this machine's TSC frequency in kHz, measured once (100 ms
// against CLOCK_MONOTONIC_RAW). Under TCG a guest's TSC is the host's, and
// with ACPI on Debian's kernel hangs calibrating it unless told
// tsc_early_khz.
func HostTSCkHz() (int64, error) { return tscOnce() }

func measureTSC() (int64, error) {
	var best int64
	for i := 0; i < 3; i++ {
		var t0, t1 unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &t0)
		c0 := rdtsc()
		time.Sleep(30 * time.Millisecond)
		unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &t1)
		c1 := rdtsc()
		ns := t1.Nano() - t0.Nano()
		if ns <= 0 {
			continue
		}
		khz := int64(float64(c1-c0) / float64(ns) * 1e6)
		if khz > best {
			best = khz
		}
	}
	if best <= 0 {
		return 0, errNoTSC
	}
	return best, nil
}
