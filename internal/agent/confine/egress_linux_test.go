package confine

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRateLog(t *testing.T) {
	var lines []string
	clock := time.Unix(1000, 0)
	l := &rateLog{rate: 10, burst: 25, now: func() time.Time { return clock },
		logf: func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }}
	for i := 0; i < 5; i++ {
		l.print("0123456789") // 10 bytes: two fit the burst
	}
	clock = clock.Add(2 * time.Second) // 20 bytes more
	l.print("after")
	want := []string{"0123456789", "0123456789", "egress: 3 decisions not logged (over 0 KiB/s)", "after"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", lines, want)
	}
}
