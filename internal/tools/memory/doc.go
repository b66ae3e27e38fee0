// Package memory is an agent's long-term notebook: keyed notes that survive
// across sessions, with ranked full-text search. It backs the memory_search,
// memory_get and memory_update tools.
//
// Each agent has its own SQLite file, chosen by the caller (for example
// <home>/memory/<agent>.db). The file is opened in WAL mode with a busy
// timeout so several processes — two MCP servers serving the same agent, say —
// can share it; every write is one IMMEDIATE transaction. Notes live in a plain
// table; an external-content FTS5 index over key, content and tags is kept in
// step by triggers, so the index can never describe a note that is gone.
//
// Search text comes from a model and is treated as words, never as FTS5 query
// syntax: operators, quotes, parentheses and column filters in it are inert.
//
// What this package must not do: it must not share notes between agents (one
// file is one agent; there is no agent column to get wrong), it must not
// interpret note content or search text as anything but text, and it must not
// redact — callers mask secrets (package redact) before text is stored or
// shown. It does no network I/O and starts no goroutines.
package memory
