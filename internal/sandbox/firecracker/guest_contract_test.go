package firecracker

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nsys-cortex/cortex/internal/protocol/boot"
)

// The backend mirrors the guest's contract (drive serials, vsock ports,
// the config disk's JSON) in its own names; this pins them to the guest's
// PID 1, so a change on one side fails here rather than in a VM that never
// answers.
func TestGuestContract(t *testing.T) {
	for _, c := range []struct{ ours, theirs string }{
		{driveRoot, boot.SerialRoot}, {driveOverlay, boot.SerialOverlay}, {driveConfig, boot.SerialConfig},
	} {
		if c.ours != c.theirs {
			t.Errorf("drive id %q, but the guest looks for %q", c.ours, c.theirs)
		}
	}
	if AgentVsockPort != boot.DefaultVsockPort || CtlVsockPort != boot.DefaultCtlVsockPort {
		t.Errorf("vsock ports %d/%d, the guest listens on %d/%d", AgentVsockPort, CtlVsockPort, boot.DefaultVsockPort, boot.DefaultCtlVsockPort)
	}
	if configMax != boot.VMConfigMax {
		t.Errorf("config limit %d, the guest's %d", configMax, boot.VMConfigMax)
	}
	ours := GuestConfig{ID: "n1", Workdir: "/home/agent/workspace", Env: []string{"A=1"}, Pids: 7, NestedUserns: true, VsockPort: 1, CtlVsockPort: 2}
	b, _ := json.Marshal(ours)
	var theirs boot.VMConfig
	if err := json.Unmarshal(b, &theirs); err != nil {
		t.Fatal(err)
	}
	back, _ := json.Marshal(theirs)
	var again GuestConfig
	json.Unmarshal(back, &again)
	if !reflect.DeepEqual(ours, again) {
		t.Errorf("the config disk's JSON does not survive the guest's reading:\n ours   %+v\n theirs %+v", ours, again)
	}
}
