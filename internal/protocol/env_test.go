package protocol

import (
	"slices"
	"strings"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	for _, c := range []struct {
		base, add []string
		want      string
	}{
		{[]string{"A=1", "B=2"}, []string{"B=3", "C=4", "A=5"}, "A=5,B=3,C=4"},
		{[]string{"A=1", "B=2"}, nil, "A=1,B=2"},
		{nil, []string{"A=1", "A=2"}, "A=2"},
		// A key twice in base is kept once, where it first stood.
		{[]string{"A=1", "B=2", "A=3"}, []string{"C=4"}, "A=3,B=2,C=4"},
		{[]string{"A=1"}, []string{"A"}, "A"},
	} {
		base := slices.Clone(c.base)
		if got := strings.Join(MergeEnv(base, c.add), ","); got != c.want {
			t.Errorf("MergeEnv(%q, %q) = %s, want %s", c.base, c.add, got, c.want)
		}
		if !slices.Equal(base, c.base) {
			t.Errorf("MergeEnv changed its base: %q", base)
		}
	}
}
