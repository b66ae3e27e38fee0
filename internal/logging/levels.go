package logging

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// levelNames are the levels a spec may name, lowest first.
var levelNames = []string{"debug", "info", "warn", "error"}

var levelByName = map[string]slog.Level{
	"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
}

// Levels are the minimum levels of a log: one for every component not
// named, and one per named component. The zero Levels logs info and above
// everywhere.
type Levels struct {
	Default    slog.Level
	Components map[string]slog.Level
}

// Level is the minimum level of component.
func (l Levels) Level(component string) slog.Level {
	if lv, ok := l.Components[component]; ok {
		return lv
	}
	return l.Default
}

// String writes l as a spec ParseLevels reads back: "info,api=debug".
func (l Levels) String() string {
	parts := []string{levelName(l.Default)}
	for _, c := range slices.Sorted(maps.Keys(l.Components)) {
		parts = append(parts, c+"="+levelName(l.Components[c]))
	}
	return strings.Join(parts, ",")
}

func levelName(lv slog.Level) string {
	for n, v := range levelByName {
		if v == lv {
			return n
		}
	}
	return strings.ToLower(lv.String()) // a level between the named ones, "info+2"
}

// ParseLevels reads a level spec, LEVEL[,component=LEVEL...]: an optional
// bare level for every component not named (info when it is left out),
// then a level per component. Levels are debug, info, warn and error, in
// any case; component names are letters, digits, '_', '-' and '.'; each
// is named at most once. "info,api=debug,sandbox=warn" logs the API from
// debug up, sandboxes from warn up, and everything else from info up.
func ParseLevels(spec string) (Levels, error) {
	if strings.TrimSpace(spec) == "" {
		return Levels{}, fmt.Errorf("empty level spec; want LEVEL[,component=LEVEL...] with levels %s", strings.Join(levelNames, ", "))
	}
	l := Levels{Default: slog.LevelInfo}
	seenDefault := false
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return Levels{}, fmt.Errorf("empty entry in level spec %q; want LEVEL[,component=LEVEL...] with levels %s", spec, strings.Join(levelNames, ", "))
		}
		name, level, hasName := strings.Cut(part, "=")
		name, level = strings.TrimSpace(name), strings.TrimSpace(level)
		if !hasName {
			name, level = "", name
		}
		lv, ok := levelByName[strings.ToLower(level)]
		switch {
		case hasName && !validComponent(name):
			return Levels{}, fmt.Errorf("component %q in level spec %q: want letters, digits, '_', '-' or '.'", name, spec)
		case !hasName && seenDefault:
			return Levels{}, fmt.Errorf("level spec %q gives the default level twice", spec)
		case hasName && hasComponent(l, name):
			return Levels{}, fmt.Errorf("level spec %q gives component %q twice", spec, name)
		case !ok:
			return Levels{}, fmt.Errorf("level %q in level spec %q is not one of %s", level, spec, strings.Join(levelNames, ", "))
		}
		if !hasName {
			l.Default, seenDefault = lv, true
			continue
		}
		if l.Components == nil {
			l.Components = map[string]slog.Level{}
		}
		l.Components[name] = lv
	}
	return l, nil
}

func hasComponent(l Levels, name string) bool {
	_, ok := l.Components[name]
	return ok
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
