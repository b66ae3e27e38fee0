package protocol

import "testing"

func TestCleanLogText(t *testing.T) {
	for in, want := range map[string]string{
		"plain words, tabs\tand é": "plain words, tabs\tand é",
		"\x1b]0;owned\x07title":    `\x1b]0;owned\x07title`,
		"\x1b]52;c;ZXZpbA==\x07":   `\x1b]52;c;ZXZpbA==\x07`,
		"a\r\nb":                   `a\r\nb`,
		"x\n2026/12/01 10:00:00.000000 nsys-cortex: forged": `x\n2026/12/01 10:00:00.000000 nsys-cortex: forged`,
		"\u009b31m":     `\u009b31m`,
		"bad \xff byte": `bad \xff byte`,
		"del\x7f":       `del\x7f`,
	} {
		if got := CleanLogText(in); got != want {
			t.Errorf("CleanLogText(%q) = %q, want %q", in, got, want)
		}
	}
}
