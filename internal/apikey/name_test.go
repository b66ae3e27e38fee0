package apikey

import (
	"regexp"
	"strings"
	"testing"
)

// TestNameMatchesItsExpression: the hand-written check accepts exactly
// what ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$ does.
func TestNameMatchesItsExpression(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	names := []string{"", "a", "ab", "a-", "-a", "a.b", "A", "ci-bot", "a_b.c-d", "a b", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("-", 61) + "b"}
	for _, n := range names {
		if got, want := CheckName(n) == nil, re.MatchString(n); got != want {
			t.Errorf("CheckName(%q) accepts: %v, the expression: %v", n, got, want)
		}
	}
}

func FuzzName(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	f.Add("ci-bot")
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := CheckName(n) == nil, re.MatchString(n); got != want {
			t.Errorf("CheckName(%q) accepts: %v, the expression: %v", n, got, want)
		}
	})
}
