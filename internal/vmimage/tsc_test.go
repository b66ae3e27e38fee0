package vmimage

import (
	"testing"
)

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
