package api

import "time"

// SetRenewHold sets how often a request holding a chat session holds it
// again, for a test's span; it returns what puts it back.
func SetRenewHold(d time.Duration) (restore func()) {
	old := renewHold
	renewHold = d
	return func() { renewHold = old }
}
