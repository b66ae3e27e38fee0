// Package patch parses and applies patches in the apply_patch format of
// OpenAI's Codex CLI: a "*** Begin Patch" / "*** End Patch" envelope around
// Add File, Delete File and Update File sections, where an update is a list
// of hunks of context (' '), removed ('-') and added ('+') lines, optionally
// preceded by "@@" lines naming a line to seek to first. Models trained on
// Codex write this format; Parse accepts the small mistakes they make.
//
// Plan computes every change before anything is written, and Apply writes
// them all or, if a write fails, puts every file back: a patch never leaves
// the tree half-applied.
//
// The package does I/O only through the FS it is given and must not touch
// the local file system, the network or the environment itself. It does not
// judge paths: confining them to a workspace is the caller's job.
package patch
