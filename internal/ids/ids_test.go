package ids

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"a", "demo", "agent-1", "A.b_c-9", strings.Repeat("x", 64), "9lives"} {
		if err := Validate(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"": "empty", strings.Repeat("x", 65): "limit 64", "a/b": "'/'", "..": "start", ".x": "start",
		"-rf": "start", "a b": "' '", "tab\t": "'\\t'", "ünï": "'ü'", "a:b": "':'",
	} {
		err := Validate(bad)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error mentioning %q", bad, err, why)
		}
	}
}

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	re := regexp.MustCompile(`^n[a-z0-9]{9}$`)
	for i := 0; i < 1000; i++ {
		id := New()
		if !re.MatchString(id) || Validate(id) != nil || !Generated(id) || seen[id] {
			t.Fatalf("New() = %q (duplicate: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

func TestGenerated(t *testing.T) {
	for id, want := range map[string]bool{"nabc123456": true, "job1": false, "nABC123456": false, "nabc12345": false, "xabc123456": false} {
		if Generated(id) != want {
			t.Errorf("%s: %v", id, !want)
		}
	}
}
