package nsbox

import "time"

// SetClaimWait shortens how long a claim waits for PID 1's answer, until
// the returned function puts it back.
func SetClaimWait(d time.Duration) func() {
	old := claimWait
	claimWait = d
	return func() { claimWait = old }
}
