package kvmprobe_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nsys-cortex/cortex/internal/sandbox/internal/kvmprobe"
)

// hardwareVirt reports whether the CPU offers VT-x or AMD-V to this kernel.
func hardwareVirt(t *testing.T) bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			f := " " + line + " "
			return strings.Contains(f, " vmx ") || strings.Contains(f, " svm ")
		}
	}
	return false
}

// The probe answers on this machine, and says why when KVM cannot run a
// guest: with VT-x/AMD-V it must pass; without it (nested virtualization
// absent) it must fail cleanly, naming the reason, instead of hanging.
func TestProbeThisMachine(t *testing.T) {
	if _, err := os.Stat(kvmprobe.DefaultDevice); err != nil {
		t.Skipf("no %s here: %v", kvmprobe.DefaultDevice, err)
	}
	r := kvmprobe.Run(context.Background(), "", 500*time.Millisecond)
	t.Logf("probe: %+v", r)
	switch {
	case os.Getenv("NSYS_CORTEX_REQUIRE_KVM") == "1" && !r.OK:
		t.Fatalf("KVM is required here but the probe failed at %s: %s", r.Stage, r.Detail)
	case hardwareVirt(t) && !r.OK && r.Stage != "open":
		t.Fatalf("the CPU offers hardware virtualization but the probe failed at %s: %s", r.Stage, r.Detail)
	case !hardwareVirt(t) && r.OK:
		t.Fatalf("the CPU flags show no vmx/svm, yet the probe passed: %s", r.Detail)
	case !r.OK && (r.Stage == "" || r.Detail == ""):
		t.Fatalf("a failed probe must say where and why: %+v", r)
	case r.Stage == "timeout" && !strings.Contains(r.Detail, "KVM_RUN did not return"):
		t.Fatalf("a timed-out probe must name KVM_RUN: %s", r.Detail)
	}
}

func TestProbeBadDevices(t *testing.T) {
	for _, c := range []struct{ dev, stage, says string }{
		{"/nonexistent/kvm", "open", "no such file"},
		{"/dev/null", "api-version", "KVM_GET_API_VERSION"},
	} {
		r := kvmprobe.Run(context.Background(), c.dev, time.Second)
		if r.OK || r.Stage != c.stage || !strings.Contains(r.Detail, c.says) {
			t.Errorf("%s: got %+v, want a failure at %s saying %q", c.dev, r, c.stage, c.says)
		}
	}
}
