package store

import (
	"regexp"
	"strings"
	"testing"
)

// TestSnapshotNameMatchesItsExpression: the hand-written check accepts
// exactly what ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ does.
func TestSnapshotNameMatchesItsExpression(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	names := []string{"", "a", "A.b_c-9", ".a", "-a", "_a", "a/b", "..", "a b", "a\x00", "é", "a\n",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "9" + strings.Repeat(".", 63)}
	for _, n := range names {
		if got, want := CheckSnapshotName(n) == nil, re.MatchString(n); got != want {
			t.Errorf("CheckSnapshotName(%q) accepts: %v, the expression: %v", n, got, want)
		}
	}
}

func FuzzSnapshotName(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	f.Add("a.b")
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := CheckSnapshotName(n) == nil, re.MatchString(n); got != want {
			t.Errorf("CheckSnapshotName(%q) accepts: %v, the expression: %v", n, got, want)
		}
	})
}
