package sandbox

import (
	"fmt"

	"github.com/nsys-cortex/cortex/internal/protocol/allowlist"
)

// CheckNetwork checks the shape of a network request, whatever a mode then
// enforces of it: the mode is none, egress or full; an allow-list goes with
// egress only, and egress needs one whose every rule parses.
func CheckNetwork(n Network) error {
	switch n.Mode {
	case NetworkDefault, NetworkNone, NetworkFull:
		if len(n.Allow) > 0 {
			return &InvalidError{Reason: "a network allow-list goes with network egress (--allow alone implies it)"}
		}
	case NetworkEgress:
		if len(n.Allow) == 0 {
			return &InvalidError{Reason: "network egress needs an allow-list (--allow HOST[:PORT], *.DOMAIN or CIDR); with nothing to reach, use network none"}
		}
		if _, err := allowlist.Parse(n.Allow); err != nil {
			return &InvalidError{Reason: "network allow-list: " + err.Error()}
		}
	default:
		return &InvalidError{Reason: fmt.Sprintf("network %q: choose none, egress or full", n.Mode)}
	}
	return nil
}
