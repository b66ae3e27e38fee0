// Package labels is how neurons are grouped and selected: a neuron carries
// a set of key=value labels (team=a, run=42), and a selector picks the
// neurons whose labels match it. Labels are the one grouping and tenancy
// key of Cortex: list filters, API keys' scopes, events and the objects of
// kube mode all select by them.
//
// Keys and values follow Kubernetes' rules, and selectors kubectl's syntax
// (team=a,run!=42, env in (dev,ci), !canary), so that what an operator
// knows from kubectl works here and a selector means the same to the kube
// backend as to the API server it talks to. The package is small and has
// no dependencies (docs/decisions.md says why it is not apimachinery's).
package labels

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nsys-cortex/cortex/internal/protocol/errdefs"
)

// Set is a neuron's labels.
type Set map[string]string

// Limits on a set, so a record stays small.
const (
	// MaxLabels is the most labels one neuron carries.
	MaxLabels = 64
	maxName   = 63
	maxPrefix = 253
	maxValue  = 63
)

// ValidateKey checks a key: an optional DNS subdomain prefix and a slash,
// then a name of at most 63 letters, digits, '-', '_' and '.', beginning
// and ending with a letter or digit ("team", "example.com/owner").
func ValidateKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	switch {
	case k == "":
		return invalid("label key is empty")
	case hasPrefix && prefix == "":
		return invalid("label key %q: the prefix before '/' is empty", k)
	case hasPrefix && !isSubdomain(prefix):
		return invalid("label key %q: the prefix %q must be a DNS subdomain (lower-case letters, digits, '-' and '.', at most %d characters)", k, prefix, maxPrefix)
	case strings.Contains(name, "/"):
		return invalid("label key %q has more than one '/'", k)
	case len(name) > maxName:
		return invalid("label key %q: the name is %d characters, at most %d", k, len(name), maxName)
	case !isName(name):
		return invalid("label key %q: the name must be letters, digits, '-', '_' and '.', beginning and ending with a letter or digit", k)
	}
	return nil
}

// ValidateValue checks a value: empty, or at most 63 letters, digits,
// '-', '_' and '.', beginning and ending with a letter or digit.
func ValidateValue(v string) error {
	switch {
	case len(v) > maxValue:
		return invalid("label value %q is %d characters, at most %d", v, len(v), maxValue)
	case v != "" && !isName(v):
		return invalid("label value %q must be letters, digits, '-', '_' and '.', beginning and ending with a letter or digit", v)
	}
	return nil
}

// Validate checks every key and value of s, and its size.
func (s Set) Validate() error {
	if len(s) > MaxLabels {
		return invalid("%d labels: a neuron carries at most %d", len(s), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if err := ValidateKey(k); err != nil {
			return err
		}
		if err := ValidateValue(s[k]); err != nil {
			return fmt.Errorf("label %s: %w", k, err)
		}
	}
	return nil
}

// String writes s as k=v pairs sorted by key, comma-separated.
func (s Set) String() string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(s)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + s[k])
	}
	return b.String()
}

// Clone returns a copy of s (nil for an empty set).
func (s Set) Clone() Set {
	if len(s) == 0 {
		return nil
	}
	return maps.Clone(s)
}

// Change is an edit of a set: keys to set, keys to remove.
type Change struct {
	Set    Set
	Remove []string
}

// ParseChange reads edits as `nsys-cortex label` takes them: "k=v" sets a
// key, "k-" removes one. A key both set and removed is refused.
func ParseChange(args []string) (Change, error) {
	c := Change{Set: Set{}}
	for _, a := range args {
		if k, ok := strings.CutSuffix(a, "-"); ok && !strings.Contains(a, "=") {
			if err := ValidateKey(k); err != nil {
				return Change{}, err
			}
			c.Remove = append(c.Remove, k)
			continue
		}
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return Change{}, invalid("label %q: write key=value to set it, or key- to remove it", a)
		}
		if err := ValidateKey(k); err != nil {
			return Change{}, err
		}
		if err := ValidateValue(v); err != nil {
			return Change{}, fmt.Errorf("label %s: %w", k, err)
		}
		if old, dup := c.Set[k]; dup && old != v {
			return Change{}, invalid("label %s is given twice (%q and %q)", k, old, v)
		}
		c.Set[k] = v
	}
	for _, k := range c.Remove {
		if _, ok := c.Set[k]; ok {
			return Change{}, invalid("label %s is both set and removed", k)
		}
	}
	return c, nil
}

// ParseSet reads "k=v" entries (create --label) into a set.
func ParseSet(args []string) (Set, error) {
	c, err := ParseChange(args)
	if err != nil {
		return nil, err
	}
	if len(c.Remove) > 0 {
		return nil, invalid("label %s-: a new neuron has no labels to remove", c.Remove[0])
	}
	if err := c.Set.Validate(); err != nil {
		return nil, err
	}
	return c.Set.Clone(), nil
}

// Apply returns s with c made, checked as a whole.
func (s Set) Apply(c Change) (Set, error) {
	out := maps.Clone(s)
	if out == nil {
		out = Set{}
	}
	maps.Copy(out, c.Set)
	for _, k := range c.Remove {
		delete(out, k)
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out.Clone(), nil
}

func invalid(format string, args ...any) error {
	return errdefs.Errorf(errdefs.Invalid, format, args...)
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isName reports whether s is a label name or non-empty value.
func isName(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// isSubdomain reports whether s is a DNS-1123 subdomain.
func isSubdomain(s string) bool {
	if s == "" || len(s) > maxPrefix {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || len(part) > 63 {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			lowerAlnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
			if !lowerAlnum && (c != '-' || i == 0 || i == len(part)-1) {
				return false
			}
		}
	}
	return true
}
