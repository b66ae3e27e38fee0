// Package logging is the daemon's log: log/slog JSON records, one per
// line, in <home>/logs/cortex.log, rotated when the file passes a size and
// at every UTC midnight, with old files removed by count and age.
//
// One [Logger] owns the file. Each part of the program takes its own
// *slog.Logger from [Logger.For] ("api", "sandbox", ...): its records carry
// a "component" attribute and are filtered by that component's level, so
// "info,api=debug" ([ParseLevels]) shows the API's debug records and no one
// else's. All components share the one file writer, behind one mutex, so
// lines never interleave. With [Options.Console] set the same records also
// go there, as slog text (key=value) lines for a person to read.
//
// [Tail] prints the log and follows it across rotations; it serves
// `nsys-cortex logs -f`.
//
// Records must never carry secrets: callers do not pass API tokens,
// provider keys or request bodies that may hold them. Nothing here
// redacts.
//
// This package imports only the standard library and lumberjack. The
// level syntax is also checked, without this package, by internal/config
// (for log.level); a test here holds the two to the same grammar.
package logging
