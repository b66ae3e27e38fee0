// Package config is the one schema of Cortex's settings and the file that
// holds them.
//
// Every setting is a [Key]: a dotted name used in the file and by
// `nsys-cortex config` (api.listen), an environment variable
// (NSYS_CORTEX_API_LISTEN), a type, a default and a one-line description.
// [Keys] lists them all; docs/config.md shows the same table, and a test
// keeps the two in step.
//
// # Where a value comes from
//
// The effective value of a key is, from the highest precedence down:
//
//  1. a flag value handed over with [Config.SetFlag];
//  2. the key's environment variable, when set and not empty;
//  3. the configuration file, <home>/config.json ([Load]);
//  4. the key's default.
//
// The file is a flat JSON object of dotted names:
//
//	{"api.listen": "0.0.0.0:3100", "log.level": "debug", "log.console": true}
//
// Booleans are JSON booleans, whole numbers JSON numbers, everything else
// JSON strings (sizes like "1g", durations like "10s"). [Load] rejects an
// unknown key, a value of the wrong type and malformed JSON, naming the
// file. [Set] and [Unset] edit the file atomically (a temporary file in the
// same directory, renamed over it), mode 0600, keeping the other entries.
//
// Values from the file and from flags are checked when they are read;
// environment variables are checked by [Config.Validate], which a program
// calls once at start. The typed getters ([Config.String], [Config.Bool],
// ...) never fail on user input: an environment value that does not parse
// is passed over (Validate reports it) and the next source decides.
//
// # The environment, and secrets
//
// Much of Cortex reads its settings from environment variables (the
// sandbox backends, layout). [Config.Apply] lets them see the file: every
// key whose effective value comes from a flag or the file is written to its
// environment variable in this process, in the form those readers expect
// (a true boolean as "1", a false one as ""). Children started later
// inherit them.
//
// Secret keys (api.token) are the exception: Apply never puts them in the
// environment, where every child process and /proc/<pid>/environ would see
// them; code that needs one asks the Config ([Config.String]). Listings go
// through [Config.Display], which shows a secret only as "<set>" or "".
//
// The home directory itself (NSYS_CORTEX_HOME) is not a key: the file lives
// under it.
//
// This package imports only the standard library and internal/layout; in
// particular it does not import internal/logging, whose level parser
// (logging.ParseLevels) is the one that turns log.level into levels. The
// check here accepts exactly the same grammar, and a test in
// internal/logging holds the two to it.
package config
