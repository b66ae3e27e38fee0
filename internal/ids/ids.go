// Package ids validates and generates neuron ids.
//
// It is a foundation package: standard library only.
package ids

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// MaxLen is the longest id accepted.
const MaxLen = 64

// Validate reports whether id is usable as a neuron id: 1 to 64 characters
// from [a-zA-Z0-9._-], not starting with '.' or '-' (so it is never a hidden
// file, a flag, or "." / "..").
func Validate(id string) error {
	if id == "" {
		return fmt.Errorf("neuron id is empty")
	}
	if len(id) > MaxLen {
		return fmt.Errorf("neuron id %.20q... is %d characters long (limit %d)", id, len(id), MaxLen)
	}
	if id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("neuron id %q must not start with %q", id, id[0])
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("neuron id %q contains %q: use only ASCII letters, digits, '.', '_' and '-'", id, c)
		}
	}
	return nil
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// Generated reports whether id has the shape New gives ids.
func Generated(id string) bool {
	if len(id) != 10 || id[0] != 'n' {
		return false
	}
	for i := 1; i < len(id); i++ {
		if !strings.ContainsRune(alphabet, rune(id[i])) {
			return false
		}
	}
	return true
}

// New returns a fresh random id: "n" followed by 9 characters of [a-z0-9].
func New() string {
	b := make([]byte, 10)
	rand.Read(b) // never fails (crypto/rand panics if the OS source breaks)
	b[0] = 'n'
	for i := 1; i < len(b); i++ {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
