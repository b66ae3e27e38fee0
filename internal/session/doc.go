// Package session stores agent conversations as JSONL files, one file per
// session (<home>/sessions/<id>.jsonl, layout.Layout.SessionsDir), one
// entry per line. docs/sessions.md describes the format line by line.
//
// The entries form a tree: every entry names its parent, the first line (a
// header) is the root, and the session's leaf is the current position.
// Append adds a child of the leaf and moves the leaf to it; Branch moves the
// leaf back to any earlier entry (rewind), so later appends become siblings
// of what followed it; Fork copies the path root→entry into a new session.
// Messages returns what the model sees on the path to the leaf, honouring
// the latest compaction.
//
// Durability: each append is one write(2) of one whole line on a file
// opened with O_APPEND, under an flock held for the write, so lines of
// concurrent writers (goroutines or processes) never interleave. A line is
// committed once its newline is on disk; a torn last line left by a crash is
// ignored on load and cut off by the next append. A corrupt line anywhere
// else is an error naming its line number, unless the Lenient option is set.
//
// What the package must not do: redact. Tool results and every other payload
// are stored exactly as given; the caller (the loop) redacts secrets before
// it appends. Keys never reach a session because llm values never hold them.
package session
