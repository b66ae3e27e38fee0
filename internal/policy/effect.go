package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Effect is the outcome of a check. In order of severity: Allow < Ask < Deny;
// when several checks apply, the most severe one wins.
type Effect string

// The three effects.
const (
	Allow Effect = "allow"
	Ask   Effect = "ask"
	Deny  Effect = "deny"
)

// ParseEffect returns the Effect named by s ("allow", "ask" or "deny").
func ParseEffect(s string) (Effect, error) {
	e := Effect(strings.TrimSpace(s))
	if !e.Valid() {
		return "", fmt.Errorf("policy: invalid effect %q (want allow, ask or deny)", s)
	}
	return e, nil
}

// String returns the effect's name.
func (e Effect) String() string { return string(e) }

// Valid reports whether e is one of Allow, Ask or Deny.
func (e Effect) Valid() bool { return e == Allow || e == Ask || e == Deny }

// Severity orders effects: 0 for Allow, 1 for Ask, 2 for Deny. An invalid
// effect counts as Deny, so a corrupted value never widens access.
func (e Effect) Severity() int {
	switch e {
	case Allow:
		return 0
	case Ask:
		return 1
	default:
		return 2
	}
}

// MaxEffect returns the most severe of a and b.
func MaxEffect(a, b Effect) Effect {
	if b.Severity() > a.Severity() {
		return b
	}
	return a
}

// Access is how a tool touches a path.
type Access string

// The two accesses. A PathRule with an empty Access applies to both.
const (
	Read  Access = "read"
	Write Access = "write"
)

// ParseAccess returns the Access named by s ("read" or "write").
func ParseAccess(s string) (Access, error) {
	a := Access(strings.TrimSpace(s))
	if a != Read && a != Write {
		return "", fmt.Errorf("policy: invalid access %q (want read or write)", s)
	}
	return a, nil
}

// String returns the access's name.
func (a Access) String() string { return string(a) }

// Duration is a time.Duration written in JSON as a Go duration string ("120s").
type Duration time.Duration

// String returns the duration as Go prints it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "2m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string such as "120s" or "10m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"120s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}
