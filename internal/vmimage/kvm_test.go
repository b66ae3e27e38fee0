package vmimage

import (
	"os"
	"testing"
	"time"
)

// TestProbeKVM runs the probe: where /dev/kvm is missing it must say so;
// where it is present the probe must end within its timeout either way
// (on this project's machines KVM is emulated and hangs: the probe fails).
func TestProbeKVM(t *testing.T) {
	start := time.Now()
	err := ProbeKVM(time.Second)
	took := time.Since(start)
	if _, statErr := os.Stat("/dev/kvm"); statErr != nil && err == nil {
		t.Fatal("the probe passed without /dev/kvm")
	}
	t.Logf("ProbeKVM: %v (in %s)", err, took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("the probe took %s with a 1 s timeout", took)
	}
}

func TestHostTSC(t *testing.T) {
	khz, err := HostTSCkHz()
	if err != nil {
		t.Skip(err)
	}
	if khz < 100_000 || khz > 10_000_000 {
		t.Fatalf("TSC at %d kHz is implausible", khz)
	}
	t.Logf("host TSC: %d kHz", khz)
}
