package policy

import (
	"fmt"
	"strings"
)

// String renders the explanation for `nsys-cortex policy explain`: the
// decision first, then every check in the order it was made, the deciding
// one marked with "*".
func (e Explanation) String() string {
	var b strings.Builder
	d := e.Decision
	fmt.Fprintf(&b, "decision: %s\n", d.Effect)
	fmt.Fprintf(&b, "rule:     %s\n", d.Rule)
	if d.Reason != "" {
		fmt.Fprintf(&b, "reason:   %s\n", d.Reason)
	}
	if d.Subject != "" {
		fmt.Fprintf(&b, "subject:  %s\n", d.Subject)
	}
	fmt.Fprintf(&b, "checks:   %d\n", len(e.Checks))
	decided := false
	for i, c := range e.Checks {
		mark := " "
		if !decided && c == d {
			mark, decided = "*", true
		}
		fmt.Fprintf(&b, "%s %2d. %-5s %s", mark, i+1, c.Effect, c.Rule)
		if c.Subject != "" {
			fmt.Fprintf(&b, "  [%s]", oneLine(c.Subject))
		}
		if c.Reason != "" {
			fmt.Fprintf(&b, "  — %s", oneLine(c.Reason))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", `\n`)
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
