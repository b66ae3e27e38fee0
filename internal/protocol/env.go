package protocol

import "strings"

// MergeEnv applies the KEY=VALUE entries of add over base, in order, as a
// Command's Env applies over the neuron's environment (and a backend's
// variables over the operator's): an entry replaces the one of the same
// key where it stands, or is appended. Every key appears once, with its
// last value. Neither slice is modified.
func MergeEnv(base, add []string) []string {
	out := make([]string, 0, len(base)+len(add))
	idx := make(map[string]int, len(base)+len(add))
	for _, list := range [][]string{base, add} {
		for _, kv := range list {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := idx[k]; ok {
				out[i] = kv
				continue
			}
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// ValidEnvName reports whether s may name an environment variable: ASCII
// letters, digits and '_', not starting with a digit.
func ValidEnvName(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if c != '_' && !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
