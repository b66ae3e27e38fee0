package memory

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on what a note may hold. They keep one runaway tool call from
// filling the disk or a model's context.
const (
	MaxKeyChars     = 200
	MaxContentBytes = 1 << 20
	MaxTags         = 20
	MaxTagChars     = 50

	DefaultSearchLimit = 10
	MaxSearchLimit     = 100
	DefaultListLimit   = 50
	MaxListLimit       = 1000
)

// The error classes of this package. Every error Store returns for a missing
// note or a bad argument wraps one of them; anything else is a storage
// failure.
var (
	// ErrNotFound means no note has the key asked for.
	ErrNotFound = errors.New("memory: note not found")
	// ErrInvalid means an argument was rejected before touching storage; the
	// error is an *InvalidError naming the field.
	ErrInvalid = errors.New("memory: invalid argument")
)

// IsNotFound reports whether err is or wraps ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalid reports whether err is or wraps ErrInvalid.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// InvalidError is an argument that failed validation.
type InvalidError struct {
	Field  string // "key", "content", "tags", "mode", "query", "prefix"
	Reason string
}

func (e *InvalidError) Error() string {
	if e.Field == "query" && e.Reason == "query is empty" {
		return e.Reason
	}
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true for every *InvalidError.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }

// Mode says what Update does with the content it is given.
type Mode string

// The update modes.
const (
	ModeReplace Mode = "replace"
	ModeAppend  Mode = "append"
	ModeDelete  Mode = "delete"
)

// String returns the mode's name; the zero Mode is "replace".
func (m Mode) String() string {
	if m == "" {
		return string(ModeReplace)
	}
	return string(m)
}

// ParseMode reads a mode name as a tool call would give it; "" is
// ModeReplace.
func ParseMode(s string) (Mode, error) {
	switch Mode(strings.ToLower(strings.TrimSpace(s))) {
	case "", ModeReplace:
		return ModeReplace, nil
	case ModeAppend:
		return ModeAppend, nil
	case ModeDelete:
		return ModeDelete, nil
	}
	return "", invalid("mode", fmt.Sprintf("%q is not one of replace, append, delete", s))
}

func isControl(r rune) bool { return unicode.IsControl(r) }

func validateKey(key string) error {
	n := utf8.RuneCountInString(key)
	switch {
	case n == 0:
		return invalid("key", "key is empty")
	case n > MaxKeyChars:
		return invalid("key", fmt.Sprintf("%d characters; the limit is %d", n, MaxKeyChars))
	case !utf8.ValidString(key):
		return invalid("key", "not valid UTF-8")
	case strings.ContainsFunc(key, isControl):
		return invalid("key", "contains a control character (newline, tab, …); use a short single-line name")
	case strings.TrimSpace(key) != key:
		return invalid("key", "has leading or trailing spaces")
	}
	return nil
}

func validateContent(content string) error {
	switch {
	case strings.TrimSpace(content) == "":
		return invalid("content", "content is empty; to remove a note use mode \"delete\"")
	case len(content) > MaxContentBytes:
		return invalid("content", fmt.Sprintf("%d bytes; the limit is %d (1 MiB)", len(content), MaxContentBytes))
	case !utf8.ValidString(content):
		return invalid("content", "not valid UTF-8")
	}
	return nil
}

// normalizeTags validates tags, trims them and drops duplicates, keeping
// nil as nil (it means "leave the tags alone").
func normalizeTags(tags []string) ([]string, error) {
	if tags == nil {
		return nil, nil
	}
	out := make([]string, 0, len(tags))
	for i, t := range tags {
		t = strings.TrimSpace(t)
		n := utf8.RuneCountInString(t)
		switch {
		case n == 0:
			return nil, invalid("tags", fmt.Sprintf("tag %d is empty", i))
		case n > MaxTagChars:
			return nil, invalid("tags", fmt.Sprintf("tag %q is %d characters; the limit is %d", t, n, MaxTagChars))
		case !utf8.ValidString(t) || strings.ContainsFunc(t, isControl):
			return nil, invalid("tags", fmt.Sprintf("tag %d contains a control character or invalid UTF-8", i))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) > MaxTags {
		return nil, invalid("tags", fmt.Sprintf("%d tags; the limit is %d", len(out), MaxTags))
	}
	return out, nil
}
