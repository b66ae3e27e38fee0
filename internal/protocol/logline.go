package protocol

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// CleanLogText makes text safe to put in a neuron's log, and to print on
// an operator's terminal: every control character but tab — escape
// sequences (a terminal's title, its clipboard), carriage returns, C1
// controls, and the newlines that would start a line of the neuron's
// choosing in the host's own format — and every byte that is not UTF-8
// is written as an escape (\x1b, \u009b). Printable text is kept as it is.
func CleanLogText(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || needsEscape(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case needsEscape(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u2028' || r == '\u2029'
}
