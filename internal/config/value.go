package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parse checks s as a value of k and returns the form it is kept in
// (errors do not name the key; callers say which and where from):
// booleans become "true" or "false", whole numbers lose their padding,
// everything else stays as written (so a size reads back as "1g").
func (k Key) parse(s string) (string, error) {
	var err error
	switch k.Type {
	case TypeBool:
		var b bool
		if b, err = parseBool(s); err == nil {
			s = strconv.FormatBool(b)
		}
	case TypeInt:
		var n int
		if n, err = strconv.Atoi(strings.TrimSpace(s)); err == nil && n < 0 {
			err = errors.New("negative")
		}
		if err == nil {
			s = strconv.Itoa(n)
		}
	case TypeBytes:
		s = strings.TrimSpace(s)
		if !(k.zeroNone && isZero(s)) {
			_, err = ParseBytes(s)
		}
	case TypeDuration:
		s = strings.TrimSpace(s)
		var d time.Duration
		if d, err = time.ParseDuration(s); err == nil && d < 0 {
			err = errors.New("negative")
		}
	case TypeEnum:
		err = errors.New("not allowed")
		for _, a := range k.Allowed {
			if s == a {
				err = nil
			}
		}
	}
	if err != nil {
		return "", k.invalid(s)
	}
	if k.check != nil {
		if err := k.check(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// invalid is the error of a value of k that does not parse; callers
// name the key and where the value came from.
func (k Key) invalid(s string) error {
	return fmt.Errorf("%q is not %s", s, k.Form())
}

// envForm is how Apply writes value (a parsed value of k) to the
// environment: existing readers take NSYS_CORTEX_ALLOW_INSECURE_DEV=1 for
// true, and unset for false.
func (k Key) envForm(value string) string {
	if k.Type == TypeBool {
		if value == "true" {
			return "1"
		}
		return ""
	}
	return value
}

// parseBool accepts true, false, 1 and 0, in any case.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", s)
}

// isZero reports whether s is a size of zero (0, 0g, 0.0m...), which a
// key that takes 0 for none keeps as "0".
func isZero(s string) bool {
	t := strings.TrimRight(strings.ToLower(strings.TrimSpace(s)), "kmgtib")
	n, err := strconv.ParseFloat(t, 64)
	return err == nil && n == 0 && t != "" && !strings.ContainsAny(t, "eEnNxX+-")
}

// ParseBytes parses a size: a number of bytes with an optional binary
// suffix k, m, g or t (1k = 1024), optionally followed by b or ib, in any
// case: 4096, 512k, 100m, 1.5g, 2GiB. It must be more than zero.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	mult := 1.0
	for i, unit := range []string{"k", "m", "g", "t"} {
		rest, ok := strings.CutSuffix(t, unit)
		if !ok {
			rest, ok = strings.CutSuffix(t, unit+"i") // KiB, MiB...
		}
		if ok {
			mult, t = math.Pow(1024, float64(i+1)), rest
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "eEnNxX+-") || n <= 0 || n*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size (like 512m or 1g)", s)
	}
	return int64(n * mult), nil
}

// levelNames are the log levels, lowest first; logging.ParseLevels takes
// the same names.
var levelNames = []string{"debug", "info", "warn", "error"}

// checkLevelSpec checks the syntax of log.level,
// LEVEL[,component=LEVEL...]: at most one bare LEVEL (the default), each
// component once, component names of letters, digits, '_', '-' and '.'.
// logging.ParseLevels is the parser that turns it into levels; a test in
// internal/logging checks that the two accept the same specs.
func checkLevelSpec(spec string) error {
	if strings.TrimSpace(spec) == "" {
		return errors.New("empty level spec; want " + levelForm())
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		name, level, hasName := strings.Cut(part, "=")
		name, level = strings.TrimSpace(name), strings.TrimSpace(level)
		if !hasName {
			name, level = "", name
		}
		switch {
		case part == "":
			return fmt.Errorf("empty entry in level spec %q; want %s", spec, levelForm())
		case hasName && !validComponent(name):
			return fmt.Errorf("component %q in level spec %q: want letters, digits, '_', '-' or '.'", name, spec)
		case seen[name] && name == "":
			return fmt.Errorf("level spec %q gives the default level twice", spec)
		case seen[name]:
			return fmt.Errorf("level spec %q gives component %q twice", spec, name)
		}
		seen[name] = true
		if !isLevelName(level) {
			return fmt.Errorf("level %q in level spec %q is not one of %s", level, spec, strings.Join(levelNames, ", "))
		}
	}
	return nil
}

func levelForm() string {
	return "LEVEL[,component=LEVEL...] with levels " + strings.Join(levelNames, ", ")
}

func isLevelName(s string) bool {
	for _, n := range levelNames {
		if strings.EqualFold(s, n) {
			return true
		}
	}
	return false
}

func validComponent(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// nonEmpty is the check of a text key that must have a value.
func nonEmpty(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty (unset it to get the default)")
	}
	return nil
}

// checkPools checks the form of the pool key (MODE=N,...); which modes can
// keep a pool, serve says when it starts them.
func checkPools(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mode, n, ok := strings.Cut(part, "=")
		if v, err := strconv.Atoi(n); !ok || mode == "" || err != nil || v < 0 {
			return fmt.Errorf("%q is not MODE=N (e.g. nsbox=8)", part)
		}
	}
	return nil
}
